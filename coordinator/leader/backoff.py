"""Backing off after a failed election or leadership (tenacity), and what the log says.

A replica whose election fails (``NoAuth``: no or wrong credentials; ZooKeeper unreachable) or
whose leadership fails early (the latest job model is corrupt, a store error right after taking
over) waits before taking part again: 0.5 s, doubling with jitter, at most ``BACKOFF_MAX_S``.
A leadership that lasted :data:`HEALTHY_LEADERSHIP_S` resets the wait. Without it a replica
facing corrupt data was elected 40-100 times a second, bumping the epoch each time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.exceptions import KazooException, NoAuthError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from metadata.errors import MetadataError

__all__ = [
    "BACKOFF_INITIAL_S",
    "BACKOFF_MAX_S",
    "HEALTHY_LEADERSHIP_S",
    "LeadershipFailed",
    "describe",
    "retrying",
]

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0
#: A leadership that ends with an error sooner than this counts as failed (the replica backs
#: off before leading again); a longer one rejoins the election at once.
HEALTHY_LEADERSHIP_S = 10.0


class LeadershipFailed(Exception):
    """An election or a leadership failed: back off before taking part again."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__(f"{reason}: {error}")
        self.reason = reason  # the metric label: election, reading_state, leading
        self.error = error


def describe(exc: BaseException) -> str:
    """One line for the log: a store error names its node; NoAuth says what to check."""
    if isinstance(exc, NoAuthError):
        return "NoAuthError: ZooKeeper refused access (no or wrong credentials: zookeeper.auth)"
    if isinstance(exc, MetadataError):
        return f"{type(exc).__name__}: {exc}"
    return repr(exc)


def failed(reason: str, exc: KazooException | MetadataError) -> LeadershipFailed:
    return LeadershipFailed(reason, describe(exc))


def retrying(
    stop: threading.Event,
    max_s: float,
    before_sleep: Callable[[RetryCallState], None],
    sleep: Callable[[float], None],
) -> Retrying:
    """Retry on :class:`LeadershipFailed` until ``stop`` is set, backing off up to ``max_s``;
    the last failure is raised when stopped."""
    return Retrying(
        retry=retry_if_exception_type(LeadershipFailed),
        wait=wait_exponential_jitter(
            multiplier=BACKOFF_INITIAL_S, max=max_s, jitter=BACKOFF_INITIAL_S
        ),
        stop=lambda _: stop.is_set(),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
