"""Event time in the state layer (no Spark): the watermark rule through commit records (a
hypothesis model of Spark's tracker), late rows, ``setTimeoutTimestamp`` and event-time timeouts
of a function, event-time timers of a processor, and the boundaries Spark draws (a timeout fires
strictly after the watermark passes it, a timer at it)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from locality.spark.state import (
    EVENT_TIME_TIMEOUT,
    NO_TIMEOUT,
    PROCESSING_TIME_TIMEOUT,
    CommitRecord,
    DirectoryStateStorage,
    EventTime,
    EventTimeError,
    KeyState,
    QuerySpec,
    StoreSpec,
    TaskBatch,
    TaskOutcome,
    Watermark,
    forget_memory,
    latest_commit,
    parse_schema,
    run_task_batch,
    write_commit,
)
from locality.spark.state.eventtime import (
    batch_watermark,
    commit_extra,
    drop_late,
    parse_delay,
    scan,
)
from locality.spark.state.processor import ProcessorFunction
from locality.spark.state.schema import parse_schema as fields_of

MAXP = 2
GROUPS = (0, 1)
STATE = fields_of("n long", "state")


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    forget_memory()
    yield
    forget_memory()


# ---------------------------------------------------------------- the delay and the watermark


def test_delays_parse_as_spark_intervals() -> None:
    assert parse_delay("10 seconds") == 10_000
    assert parse_delay("1 minute 30 seconds") == 90_000
    assert parse_delay("interval 2 hours") == 7_200_000
    assert parse_delay("1 second") == parse_delay("1000 milliseconds") == 1000
    assert parse_delay("1 month") == 31 * 86_400_000  # Spark: 31 days a month
    assert parse_delay(datetime.timedelta(seconds=3)) == 3000
    assert parse_delay(250) == 250
    for bad in ("ten seconds", "10 fortnights", "", "-5 seconds", 1.5):
        with pytest.raises(EventTimeError):
            parse_delay(bad)
    assert EventTime.of(("ts", "5 seconds")) == EventTime("ts", 5000)
    with pytest.raises(EventTimeError, match=r"event_time must be \(column, delay\)"):
        EventTime.of("ts")


def spark_watermarks(batches: list[list[int]], delay_ms: int) -> list[tuple[int, int]]:
    """Spark's tracker, as a model: (late watermark, watermark) of each batch. The global
    watermark starts at 0 and moves to max - delay after a batch with event times, only up;
    late rows are judged by the previous batch's watermark (0 before the first)."""
    model, current, previous = [], 0, 0
    for rows in batches:
        model.append((previous, current))
        previous = current
        if rows:
            current = max(current, max(rows) - delay_ms)
    return model


@given(
    st.lists(st.lists(st.integers(-5_000, 200_000), max_size=6), max_size=8),
    st.integers(0, 50_000),
    st.integers(0, 7),
)
def test_the_watermark_follows_sparks_rule_through_commit_records(
    batches: list[list[int]], delay_ms: int, replayed: int
) -> None:
    """Each batch starts from the previous commit record (serialised and read back, as after an
    application restart); running a batch again from the same record gives the same watermarks."""
    event_time = EventTime("ts", delay_ms)
    start: CommitRecord | None = None
    seen = []
    for b, rows in enumerate(batches):
        watermark = batch_watermark(event_time, start)
        assert watermark is not None
        if b == replayed:  # a replay starts from the same record: the same watermarks
            assert batch_watermark(event_time, start) == watermark
        seen.append((watermark.late_ms, watermark.current_ms))
        tasks = [max(rows[:2], default=None), max(rows[2:], default=None)]  # two tasks' maxima
        record = CommitRecord(b, {}, {}, MAXP, extra=commit_extra(watermark, event_time, tasks))
        start = CommitRecord.from_bytes(record.to_bytes(), f"commit {b}")
    assert seen == spark_watermarks(batches, delay_ms)


def test_no_event_time_means_no_watermark_and_nothing_kept() -> None:
    assert batch_watermark(None, None) is None
    assert commit_extra(None, None, [5]) == {}
    assert batch_watermark(EventTime("ts", 0), None) == Watermark(0, 0)


def timestamps(values: list[int | None]) -> pa.Table:
    micros = pa.array(values, pa.int64()).cast(pa.timestamp("us", "UTC"))
    return pa.table({"k": list(range(len(values))), "ts": micros})


def test_late_rows_are_at_or_before_the_previous_batchs_watermark() -> None:
    table = timestamps([4_999_999, 5_000_000, 5_000_001, None, 9_000_999])
    kept, dropped = drop_late(table, "ts", Watermark(late_ms=5000, current_ms=8000))
    assert dropped == 2 and kept is not None
    assert kept.column("k").to_pylist() == [2, 3, 4]  # a null event time is not late
    assert scan(table, "ts") == 9000  # microseconds to ms, truncated
    assert scan(timestamps([None]), "ts") is None
    assert drop_late(None, "ts", Watermark()) == (None, 0)
    with pytest.raises(EventTimeError, match="must be a timestamp"):
        scan(pa.table({"ts": [1, 2]}), "ts")


# ---------------------------------------------------------------- the function's state


def test_set_timeout_timestamp_is_checked_as_pyspark_checks_it() -> None:
    state = KeyState(None, STATE, batch_time_ms=0, timeout_conf=EVENT_TIME_TIMEOUT,
                     watermark_ms=10_000)  # fmt: skip
    assert state.getCurrentWatermarkMs() == 10_000
    with pytest.raises(ValueError, match=r"\(9999\) cannot be earlier than the current watermark"):
        state.setTimeoutTimestamp(9_999)
    state.setTimeoutTimestamp(10_000)  # at the watermark: allowed
    assert state.timeout_ms == 10_000
    moment = datetime.datetime(2026, 1, 1, 0, 0, 5, 123456, tzinfo=datetime.UTC)
    state.setTimeoutTimestamp(moment)
    assert state.timeout_ms == 1_767_225_605_123
    with pytest.raises(ValueError, match="positive"):
        KeyState(None, STATE, batch_time_ms=0, timeout_conf=EVENT_TIME_TIMEOUT,
                 watermark_ms=-1).setTimeoutTimestamp(0)  # fmt: skip
    processing = KeyState(None, STATE, batch_time_ms=0, timeout_conf=PROCESSING_TIME_TIMEOUT)
    with pytest.raises(RuntimeError, match="setTimeoutTimestamp needs event-time timeouts"):
        processing.setTimeoutTimestamp(20_000)
    with pytest.raises(RuntimeError, match="getCurrentWatermarkMs needs an event-time column"):
        processing.getCurrentWatermarkMs()


def sessions(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState) -> Any:
    """A session per key: its largest event time; it closes 5 s after it (event time)."""
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "out": [f"closed@{state.getCurrentWatermarkMs()}"]})
        return
    end = state.get[0] if state.exists else 0
    for pdf in pdfs:
        end = max(end, int(pdf["t"].max()))
    state.update((end,))
    state.setTimeoutTimestamp(max(end + 5000, state.getCurrentWatermarkMs()))
    yield pd.DataFrame({"k": [key[0]], "out": [f"open:{end}"]})


def spec_of(root: Path, func: Any, timeout: str = NO_TIMEOUT) -> QuerySpec:
    store = StoreSpec(DirectoryStateStorage(root / "d", fsync=False), str(root / "l"), "q", MAXP)
    return QuerySpec(
        func=func,
        key_columns=("k",),
        output_columns=("k", "out"),
        state_fields=parse_schema("end long", "state_schema"),
        timeout=timeout,
        store=store,
        event_time=EventTime("t", 10_000),
    )


def run_batch(
    spec: QuerySpec, batch: int, rows: dict[int, list[int]], watermark_ms: int, time_ms: int = 0
) -> TaskOutcome:
    """One task holding every key group, started from the latest commit, then committed."""
    storage = spec.store.storage
    start = latest_commit(storage, before=batch)
    work = TaskBatch(
        task="t0",
        batch=batch,
        start_batch=start.batch if start else -1,
        token=start.tokens.get("t0") if start else None,
        key_groups=GROUPS,
        batch_time_ms=time_ms,
        rows=tuple((k % MAXP, (k,), pd.DataFrame({"k": k, "t": ts})) for k, ts in rows.items()),
        heads=start.heads if start else {},
        watermark_ms=watermark_ms,
    )
    outcome = run_task_batch(spec, work, "h1")
    write_commit(storage, CommitRecord.of(batch, {"t0": outcome}, MAXP, start))
    return outcome


def output(outcome: TaskOutcome) -> list[tuple[int, str]]:
    return sorted((int(k), str(o)) for k, o in zip(outcome.output["k"], outcome.output["out"],
                                                    strict=True))  # fmt: skip


def test_event_time_timeouts_fire_once_the_watermark_passes_them(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, sessions, EVENT_TIME_TIMEOUT)
    assert output(run_batch(spec, 0, {1: [1000, 3000], 2: [6000]}, 0)) == [
        (1, "open:3000"),
        (2, "open:6000"),
    ]  # timeouts at 8000 and 11000
    assert output(run_batch(spec, 1, {}, 8000)) == []  # at the watermark: not yet (Spark: <)
    out = run_batch(spec, 2, {2: [7000]}, 8001)  # key 1 times out; key 2 has rows
    assert output(out) == [(1, "closed@8001"), (2, "open:7000")] and out.timed_out == 1
    assert output(run_batch(spec, 3, {}, 12_500)) == [(2, "closed@12500")]  # 12000 < 12500
    assert output(run_batch(spec, 4, {}, 99_000)) == []  # each fired once, state removed


def test_a_timeout_below_the_watermark_fails_the_batch_naming_the_key(tmp_path: Path) -> None:
    def behind(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState) -> Any:
        state.setTimeoutTimestamp(1000)
        return iter([])

    spec = spec_of(tmp_path, behind, EVENT_TIME_TIMEOUT)
    with pytest.raises(Exception, match=r"key \(4,\).*cannot be earlier than the current"):
        run_batch(spec, 0, {4: [1]}, 5000)


def test_processing_time_timeouts_fire_strictly_after_their_time(tmp_path: Path) -> None:
    def later(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState) -> Any:
        if state.hasTimedOut:
            yield pd.DataFrame({"k": [key[0]], "out": ["timed out"]})
            return
        state.update((0,))
        state.setTimeoutDuration(500)

    spec = spec_of(tmp_path, later, PROCESSING_TIME_TIMEOUT)
    run_batch(spec, 0, {1: [0]}, -1, time_ms=1000)  # times out after 1500
    assert output(run_batch(spec, 1, {}, -1, time_ms=1500)) == []
    assert output(run_batch(spec, 2, {}, -1, time_ms=1501)) == [(1, "timed out")]


# ---------------------------------------------------------------- the processor's timers


class EventSessions:
    """A processor closing a session by an event-time timer 5 s after its last event."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.end = handle.getValueState("end", "end long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        old = self.end.get()
        end = max([int(pdf["t"].max()) for pdf in rows] + ([old[0]] if old else []))
        if old:
            self.handle.deleteTimer(old[0] + 5000)
        self.end.update((end,))
        self.handle.registerTimer(end + 5000)
        wm = timerValues.getCurrentWatermarkInMs()
        yield pd.DataFrame({"k": [key[0]], "out": [f"open:{end}@{wm}"]})

    def handleExpiredTimer(self, key: Any, timerValues: Any, info: Any) -> Iterator[pd.DataFrame]:
        self.end.clear()
        wm, at = timerValues.getCurrentWatermarkInMs(), info.getExpiryTimeInMs()
        yield pd.DataFrame({"k": [key[0]], "out": [f"closed:{at}@{wm}"]})


def test_event_time_timers_fire_when_the_watermark_reaches_them(tmp_path: Path) -> None:
    function = ProcessorFunction(EventSessions(), "EventTime", watermark=True)
    function.check()
    spec = spec_of(tmp_path, function)
    assert spec.drops_late_rows
    assert output(run_batch(spec, 0, {1: [1000, 3000], 2: [6000]}, 0)) == [
        (1, "open:3000@0"),
        (2, "open:6000@0"),
    ]  # timers at 8000 and 11000
    assert output(run_batch(spec, 1, {}, 7999)) == []
    out = run_batch(spec, 2, {2: [9000]}, 8000)  # at its expiry (Spark: <=); key 2's moves
    assert output(out) == [(1, "closed:8000@8000"), (2, "open:9000@8000")]
    assert output(run_batch(spec, 3, {}, 20_000)) == [(2, "closed:14000@20000")]


def test_which_queries_drop_late_rows(tmp_path: Path) -> None:
    assert spec_of(tmp_path, sessions, EVENT_TIME_TIMEOUT).drops_late_rows
    assert not spec_of(tmp_path, sessions, PROCESSING_TIME_TIMEOUT).drops_late_rows
    assert not spec_of(
        tmp_path, ProcessorFunction(EventSessions(), "ProcessingTime")
    ).drops_late_rows
