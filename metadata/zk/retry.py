"""The retry loop of every ZooKeeper call, and the mapping of kazoo errors to the store's errors.

:func:`call_with_retries` runs one attempt function; only if it fails, tenacity retries it (a
call that succeeds at once, nearly all of them, builds no retry machinery): transient failures
(``ConnectionLoss``, ``SessionMoved``, ``OperationTimeout``, a request timeout, not connected) are
retried with exponential back-off up to 1 s, at most ``max_attempts`` attempts and ``deadline_s``
seconds, each retry logged (``zk.retry``); then :class:`StoreUnavailable` is raised. Every other
kazoo error becomes a :class:`~metadata.zk.errors.ZkStoreError` naming the path (``NoAuth`` ->
:class:`PermissionDenied`, ``NoNode`` -> :class:`NotFound`, ...): no kazoo exception escapes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import tenacity
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError

from metadata.zk.errors import (
    NodeExists,
    NotFound,
    PermissionDenied,
    SessionLost,
    StoreUnavailable,
    VersionMismatch,
    WriteConflict,
    ZkStoreError,
)

__all__ = ["TRANSIENT", "NotConnected", "call_with_retries", "store_error"]

T = TypeVar("T")


class NotConnected(Exception):
    """The client has no connection right now (transient)."""


TRANSIENT: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    SessionMovedError,
    OperationTimeoutError,
    KazooTimeoutError,
    NotConnected,
)


def call_with_retries(
    what: str,
    path: str,
    attempt: Callable[[], T],
    *,
    log: Any,
    deadline_s: float,
    max_attempts: int,
) -> T:
    """Run ``attempt`` with bounded retries of transient failures; map kazoo errors."""
    started = time.monotonic()
    try:
        return attempt()  # the common case: no retry machinery is built for it
    except TRANSIENT as exc:
        first: BaseException = exc
    except KazooException as exc:
        raise store_error(exc, what, path) from exc
    if max_attempts <= 1 or time.monotonic() - started >= deadline_s:
        raise _unavailable(first, what, path, started, log)
    wait = tenacity.wait_exponential(multiplier=0.05, max=1.0) + tenacity.wait_random(0, 0.05)
    pause = 0.05 + random.uniform(0, 0.05)  # as the retry loop would wait after attempt 1
    log.warning(
        "zk.retry", what=what, path=path, attempt=1, error=repr(first), next_wait_s=round(pause, 3)
    )
    time.sleep(pause)
    retrying = tenacity.Retrying(
        stop=(
            tenacity.stop_after_delay(max(0.0, deadline_s - (time.monotonic() - started)))
            | tenacity.stop_after_attempt(max_attempts - 1)
        ),
        wait=wait,
        retry=tenacity.retry_if_exception_type(TRANSIENT),
        before_sleep=_log_retry(log, what, path, done=1),
        reraise=True,
    )
    try:
        for try_ in retrying:
            with try_:
                return attempt()
    except TRANSIENT as exc:
        raise _unavailable(exc, what, path, started, log) from exc
    except KazooException as exc:
        raise store_error(exc, what, path) from exc
    raise AssertionError("unreachable: tenacity either returns or raises")


def _unavailable(
    exc: BaseException, what: str, path: str, started: float, log: Any
) -> StoreUnavailable:
    elapsed = time.monotonic() - started
    log.error("zk.unavailable", what=what, path=path, error=repr(exc), seconds=elapsed)
    error = StoreUnavailable(
        path,
        f"{what}: ZooKeeper did not answer within {elapsed:.1f}s "
        f"(bounded retries of {type(exc).__name__})",
    )
    error.__cause__ = exc
    return error


def store_error(exc: KazooException, what: str, path: str) -> ZkStoreError:
    """The store's error for a (non-transient) kazoo error of ``what`` on ``path``."""
    if isinstance(exc, NoAuthError | AuthFailedError):
        return PermissionDenied(
            path,
            f"{what}: permission denied ({type(exc).__name__}); the job is protected by an "
            "ACL and this client has no or other credentials (zookeeper.auth)",
        )
    if isinstance(exc, SessionExpiredError):  # also ConnectionClosedError
        return SessionLost(path, f"{what}: the ZooKeeper session expired or was closed")
    if isinstance(exc, NoNodeError):
        return NotFound(path, f"{what}: no such node (or no parent node)")
    if isinstance(exc, NodeExistsError):
        return NodeExists(path, f"{what}: the node already exists")
    if isinstance(exc, BadVersionError):
        return VersionMismatch(path, f"{what}: the node changed meanwhile")
    if isinstance(exc, NotEmptyError):
        return WriteConflict(path, f"{what}: the node has children")
    return ZkStoreError(path, f"{what}: {type(exc).__name__}: {exc}")


def _log_retry(
    log: Any, what: str, path: str, done: int = 0
) -> Callable[[tenacity.RetryCallState], None]:
    """Logs each retry; ``done``: attempts made before the retry loop started."""

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "zk.retry",
            what=what,
            path=path,
            attempt=state.attempt_number + done,
            error=repr(error),
            next_wait_s=round(state.upcoming_sleep, 3),
        )

    return before_sleep
