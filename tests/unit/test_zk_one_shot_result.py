"""The polling handler's results keep the contract of kazoo's own ``AsyncResult``: one outcome,
kazoo's time-out error, callbacks run on kazoo's completion thread, every waiter woken.

A hypothesis test runs the same operations on both and compares what each shows.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.handlers.threading import AsyncResult, KazooTimeoutError

from metadata.zk.handler import OneShotResult, PollingHandler


def test_the_handler_makes_one_shot_results() -> None:
    assert type(PollingHandler().async_result()) is OneShotResult


def test_a_value_or_an_error_comes_back_to_every_waiter() -> None:
    handler = PollingHandler()
    result = handler.async_result()
    got: list[Any] = []
    waiters = [threading.Thread(target=lambda: got.append(result.get())) for _ in range(8)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.05)
    assert not got and not result.ready()
    result.set("answer")
    for waiter in waiters:
        waiter.join(5)
    assert got == ["answer"] * 8
    assert result.successful() and result.get(block=False) == "answer" and result.wait(0)

    failing = handler.async_result()
    failing.set_exception(ValueError("no node"))
    with pytest.raises(ValueError, match="no node"):
        failing.get()
    assert failing.ready() and not failing.successful()


def test_no_outcome_times_out_with_kazoos_error() -> None:
    result = PollingHandler().async_result()
    started = time.monotonic()
    with pytest.raises(KazooTimeoutError):
        result.get(timeout=0.05)
    assert time.monotonic() - started >= 0.04
    with pytest.raises(KazooTimeoutError):
        result.get_nowait()
    assert result.wait(0.01) is False and result.exception is None


def test_callbacks_run_on_the_completion_thread_once_running_else_at_once() -> None:
    handler = PollingHandler()
    seen: list[tuple[Any, str]] = []

    def callback(done: Any) -> None:
        seen.append((done.get(), threading.current_thread().name))

    stopped = handler.async_result()
    stopped.rawlink(callback)
    stopped.set(1)  # the handler is not running: called here
    assert seen == [(1, threading.current_thread().name)]
    handler.start()
    try:
        running = handler.async_result()
        running.rawlink(callback)
        running.set(2)
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen[1][0] == 2 and seen[1][1] != threading.current_thread().name
    finally:
        handler.stop()


_OPERATIONS = st.lists(
    st.sampled_from(["set", "set_exception", "get", "wait", "rawlink", "unlink", "ready"]),
    max_size=12,
)


def _run(result: Any, operations: list[str]) -> list[Any]:
    """What ``result`` shows under ``operations`` (the handler is not running: callbacks at
    once)."""
    shown: list[Any] = []
    calls: list[Any] = []

    def callback(done: Any) -> None:
        calls.append(done.value)

    for index, operation in enumerate(operations):
        if operation == "set":
            result.set(index)
        elif operation == "set_exception":
            result.set_exception(KeyError(index))
        elif operation == "get":
            try:
                shown.append(("value", result.get(timeout=0)))
            except KazooTimeoutError:
                shown.append("timed out")
            except KeyError as exc:
                shown.append(("error", exc.args))
        elif operation == "wait":
            shown.append(result.wait(0))
        elif operation == "rawlink":
            result.rawlink(callback)
        elif operation == "unlink":
            result.unlink(callback)
        else:
            shown.append((result.ready(), result.successful()))
    return [*shown, ("callbacks", list(calls))]


@settings(max_examples=300, deadline=None)
@given(_OPERATIONS)
def test_it_shows_what_kazoos_own_result_shows(operations: list[str]) -> None:
    handler = PollingHandler()  # (not started)
    assert _run(OneShotResult(handler), operations) == _run(AsyncResult(handler), operations)
