"""The options both stateful queries take (``stateful_foreach_batch``'s :class:`StatefulQuery`
and the Kafka query), in one place: each query's constructor takes its own arguments and
``**options: Unpack[QueryOptions]``, passed on to
:class:`~coordinator.streaming.runtime.QueryRuntime` as they are.

- :class:`RuntimeOptions`: the driver's: ``timeout`` (``"NoTimeout"``, as
  ``applyInPandasWithState``'s), ``storage`` (None: ``state.checkpoint_dir``), ``coordinator``
  (``"embedded"``: a coordinator replica in the driver, or ``"external"``), ``locality_wait``
  (``"30s"``: how long a task waits for its executor) and ``in_force_timeout_s`` (120: how long a
  batch waits for a job model every executor follows, and for the application's first executors
  to register when none has yet);
- :class:`OutputOptions`: a Kafka output topic's: ``output_topic`` (None: none),
  ``output_key_column`` (``"key"``; None: no key), ``output_value_column`` (None: the row as
  JSON), ``transactional`` (True) and ``delivery`` (``"exactly-once"`` or ``"at-least-once"``).

Python does not check a ``TypedDict``'s keys at run time: :func:`check_options` names a
misspelt one (a ``TypeError``, as for any unknown keyword argument); :func:`check_runtime_options`
names a value no query takes (a :class:`~coordinator.streaming.reports.StreamingUsageError`), and
:func:`state_storage` is where the checkpoints go. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from coordinator.config import JobConfig
from coordinator.streaming.reports import StreamingUsageError
from locality.spark.state import (
    EVENT_TIME_TIMEOUT,
    TIMEOUTS,
    DirectoryStateStorage,
    EventTime,
    Storage,
)

__all__ = [
    "OutputOptions",
    "QueryOptions",
    "RuntimeOptions",
    "check_options",
    "check_runtime_options",
    "state_storage",
]


class RuntimeOptions(TypedDict, total=False):
    """The driver's options (module docstring)."""

    timeout: str
    storage: Storage | None
    coordinator: str
    locality_wait: str | None
    in_force_timeout_s: float


class OutputOptions(TypedDict, total=False):
    """A Kafka output topic's options (module docstring)."""

    output_topic: str | None
    output_key_column: str | None
    output_value_column: str | None
    transactional: bool
    delivery: str


class QueryOptions(RuntimeOptions, OutputOptions, total=False):
    """Both."""


def check_options(options: Mapping[str, Any], where: str) -> None:
    """A ``TypeError`` naming the first of ``options`` no query takes (``where``: the caller)."""
    known = QueryOptions.__optional_keys__ | QueryOptions.__required_keys__
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")


def check_runtime_options(
    key_columns: tuple[str, ...], options: RuntimeOptions, event_time: EventTime | None
) -> tuple[str, str]:
    """The query's ``timeout`` and ``coordinator``, or a :class:`StreamingUsageError` naming the
    key columns or the option value no query takes."""
    timeout = options.get("timeout", "NoTimeout")
    coordinator = options.get("coordinator", "embedded")
    if not key_columns or not all(isinstance(c, str) and c for c in key_columns):
        raise StreamingUsageError(f"key_columns must name columns, got {key_columns!r}")
    if timeout not in TIMEOUTS:
        raise StreamingUsageError(f"timeout must be one of {TIMEOUTS}, got {timeout!r}")
    if timeout == EVENT_TIME_TIMEOUT and event_time is None:
        raise StreamingUsageError(
            "timeout='EventTimeTimeout' needs an event-time watermark: pass "
            "event_time=(column, delay), as withWatermark(column, delay) in Spark"
        )
    if coordinator not in ("embedded", "external"):
        raise StreamingUsageError(
            f"coordinator must be 'embedded' or 'external', got {coordinator!r}"
        )
    return timeout, coordinator


def state_storage(storage: Storage | None, config: JobConfig) -> Storage:
    """Where the query's checkpoints go: ``storage``, else the job config's
    ``state.checkpoint_dir`` (a :class:`StreamingUsageError` when neither is given)."""
    if storage is not None:
        return storage
    if not config.state.checkpoint_dir:
        raise StreamingUsageError(
            "state.checkpoint_dir is not set in the job config: stateful_foreach_batch needs a "
            "durable directory for its checkpoints (or pass storage=...)"
        )
    return DirectoryStateStorage(config.state.checkpoint_dir)
