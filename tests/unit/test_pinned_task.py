"""The executor side of the pinned shuffle without Spark (locality.spark.state.pinned_task): a
partition's Arrow rows cut into one run per key (every row once, nulls and NaN one key, keys in
order), the task's batch run from Arrow in to Arrow out with one result row, a batch that is
committed already refused, and the commit records a batch run again forgets."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locality.spark.state import (
    CommitRecord,
    DirectoryStateStorage,
    QuerySpec,
    StatefulFunctionError,
    StoreSpec,
    parse_schema,
    write_commit,
)
from locality.spark.state.durable import commit_exists
from locality.spark.state.keyruns import sort_rows
from locality.spark.state.keyspace import key_text
from locality.spark.state.pinned_task import (
    GROUP_COLUMN,
    RESULT_COLUMN,
    TASK_COLUMN,
    PinnedTaskRunner,
    StaleBatchError,
    TaskResult,
    key_runs,
)

KEYS = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=False, width=64).filter(
        lambda f: math.isnan(f) or f in (0.5, -1.25)
    ),
)


def _table(rows: list[tuple[Any, Any, int]]) -> pa.Table:
    """Rows of (a: string|None, b: double|None, v: long); the key group from the key's text."""
    groups = [len(key_text([a, None if b is None or b != b else b])) % 3 for a, b, _ in rows]
    return pa.table(
        {
            "a": pa.array([a for a, _, _ in rows], pa.string()),
            "b": pa.array([b for _, b, _ in rows], pa.float64()),
            "v": pa.array([v for _, _, v in rows], pa.int64()),
            TASK_COLUMN: pa.array([0] * len(rows), pa.int32()),
            GROUP_COLUMN: pa.array(groups, pa.int64()),
        }
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, "x", "y", 'é"z']),
            st.one_of(st.none(), st.sampled_from([0.5, -1.25, math.nan, 2.0])),
            st.integers(0, 10**6),
        ),
        max_size=60,
    )
)
def test_key_runs_cut_every_row_into_exactly_its_key(rows: list[tuple[Any, Any, int]]) -> None:
    runs = key_runs(_table(rows), ("a", "b"), ("a", "b", "v"))
    texts = [key_text(key) for _, key, _ in runs]
    assert len(set(texts)) == len(texts), "a key was cut into two runs"
    expected: dict[str, list[int]] = {}
    for a, b, v in rows:
        expected.setdefault(key_text([a, None if b != b else b]), []).append(v)
    got = {key_text(key): sorted(frame["v"].tolist()) for _, key, frame in runs}
    assert got == {k: sorted(v) for k, v in expected.items()}
    for group, key, frame in runs:
        assert list(frame.columns) == ["a", "b", "v"]
        assert list(frame.index) == list(range(len(frame)))
        assert all(not (isinstance(x, float) and math.isnan(x)) for x in key)  # NaN -> None
        assert group == len(key_text(list(key))) % 3


def test_key_runs_of_nothing() -> None:
    assert key_runs(None, ("a",), ("a",)) == []
    assert key_runs(_table([]), ("a", "b"), ("a", "b", "v")) == []


def test_key_values_keep_their_python_types() -> None:
    table = pa.table(
        {
            "k": pa.array([3, None, 3], pa.int64()),
            "v": pa.array([1, 2, 3], pa.int64()),
            GROUP_COLUMN: pa.array([1, 2, 1], pa.int64()),
        }
    )
    runs = key_runs(table, ("k",), ("k", "v"))
    assert [(g, k, len(f)) for g, k, f in runs] == [(1, (3,), 2), (2, (None,), 1)]
    assert type(runs[0][1][0]) is int  # not 3.0, as pandas would make a nullable integer


def test_task_result_round_trips_as_json() -> None:
    result = TaskResult("Partition 0", "tok", (1, 5), "local", 0, 10, 3, 1, 7, 2, "4", "h", 1, 0.5)
    again = TaskResult.from_json(result.to_json())
    assert again == result and again.warm


def count(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[Any]:
    n = state.get[0] if state.exists else 0
    for pdf in pdfs:
        n += len(pdf)
    state.update((n,))
    yield pd.DataFrame({"k": [key[0]], "n": [n]})


def _runner(
    tmp: Path, batch: int, start: CommitRecord | None, func: Any = count
) -> PinnedTaskRunner:
    storage = DirectoryStateStorage(tmp / "durable", fsync=False)
    spec = QuerySpec(
        func=func,
        key_columns=("k",),
        output_columns=("k", "n"),
        state_fields=parse_schema("n long", "state_schema"),
        timeout="NoTimeout",
        store=StoreSpec(storage, str(tmp / "local"), "job-1", max_parallelism=4),
    )
    schema = pa.schema([("k", pa.string()), ("n", pa.int64()), (RESULT_COLUMN, pa.string())])
    return PinnedTaskRunner(
        spec=spec,
        tasks=("t0",),
        batch=batch,
        start_batch=start.batch if start else -1,
        tokens=dict(start.tokens) if start else {},
        heads=dict(start.heads or {}) if start else {},
        key_groups={"t0": (0, 1, 2, 3)},
        batch_time_ms=1000 * batch,
        input_columns=("k",),
        output_schema=schema,
    )


def _input(keys: list[str]) -> list[pa.RecordBatch]:
    table = pa.table(
        {
            "k": pa.array(keys, pa.string()),
            TASK_COLUMN: pa.array([0] * len(keys), pa.int32()),
            GROUP_COLUMN: pa.array([len(k) % 4 for k in keys], pa.int64()),
        }
    )
    return sort_rows(table, ("k",)).to_batches(max_chunksize=2)  # sorted, as Spark sorts them


def _run(runner: PinnedTaskRunner, keys: list[str]) -> tuple[list[tuple[Any, ...]], TaskResult]:
    out = pa.Table.from_batches(list(runner(iter(_input(keys)))), schema=runner.output_schema)
    assert out.schema == runner.output_schema
    rows = out.to_pylist()
    results = [TaskResult.from_json(r[RESULT_COLUMN]) for r in rows if r[RESULT_COLUMN]]
    assert len(results) == 1 and rows[-1][RESULT_COLUMN] is not None
    data = sorted((r["k"], r["n"]) for r in rows if r[RESULT_COLUMN] is None)
    return data, results[0]


def test_a_task_runs_from_arrow_to_arrow_and_reports_one_result(tmp_path: Path) -> None:
    data, result = _run(_runner(tmp_path, 0, None), ["a", "bb", "a", "ccc", "a"])
    assert data == [("a", 3), ("bb", 1), ("ccc", 1)]
    assert (result.task, result.source, result.rows_in, result.rows_out) == ("t0", "new", 5, 3)
    storage = _runner(tmp_path, 0, None).spec.store.storage
    commit = write_commit(storage, CommitRecord.of(0, {"t0": result}, 4, None))
    data, again = _run(_runner(tmp_path, 1, commit), ["bb"])
    assert data == [("bb", 2)] and again.source == "memory" and again.rows_in == 1

    # no rows at all: the task still runs (its state is checkpointed, keys could time out)
    commit = write_commit(storage, CommitRecord.of(1, {"t0": again}, 4, commit))
    data, empty = _run(_runner(tmp_path, 2, commit), [])
    assert data == [] and empty.rows_in == 0 and empty.token


def test_a_committed_batch_is_refused_and_a_batch_run_again_by_a_new_driver_runs(
    tmp_path: Path,
) -> None:
    runner = _runner(tmp_path, 0, None)
    storage = runner.spec.store.storage
    _, result = _run(runner, ["a"])
    commit = CommitRecord.of(0, {"t0": result}, 4, None)
    write_commit(storage, replace(commit, epoch=3))
    assert commit_exists(storage, 0, 3) and not commit_exists(storage, 0, 4)
    with pytest.raises(StaleBatchError, match="batch 0 is committed already"):
        _run(replace(_runner(tmp_path, 0, None), epoch=3), ["a"])
    # Spark runs batch 0 again after a restart (its own commit log lacks it): the new driver's
    # epoch runs it from the commit before it, under a new token and files of its own
    data, rerun = _run(replace(_runner(tmp_path, 0, None), epoch=4), ["a"])
    assert data == [("a", 1)] and rerun.token != result.token
    assert set(rerun.heads.values()).isdisjoint(result.heads.values())


def test_output_that_does_not_fit_the_schema_is_named(tmp_path: Path) -> None:
    def wrong(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[Any]:
        yield pd.DataFrame({"k": [key[0]], "n": ["not a number"]})

    delivered: list[int] = []
    runner = replace(
        _runner(tmp_path, 0, None, wrong), deliver=lambda t, b, out, tok: delivered.append(len(out))
    )
    with pytest.raises(
        StatefulFunctionError,
        match=r"does not fit output_schema: column 'n' should be int64, found str \('not a "
        r"number'\); nothing of the batch was written",
    ):
        _run(runner, ["a"])
    # checked before any side effect: nothing checkpointed, nothing delivered
    storage = runner.spec.store.storage
    assert delivered == []
    assert all(storage.list_files(g) == [] for g in range(4))


def test_a_commit_record_carries_input_offsets_and_reads_without_them() -> None:
    record = CommitRecord(4, {"t0": "a"}, {"t0": (0, 2)}, 8, offsets={"events-3": 120})
    assert CommitRecord.from_bytes(record.to_bytes(), "x") == record
    fenced = replace(record, heads={0: "base-00000000-4-a.json"}, epoch=3, driver="d", prev="p")
    assert CommitRecord.from_bytes(fenced.to_bytes(), "x") == fenced
    plain = CommitRecord(4, {"t0": "a"}, {"t0": (0, 2)}, 8)
    assert b"offsets" not in plain.to_bytes()  # a record without offsets reads as before
    assert CommitRecord.from_bytes(plain.to_bytes(), "x").offsets == {}
