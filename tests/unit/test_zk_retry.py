"""The retry loop: a call that succeeds runs once, with no retry machinery; a transient failure is
retried (and logged); bounded attempts end in StoreUnavailable; other errors are mapped at once."""

from __future__ import annotations

from typing import Any

import pytest
import structlog.testing
import tenacity
from kazoo.exceptions import ConnectionLoss, NoNodeError

from metadata.zk.errors import NotFound, StoreUnavailable
from metadata.zk.retry import call_with_retries

LOG = structlog.get_logger("test")


class Flaky:
    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def call(attempt: Any, max_attempts: int = 5) -> Any:
    return call_with_retries(
        "read x", "/x", attempt, log=LOG, deadline_s=10.0, max_attempts=max_attempts
    )


def test_a_call_that_succeeds_builds_no_retry_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_retrying(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a retry loop was built for a call that succeeded")

    monkeypatch.setattr(tenacity, "Retrying", no_retrying)
    attempt = Flaky()
    assert call(attempt) == "ok" and attempt.calls == 1


def test_transient_failures_are_retried_and_logged() -> None:
    attempt = Flaky(ConnectionLoss(), ConnectionLoss())
    with structlog.testing.capture_logs() as logs:
        assert call(attempt) == "ok"
    assert attempt.calls == 3
    assert [e["attempt"] for e in logs if e["event"] == "zk.retry"] == [1, 2]


def test_bounded_attempts_end_in_store_unavailable() -> None:
    attempt = Flaky(*[ConnectionLoss() for _ in range(10)])
    with pytest.raises(StoreUnavailable, match="read x"):
        call(attempt, max_attempts=3)
    assert attempt.calls == 3
    single = Flaky(ConnectionLoss())
    with pytest.raises(StoreUnavailable):
        call(single, max_attempts=1)
    assert single.calls == 1


def test_other_errors_are_mapped_at_once_first_attempt_or_later() -> None:
    with pytest.raises(NotFound):
        call(Flaky(NoNodeError()))
    later = Flaky(ConnectionLoss(), NoNodeError())
    with pytest.raises(NotFound):
        call(later)
    assert later.calls == 2
