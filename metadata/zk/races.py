"""Compare-and-set writes that retry when another writer got there first.

A recipe that reads nodes, decides what to write and commits it with version checks raises
:class:`LostRace` (see :func:`lost_race`) when its transaction finds a node changed, created or
deleted meanwhile; :func:`retry_races` runs the read-decide-commit ``attempt`` again after a
short random pause, a bounded number of times, then raises
:class:`~metadata.zk.errors.WriteConflict`::

    def attempt() -> int:
        found = ops.get_many(paths, "read", folder)
        try:
            return ops.commit_batched(decide(found), "write")
        except TransactionRejected as exc:
            if lost_race(exc):
                raise LostRace(str(exc)) from exc
            raise

    written = retry_races(attempt, ops=ops, folder=folder, what="write lag",
                          event="zk.standby_lag_write_conflict", attempts=5, max_pause_s=0.05)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import tenacity
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from metadata.zk.errors import TransactionRejected, WriteConflict
from metadata.zk.ops import ZkOps

__all__ = ["LostRace", "lost_race", "retry_races"]

T = TypeVar("T")


class LostRace(Exception):
    """A compare-and-set lost to another writer; read again and retry."""


def lost_race(exc: TransactionRejected) -> bool:
    """True if another writer got there first: a node's version moved, or it was created or
    deleted meanwhile (or its folder was)."""
    return isinstance(exc.error, BadVersionError | NodeExistsError | NoNodeError)


def retry_races(
    attempt: Callable[[], T],
    *,
    ops: ZkOps,
    folder: str,
    what: str,
    event: str,
    attempts: int,
    max_pause_s: float,
) -> T:
    """``attempt()``, again after a random pause of at most ``max_pause_s`` while it raises
    :class:`LostRace` (logged as ``event``), ``attempts`` times in all; then WriteConflict
    naming ``folder`` and ``what``. Any other error propagates at once."""

    def log_race(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        ops.log.info(event, attempt=state.attempt_number, error=str(error))

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_random(0, max_pause_s),
        retry=tenacity.retry_if_exception_type(LostRace),
        before_sleep=log_race,
        reraise=True,
    )
    try:
        for call in retrying:
            with call:
                return attempt()
    except LostRace as exc:
        raise WriteConflict(
            folder, f"{what}: lost to a concurrent change {attempts} times in a row ({exc})"
        ) from exc.__cause__
    raise AssertionError("unreachable: tenacity either returns or raises")
