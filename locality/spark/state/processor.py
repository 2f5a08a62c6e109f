"""A Spark 4 ``StatefulProcessor`` (``transformWithStateInPandas``) run per task of the pinned
stage, its state in the task's object space (:mod:`.processor_state`).

:class:`ProcessorFunction` is the ``QuerySpec.func`` of such a query; :func:`task_steps`
of :mod:`.runner` hands the batch to its :meth:`ProcessorFunction.task_steps`, which does
per task what Spark's ``TransformWithStateInPandasExec`` does per partition:

1. a fresh copy of the processor (``copy.deepcopy``), ``init(handle)``;
2. per key with rows or an initial state (:attr:`TaskBatch.initial`, the query's first batch
   only), keys in (key group, key) order: ``handleInitialState(key, initialState,
   timerValues)`` with the key's initial-state rows (its output ignored, as Spark's; with
   the Row-based ``transformWithState``, once per row, :mod:`.processor_rows`), then
   ``handleInputRows(key, iter([rows]), timerValues)`` if the key has rows; the DataFrames
   ``handleInputRows`` yields are the output;
3. the expired timers, all keys (also those with rows in the batch), in (expiry, key) order:
   ProcessingTime fires a timer whose expiry is at or before the batch's processing time,
   EventTime one at or before the batch's watermark (as Spark's
   ``TimerStateImpl.getExpiredTimers``, :func:`timer_due`); each fires
   ``handleExpiredTimer(key, timerValues, ExpiredTimerInfo)`` once and is then deleted;
4. ``close()``; values whose TTL passed are dropped from the state; the batch is checkpointed.

``timerValues`` give the batch's processing time and watermark (both -1 in time mode None; the
watermark -1 without an event-time column, as in Spark). In time mode EventTime the late rows
are dropped before the batch reaches here (:mod:`.eventtime`). Errors from the processor fail
the task naming the key, as for a function (:class:`.runner.StatefulFunctionError`). What is not
supported is refused by :meth:`ProcessorFunction.check` on the driver, before the query starts:
``EventTime`` without an event-time column. Imports pandas lazily.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from locality.spark.state.processor_rows import frame_of_rows, rows_of
from locality.spark.state.processor_state import (
    TIME_MODES,
    TIMERS,
    ProcessorContext,
    ProcessorUsageError,
    StateHandle,
    key_text,
)
from locality.spark.state.schema import SchemaError, StateValueError
from locality.spark.state.store import open_task_state

if TYPE_CHECKING:
    import pandas as pd

    from locality.spark.state.runner import QuerySpec, TaskBatch, TaskSteps

__all__ = ["ExpiredTimerInfo", "ProcessorFunction", "TimerValues", "time_mode_of", "timer_due"]


class TimerValues:
    """pyspark's ``TimerValues``: the batch's processing time and watermark."""

    def __init__(self, currentProcessingTimeInMs: int = -1, currentWatermarkInMs: int = -1):
        self._processing = currentProcessingTimeInMs
        self._watermark = currentWatermarkInMs

    def getCurrentProcessingTimeInMs(self) -> int:
        return self._processing

    def getCurrentWatermarkInMs(self) -> int:
        return self._watermark


class ExpiredTimerInfo:
    """pyspark's ``ExpiredTimerInfo``: the expiry of the timer that fired."""

    def __init__(self, expiryTimeInMs: int = -1) -> None:
        self._expiry = expiryTimeInMs

    def getExpiryTimeInMs(self) -> int:
        return self._expiry


def time_mode_of(mode: object) -> str:
    """``mode`` as one of :data:`TIME_MODES` (case-insensitive), else a one-line error."""
    for known in TIME_MODES:
        if isinstance(mode, str) and mode.lower() == known.lower():
            return known
    raise ProcessorUsageError(f"timeMode must be one of {TIME_MODES}, got {mode!r}")


@dataclass(frozen=True)
class ProcessorFunction:
    """A ``StatefulProcessor`` and its time mode, as a query's function (module docstring)."""

    processor: Any
    time_mode: str = "None"
    watermark: bool = False  # the query has an event-time column (event_time=)
    rows: bool = False  # pyspark's Row-based transformWithState (:mod:`.processor_rows`)

    def check(self) -> None:
        """Refuse, on the driver, what affinity does not run: called before the query starts
        (the processor's ``init`` runs once against a handle without state, as Spark's driver
        does, so schemas and TTLs are checked there)."""
        mode = time_mode_of(self.time_mode)
        if mode == "EventTime" and not self.watermark:
            raise ProcessorUsageError(
                "timeMode 'EventTime' needs an event-time watermark: pass event_time=(column, "
                "delay), as withWatermark(column, delay) before transformWithStateInPandas"
            )
        for method in ("init", "handleInputRows"):
            if not callable(getattr(self.processor, method, None)):
                raise ProcessorUsageError(
                    f"processor must be a StatefulProcessor: {type(self.processor).__name__} "
                    f"has no {method}()"
                )
        processor = copy.deepcopy(self.processor)
        try:
            processor.init(StateHandle(ProcessorContext(None, mode)))
        except (SchemaError, ProcessorUsageError) as exc:
            raise ProcessorUsageError(f"{type(processor).__name__}.init: {exc}") from None
        _close(processor)

    def __call__(self, *args: Any) -> Iterator[Any]:
        raise TypeError("a ProcessorFunction runs whole task batches (task_steps)")

    def task_steps(self, spec: QuerySpec, work: TaskBatch, location: str) -> TaskSteps:
        """One task's micro-batch (module docstring), output frame by output frame, as a
        function's (:func:`locality.spark.state.runner.task_steps`)."""
        from locality.spark.state.runner import Ran

        space, opened = open_task_state(
            spec.store, work.task, work.key_groups, work.start, location
        )
        began = time.perf_counter()
        mode = time_mode_of(self.time_mode)
        context = ProcessorContext(space, mode, *_times(mode, work))
        run = _Run(copy.deepcopy(self.processor), context, spec, work.batch, self.rows)
        handle = StateHandle(context)
        run.guard(None, lambda: run.processor.init(handle))
        handle.in_init = False
        yield from run.taken()
        for frames in run.handle_keys(work):
            yield from frames
        fired = run.fire_timers() if mode != "None" else 0
        run.guard(None, lambda: _close(run.processor))
        yield from run.taken()
        _drop_expired(context, handle.ttl_names)
        return Ran((space, opened, began), (run.calls, fired))


def _times(mode: str, work: TaskBatch) -> tuple[int, int]:
    """(processing time, watermark) the processor sees: -1 and -1 in time mode None; the
    watermark -1 without an event-time column."""
    if mode == "None":
        return -1, -1
    return work.batch_time_ms, -1 if work.watermark_ms is None else work.watermark_ms


def timer_due(mode: str, context: ProcessorContext) -> int:
    """A timer fires in this batch if its expiry is at or before this: the batch's watermark in
    time mode EventTime, else its processing time."""
    return context.watermark_ms if mode == "EventTime" else context.batch_time_ms


def _close(processor: Any) -> None:
    close = getattr(processor, "close", None)
    if callable(close):
        close()


class _Run:
    """One task batch's calls of the processor: their output, errors named by key."""

    def __init__(
        self,
        processor: Any,
        context: ProcessorContext,
        spec: QuerySpec,
        batch: int,
        rows: bool = False,
    ):
        self.processor = processor
        self.rows = rows
        self.context = context
        self.spec = spec
        self.batch = batch
        self.outputs: list[pd.DataFrame] = []
        self.calls = 0
        self.initial_keys = 0  # keys whose initial state was handled

    def guard(self, key: tuple[Any, ...] | None, call: Callable[[], Any]) -> Any:
        from locality.spark.state.runner import StatefulFunctionError

        where = f"batch {self.batch}" + (f", key {key!r}" if key is not None else "")
        try:
            return call()
        except StateValueError as exc:
            raise StatefulFunctionError(f"{where}: a state value does not fit: {exc}") from None
        except Exception as exc:
            raise StatefulFunctionError(
                f"{where}: the stateful processor raised {type(exc).__name__}: {exc}"
            ) from exc

    def taken(self) -> list[pd.DataFrame]:
        """The output frames collected since the last call."""
        frames, self.outputs = self.outputs, []
        return frames

    def collect(self, key: tuple[Any, ...], call: Callable[[], Iterable[Any] | None]) -> None:
        from locality.spark.state.runner import _output_frame

        self.calls += 1
        columns = self.spec.output_columns
        if self.rows:
            self.outputs.append(self.guard(key, lambda: frame_of_rows(call() or (), columns)))
            return
        self.outputs += self.guard(key, lambda: [_output_frame(f, columns) for f in (call() or ())])

    def handle_keys(self, work: TaskBatch) -> Iterator[list[pd.DataFrame]]:
        """Step 2 of the module docstring, per key in (key group, key) order: its initial state
        first if the batch has one (``handleInitialState``, no output), then its rows; each
        key's output frames as soon as it ran. Without an initial state the rows stream key by
        key as they come (Spark sorted them); with one (a first batch) they are in memory."""
        if not work.initial:
            from locality.spark.state.runner import ordered_rows

            for group_id, key, frame in ordered_rows(work.rows):
                self._input_rows(group_id, key, frame)
                yield self.taken()
            return
        rows = {(g, key_text(k)): (k, frame) for g, k, frame in work.rows}
        initial = {(g, key_text(k)): (k, frame) for g, k, frame in work.initial}
        for group_id, text in sorted(rows.keys() | initial.keys()):
            if (group_id, text) in initial:
                key, state = initial[group_id, text]
                self._initial_state(group_id, key, state)
            if (group_id, text) in rows:
                key, frame = rows[group_id, text]
                self._input_rows(group_id, key, frame)
                yield self.taken()

    def _initial_state(self, group_id: int, key: tuple[Any, ...], state: pd.DataFrame) -> None:
        context = self.context
        context.group_id, context.key = group_id, key_text(key)
        values = TimerValues(context.batch_time_ms, context.watermark_ms)
        for one in rows_of(state) if self.rows else [state]:  # Rows: one call per row
            self.guard(key, partial(_initial, self.processor, key, one, values))
        self.initial_keys += 1

    def _input_rows(self, group_id: int, key: tuple[Any, ...], frame: pd.DataFrame) -> None:
        context = self.context
        context.group_id, context.key = group_id, key_text(key)
        values = TimerValues(context.batch_time_ms, context.watermark_ms)
        given = iter(rows_of(frame)) if self.rows else iter([frame])
        self.collect(key, partial(self.processor.handleInputRows, key, given, values))

    def fire_timers(self) -> int:
        """Step 3 of the module docstring; the number of timers fired."""
        context = self.context
        due = timer_due(context.time_mode, context)
        assert context.space is not None
        pending: list[tuple[int, int, str]] = []
        for group_id in context.space.key_groups:
            group = context.space.group(group_id)
            if TIMERS in group:
                for text, held in group.get_map(TIMERS).items():
                    timers = held if isinstance(held, list) else []
                    pending += [
                        (t, group_id, text) for t in timers if isinstance(t, int) and t <= due
                    ]
        fired = 0
        for expiry, group_id, text in sorted(pending):
            held = context.space.group(group_id).get_map(TIMERS).get(text)
            if not isinstance(held, list) or expiry not in held:
                continue  # deleted by a timer that fired before it
            context.group_id, context.key = group_id, text
            key = tuple(json.loads(text))
            values = TimerValues(context.batch_time_ms, context.watermark_ms)
            self.collect(
                key, partial(_expired, self.processor, key, values, ExpiredTimerInfo(expiry))
            )
            StateHandle(context).deleteTimer(expiry)
            fired += 1
        return fired


def _initial(processor: Any, key: tuple[Any, ...], state: Any, values: TimerValues) -> None:
    """``handleInitialState`` (a no-op when the processor has none, as pyspark's base class)."""
    handler = getattr(processor, "handleInitialState", None)
    if callable(handler):
        handler(key, state, values)


def _expired(processor: Any, key: tuple[Any, ...], values: TimerValues, info: Any) -> Any:
    handler = getattr(processor, "handleExpiredTimer", None)
    return handler(key, values, info) if callable(handler) else ()


def _drop_expired(context: ProcessorContext, names: list[str]) -> None:
    """Remove the entries whose TTL passed (Spark evicts them at the end of the batch too)."""
    if context.space is None:
        return
    for name in names:
        for group_id in context.space.key_groups:
            group = context.space.group(group_id)
            if name not in group:
                continue
            entries = group.get_map(name)
            for entry, stored in list(entries.items()):
                if name.startswith("tws/list/") and isinstance(stored, list):
                    live = [i for i in stored if not context.expired(i[1])]  # type: ignore[index]
                    if live and len(live) != len(stored):
                        entries[entry] = live
                    elif not live:
                        del entries[entry]
                elif isinstance(stored, list) and context.expired(stored[1]):
                    del entries[entry]
        context.forget_map(name)
