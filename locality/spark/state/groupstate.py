"""The ``state`` argument of an ``applyInPandasWithState`` function, for the affinity store.

:class:`KeyState` behaves as ``pyspark.sql.streaming.state.GroupState``: ``exists``, ``get``,
``getOption`` and ``hasTimedOut`` are properties; ``update(tuple)``, ``remove()``,
``setTimeoutDuration(ms)`` (processing-time timeouts only), ``getCurrentProcessingTimeMs()``.
One difference, on purpose: ``update`` checks the value against the state schema at once and
names the field that does not fit (Spark fails later, in the JVM, with a conversion error).
Event-time timeouts are not supported (``setTimeoutTimestamp`` and ``getCurrentWatermarkMs``
raise). Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locality.spark.state.schema import Field, check_state

__all__ = ["NO_TIMEOUT", "PROCESSING_TIME_TIMEOUT", "TIMEOUTS", "KeyState"]

NO_TIMEOUT = "NoTimeout"
PROCESSING_TIME_TIMEOUT = "ProcessingTimeTimeout"
#: The timeout configurations ``stateful_foreach_batch(timeout=...)`` accepts (pyspark's
#: ``GroupStateTimeout`` strings; ``EventTimeTimeout`` is not supported).
TIMEOUTS = (NO_TIMEOUT, PROCESSING_TIME_TIMEOUT)


class KeyState:
    """One key's state during one call of the function (see the module docstring)."""

    NO_TIMESTAMP = -1

    def __init__(
        self,
        value: Sequence[Any] | None,
        fields: Sequence[Field],
        *,
        batch_time_ms: int,
        timeout_conf: str = NO_TIMEOUT,
        has_timed_out: bool = False,
        timeout_ms: int = NO_TIMESTAMP,
    ) -> None:
        self._value = tuple(value) if value is not None else None
        self._fields = tuple(fields)
        self._batch_time_ms = batch_time_ms
        self._timeout_conf = timeout_conf
        self._has_timed_out = has_timed_out
        self._old_timeout = timeout_ms
        self._timeout = self.NO_TIMESTAMP  # reset at every call, as Spark does
        self.updated = False
        self.removed = False

    @property
    def exists(self) -> bool:
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        if self._value is None:
            raise ValueError("state.get: the state of this key does not exist (check state.exists)")
        return self._value

    @property
    def getOption(self) -> tuple[Any, ...] | None:
        return self._value

    @property
    def hasTimedOut(self) -> bool:
        return self._has_timed_out

    @property
    def oldTimeoutTimestamp(self) -> int:
        return self._old_timeout

    @property
    def value(self) -> tuple[Any, ...] | None:
        """The state after the call (None: none or removed)."""
        return self._value

    @property
    def timeout_ms(self) -> int:
        """The processing-time timeout set during the call (``NO_TIMESTAMP``: none)."""
        return self._timeout

    def update(self, newValue: Sequence[Any]) -> None:
        self._value = tuple(check_state(newValue, self._fields))
        self.updated, self.removed = True, False

    def remove(self) -> None:
        self._value = None
        self.updated, self.removed = False, True

    def setTimeoutDuration(self, durationMs: int) -> None:
        if isinstance(durationMs, bool) or not isinstance(durationMs, int):
            raise TypeError(
                f"setTimeoutDuration expects an int of milliseconds, got {durationMs!r}"
            )
        if self._timeout_conf != PROCESSING_TIME_TIMEOUT:
            raise RuntimeError(
                "setTimeoutDuration needs processing-time timeouts: pass "
                "timeout='ProcessingTimeTimeout' to stateful_foreach_batch"
            )
        if durationMs <= 0:
            raise ValueError(f"setTimeoutDuration expects a positive duration, got {durationMs}")
        self._timeout = self._batch_time_ms + durationMs

    def setTimeoutTimestamp(self, timestampMs: int) -> None:
        raise RuntimeError("event-time timeouts are not supported by stateful_foreach_batch")

    def getCurrentWatermarkMs(self) -> int:
        raise RuntimeError("stateful_foreach_batch has no event-time watermark")

    def getCurrentProcessingTimeMs(self) -> int:
        """The batch's processing time: the same in every attempt of the batch."""
        return self._batch_time_ms

    def __repr__(self) -> str:
        return f"KeyState(value={self._value!r}, hasTimedOut={self._has_timed_out})"
