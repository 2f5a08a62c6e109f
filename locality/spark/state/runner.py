"""Executor side of ``stateful_foreach_batch``: one task's micro-batch.

:func:`run_task_batch` opens the task's state (:mod:`.store`), calls the user's
``applyInPandasWithState`` function once per key with rows in this batch (in key order), then
once per key without rows whose timeout expired (no rows, ``state.hasTimedOut``): a timeout
strictly before the batch's processing time (``ProcessingTimeTimeout``) or its watermark
(``EventTimeTimeout``), as Spark (:func:`.groupstate.timed_out`). It keeps what each call left
in ``state``, checkpoints the batch and returns the output rows with the checkpoint token. Per
key group the state is two persisted maps: ``state`` (key -> the state tuple as a JSON list)
and ``timeouts`` (key -> timeout timestamp, keys with a timeout only; as in Spark a timeout set
on a removed state is kept), the key being the JSON list of its key-column values. Late rows
are dropped before the batch reaches here (:mod:`.pinned_task`, :mod:`.eventtime`).

If the function raises (or returns something that is not a DataFrame with the output columns,
or updates a state that does not fit the state schema) the task raises
:class:`StatefulFunctionError` naming the key; nothing is checkpointed and the in-memory copy is
dropped, so the batch fails with nothing committed. Imports pandas lazily.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from locality.spark.state.eventtime import EventTime
from locality.spark.state.groupstate import (
    EVENT_TIME_TIMEOUT,
    NO_TIMEOUT,
    PROCESSING_TIME_TIMEOUT,
    KeyState,
    timed_out,
)
from locality.spark.state.objectspace import KeyGroup, ObjectSpace
from locality.spark.state.schema import Field, StateValueError, to_python
from locality.spark.state.store import (
    OpenReport,
    StartPoint,
    StoreSpec,
    new_token,
    open_task_state,
    save_task_state,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "QuerySpec",
    "Ran",
    "StatefulFunctionError",
    "TaskBatch",
    "TaskOutcome",
    "run_on_executor",
    "run_task_batch",
    "task_steps",
]

StatefulFunction = Callable[[tuple[Any, ...], Iterator["pd.DataFrame"], KeyState], Iterator[Any]]


class StatefulFunctionError(RuntimeError):
    """The user's function failed for a key (the message names the key and the cause)."""


@dataclass(frozen=True)
class QuerySpec:
    """What every task of a query needs: the function, the schemas, the store."""

    func: StatefulFunction
    key_columns: tuple[str, ...]
    output_columns: tuple[str, ...]
    state_fields: tuple[Field, ...]
    timeout: str
    store: StoreSpec
    event_time: EventTime | None = None  # the event-time column and watermark delay

    @property
    def drops_late_rows(self) -> bool:
        """Whether late rows are dropped: with event-time timeouts, or a processor in time mode
        EventTime (Spark's ``watermarkPredicateForDataForLateEvents`` applies to those only)."""
        if self.event_time is None:
            return False
        mode = getattr(self.func, "time_mode", None)
        if isinstance(mode, str):
            return mode.lower() == "eventtime"
        return self.timeout == EVENT_TIME_TIMEOUT

    @property
    def row_values(self) -> bool:
        """Whether the function gets each row's values as Python values, as Arrow's ``as_py``
        gives them (a Row-based ``transformWithState`` processor: an integer column with nulls
        as ints and None), rather than pandas' (its floats)."""
        return getattr(self.func, "rows", False) is True


@dataclass(frozen=True)
class TaskBatch:
    """One task's part of a micro-batch: ``rows`` is (key group, key, rows of that key)."""

    task: str
    batch: int
    start_batch: int  # the committed batch its state starts from (-1: none)
    token: str | None  # that commit's token for this task
    key_groups: tuple[int, ...]
    batch_time_ms: int
    # a sequence (any order), or an iterator sorted by key group and key (streamed once)
    rows: Iterable[tuple[int, tuple[Any, ...], pd.DataFrame]]
    heads: Mapping[int, str] | None = None  # the start commit's chain heads (None: format 1)
    watermark_ms: int | None = None  # the batch's event-time watermark (None: no event time)
    # The initial state's rows per key, as ``rows`` (a processor's first batch only; else ()).
    initial: tuple[tuple[int, tuple[Any, ...], pd.DataFrame], ...] = ()

    @property
    def start(self) -> StartPoint:
        heads = self.heads
        if heads is not None:
            heads = {g: h for g, h in heads.items() if g in set(self.key_groups)}
        return StartPoint(self.start_batch, self.token, heads)


@dataclass(frozen=True)
class TaskOutcome:
    """What a task did: its output rows, its checkpoint token and how its state was found."""

    task: str
    output: pd.DataFrame
    token: str
    key_groups: tuple[int, ...]
    source: str  # memory | local | restored | new
    bytes_restored: int
    bytes_local: int
    bytes_written: int
    keys_called: int
    timed_out: int
    open_s: float
    run_s: float
    heads: Mapping[int, str] = field(default_factory=dict)  # key group -> its chain's head
    prepared: Any = None  # what ``prepare`` made of the output (e.g. an Arrow table)


def _key_json(key: Sequence[Any]) -> str:
    return json.dumps([to_python(v) for v in key], separators=(",", ":"))


@dataclass(frozen=True)
class Ran:
    """How a task's calls went, for :func:`finish_task_batch`: the space, how it was opened and
    when the calls began; (keys called, of which timed out)."""

    opened: tuple[ObjectSpace, OpenReport, float]
    called: tuple[int, int]


#: A task's calls: yields each output frame as a call produces it, returns how they went.
TaskSteps = Generator["pd.DataFrame", None, Ran]


def run_task_batch(
    spec: QuerySpec,
    work: TaskBatch,
    location: str,
    prepare: Callable[[pd.DataFrame], Any] | None = None,
) -> TaskOutcome:
    """Run one task's micro-batch on this executor (see the module docstring). ``prepare``
    checks and converts the output before anything is checkpointed (it raises
    :class:`StatefulFunctionError` for output that does not fit): nothing of a batch whose
    output is refused is written anywhere."""
    steps = task_steps(spec, work, location)
    outputs: list[pd.DataFrame] = []
    while True:
        try:
            outputs.append(next(steps))
        except StopIteration as stop:
            ran: Ran = stop.value
            break
    return finish_task_batch(spec, work, location, ran.opened, outputs, ran.called, prepare)


def task_steps(spec: QuerySpec, work: TaskBatch, location: str) -> TaskSteps:
    """The calls of a task's batch, output frame by output frame (nothing checkpointed): the
    function per key of ``work.rows`` (sorted here when they are a sequence; an iterator is
    taken in its order, sorted by key group and key already), then the expired timeouts."""
    own = getattr(spec.func, "task_steps", None)
    if own is not None:  # a StatefulProcessor (locality.spark.state.processor) runs its own way
        steps: TaskSteps = own(spec, work, location)
        return steps
    return _function_steps(spec, work, location)


def ordered_rows(
    rows: Iterable[tuple[int, tuple[Any, ...], pd.DataFrame]],
) -> Iterable[tuple[int, tuple[Any, ...], pd.DataFrame]]:
    """``rows`` in (key group, key text) order when they are a sequence; else as they come."""
    if isinstance(rows, Sequence):
        return sorted(rows, key=lambda r: (r[0], _key_json(r[1])))
    return rows


def _function_steps(spec: QuerySpec, work: TaskBatch, location: str) -> TaskSteps:
    space, opened = open_task_state(spec.store, work.task, work.key_groups, work.start, location)
    began = time.perf_counter()
    seen: set[tuple[int, str]] = set()
    for group_id, key, rows in ordered_rows(work.rows):
        key_text = _key_json(key)
        seen.add((group_id, key_text))
        yield from _call(spec, space.group(group_id), key, key_text, [rows], work, timed_out=False)
    expired = _expired(space, work, seen, spec.timeout) if spec.timeout != NO_TIMEOUT else []
    for group_id, key_text in expired:
        key = tuple(json.loads(key_text))
        yield from _call(spec, space.group(group_id), key, key_text, [], work, timed_out=True)
    return Ran((space, opened, began), (len(seen) + len(expired), len(expired)))


def finish_task_batch(
    spec: QuerySpec,
    work: TaskBatch,
    location: str,
    opened: tuple[ObjectSpace, OpenReport, float],
    outputs: Sequence[pd.DataFrame],
    called: tuple[int, int],
    prepare: Callable[[pd.DataFrame], Any] | None,
) -> TaskOutcome:
    """The end of a task's batch, whatever ran it: the output joined and checked (``prepare``)
    *before* the checkpoint, the checkpoint under a fresh attempt token, the outcome with the
    chain heads the commit needs. ``opened``: (the space, how it was opened, when the run began);
    ``called``: (keys called, of which timed out)."""
    import pandas as pd

    space, report_open, began = opened
    frames = [f for f in outputs if len(f)]
    output = pd.concat(frames, ignore_index=True) if frames else _empty(spec.output_columns)
    prepared = prepare(output) if prepare is not None else None
    token = new_token()
    report = save_task_state(spec.store, work.task, space, work.batch, location, token)
    return TaskOutcome(
        task=work.task,
        output=output,
        token=token,
        key_groups=space.key_groups,
        source=report_open.source,
        bytes_restored=report_open.bytes_restored,
        bytes_local=report_open.bytes_local,
        bytes_written=report.bytes_written,
        keys_called=called[0],
        timed_out=called[1],
        open_s=report_open.seconds,
        run_s=time.perf_counter() - began,
        heads=space.heads(),
        prepared=prepared,
    )


def run_on_executor(task: str, payload: tuple[QuerySpec, TaskBatch]) -> TaskOutcome:
    """``run_pinned``'s function: the task's batch at this executor's location id (the one the
    driver registered it with: ``AFFINITY_LOCATION_ID``, else the host)."""
    from locality.spark.provider import SparkExecutorLocationIdProvider

    spec, work = payload
    assert work.task == task, (task, work.task)
    return run_task_batch(spec, work, SparkExecutorLocationIdProvider().location_id())


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: [] for c in columns})


def timeout_threshold(timeout: str, work: TaskBatch) -> int | None:
    """What a key's timeout is compared with in this batch (None: nothing times out): the
    batch's processing time, or its watermark for event-time timeouts."""
    if timeout == PROCESSING_TIME_TIMEOUT:
        return work.batch_time_ms
    if timeout == EVENT_TIME_TIMEOUT:
        return work.watermark_ms
    return None


def _expired(
    space: ObjectSpace, work: TaskBatch, seen: set[tuple[int, str]], timeout: str
) -> list[tuple[int, str]]:
    """Keys without rows in this batch whose timeout expired (:func:`.groupstate.timed_out`)."""
    threshold = timeout_threshold(timeout, work)
    if threshold is None:
        return []
    expired = []
    for group_id in space.key_groups:
        group = space.group(group_id)
        if "timeouts" not in group:
            continue
        for key_text, at in group.get_map("timeouts").items():
            if timed_out(at, threshold) and (group_id, key_text) not in seen:
                expired.append((group_id, key_text))
    return sorted(expired)


def _call(
    spec: QuerySpec,
    group: KeyGroup,
    key: tuple[Any, ...],
    key_text: str,
    frames: list[pd.DataFrame],
    work: TaskBatch,
    *,
    timed_out: bool,
) -> list[pd.DataFrame]:
    """Call the function for one key, keep its state, return its output frames."""
    states = group.get_map("state", create=True)
    timeouts = group.get_map("timeouts", create=True)
    old = states.get(key_text)
    old_timeout = timeouts.get(key_text, KeyState.NO_TIMESTAMP)
    state = KeyState(
        old if isinstance(old, list) else None,
        spec.state_fields,
        batch_time_ms=work.batch_time_ms,
        timeout_conf=spec.timeout,
        has_timed_out=timed_out,
        timeout_ms=old_timeout if isinstance(old_timeout, int) else KeyState.NO_TIMESTAMP,
        watermark_ms=work.watermark_ms if spec.event_time is not None else None,
    )
    try:
        result = spec.func(tuple(key), iter(frames), state)
        produced = [_output_frame(frame, spec.output_columns) for frame in (result or ())]
    except StateValueError as exc:
        raise StatefulFunctionError(
            f"batch {work.batch}, key {key!r}: the state does not fit state_schema: {exc}"
        ) from None
    except Exception as exc:
        raise StatefulFunctionError(
            f"batch {work.batch}, key {key!r}: the stateful function raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if state.removed or (state.value is None and key_text in states):
        states.pop(key_text, None)
    elif state.updated and state.value is not None:
        states[key_text] = list(state.value)
    if state.timeout_ms != KeyState.NO_TIMESTAMP:  # kept with no state too, as Spark keeps it
        timeouts[key_text] = state.timeout_ms
    elif key_text in timeouts:
        del timeouts[key_text]
    return produced


def _output_frame(frame: object, columns: Sequence[str]) -> pd.DataFrame:
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"it must yield pandas DataFrames, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise TypeError(
            f"it yielded a DataFrame without the output_schema column(s) {missing} "
            f"(it has {list(frame.columns)})"
        )
    return frame[list(columns)]
