"""A task's rows streamed key by key (locality.spark.state.keyruns, .task_stream): any split of
sorted rows into Arrow batches gives the runs of the whole table, a run is handed on before the
rows after it are read, rows out of order are refused, and a pinned task yields checked output
while its input still streams in, checkpointing and delivering nothing when a later chunk does
not fit."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locality.spark.state import (
    DirectoryStateStorage,
    QuerySpec,
    StatefulFunctionError,
    StoreSpec,
    parse_schema,
)
from locality.spark.state.keyruns import (
    GROUP_COLUMN,
    UnsortedRowsError,
    key_runs,
    sort_rows,
    stream_key_runs,
)
from locality.spark.state.keyspace import key_text
from locality.spark.state.pinned_task import RESULT_COLUMN, PinnedTaskRunner
from locality.spark.state.task_stream import OUTPUT_CHUNK_ROWS

COLUMNS = ("a", "b", "v")
ROWS = st.lists(
    st.tuples(
        st.sampled_from([None, "x", "y", 'é"z']),
        st.one_of(st.none(), st.sampled_from([0.5, -1.25, math.nan, 2.0])),
        st.integers(0, 10**6),
    ),
    max_size=80,
)


def _table(rows: list[tuple[Any, Any, int]]) -> pa.Table:
    """Rows of (a: string|None, b: double|None|NaN, v: long); the key group from the key."""
    groups = [len(key_text([a, None if b is None or b != b else b])) % 3 for a, b, _ in rows]
    return pa.table(
        {
            "a": pa.array([a for a, _, _ in rows], pa.string()),
            "b": pa.array([b for _, b, _ in rows], pa.float64()),
            "v": pa.array([v for _, _, v in rows], pa.int64()),
            GROUP_COLUMN: pa.array(groups, pa.int64()),
        }
    )


def _split(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    """``table`` as Arrow batches cut at ``cuts`` (empty batches included)."""
    bounds = [0, *sorted(min(c, table.num_rows) for c in cuts), table.num_rows]
    whole = table.combine_chunks()
    return [
        batch
        for start, end in itertools.pairwise(bounds)
        for batch in (whole.slice(start, end - start).to_batches() or [])
    ]


def _plain(runs: Iterator[Any]) -> list[tuple[int, str, list[tuple[Any, ...]]]]:
    return [
        (group, key_text(key), [tuple(r) for r in frame.itertuples(index=False)])
        for group, key, frame in runs
    ]


@settings(max_examples=300, deadline=None)
@given(ROWS, st.lists(st.integers(0, 80), max_size=12))
def test_any_split_of_sorted_rows_gives_the_runs_of_the_whole_table(
    rows: list[tuple[Any, Any, int]], cuts: list[int]
) -> None:
    table = sort_rows(_table(rows), ("a", "b"))
    whole = _plain(stream_key_runs(table.combine_chunks().to_batches(), ("a", "b"), COLUMNS))
    split = _plain(stream_key_runs(_split(table, cuts), ("a", "b"), COLUMNS))
    assert _same(split, whole)
    # every row once, in exactly its key's run (nulls and NaN one key), each key one run
    expected: dict[str, list[int]] = {}
    for a, b, v in rows:
        expected.setdefault(key_text([a, None if b != b else b]), []).append(v)
    assert sorted(text for _, text, _ in whole) == sorted(expected)
    got = {text: sorted(r[2] for r in frame) for _, text, frame in whole}
    assert got == {k: sorted(v) for k, v in expected.items()}


def _same(left: list[Any], right: list[Any]) -> bool:
    """Equal runs, NaN equal to NaN in the rows."""

    def norm(value: Any) -> Any:
        return "NaN" if isinstance(value, float) and value != value else value

    def plain(runs: list[Any]) -> list[Any]:
        return [(g, t, [tuple(map(norm, r)) for r in rows]) for g, t, rows in runs]

    return plain(left) == plain(right)


def test_a_run_is_handed_on_before_the_batches_after_it_are_read() -> None:
    table = sort_rows(_table([("x", 0.5, i) for i in range(4)] + [("y", 2.0, 9)] * 4), ("a", "b"))
    read: list[int] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for i, batch in enumerate(table.to_batches(max_chunksize=2)):
            read.append(i)
            yield batch

    runs = stream_key_runs(batches(), ("a", "b"), COLUMNS)
    _, key, frame = next(runs)
    assert key in (("x", 0.5), ("y", 2.0))
    assert len(frame) == 4 and list(frame.index) == [0, 1, 2, 3]  # carried over two batches
    assert read == [0, 1, 2]  # its end seen in batch 2, nothing after it read
    assert [len(f) for _, _, f in runs] == [4] and read == [0, 1, 2, 3]


def test_rows_out_of_key_order_are_refused_not_called_twice() -> None:
    table = _table([("x", 0.5, 1), ("y", 0.5, 2), ("x", 0.5, 3)])
    table = table.set_column(3, GROUP_COLUMN, pa.array([0, 0, 0], pa.int64()))
    with pytest.raises(UnsortedRowsError, match=r"key \('x', 0.5\) of key group 0 came in two"):
        list(stream_key_runs(table.to_batches(), ("a", "b"), COLUMNS))


def _many(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[Any]:
    """Output rows per input row; the key "bad" yields a value of the wrong type."""
    rows = sum(len(pdf) for pdf in pdfs)
    yield pd.DataFrame({"k": [key[0]] * rows, "n": ["x" if key[0] == "bad" else 1] * rows})


def _stream_runner(tmp: Path, delivered: list[int]) -> PinnedTaskRunner:
    spec = QuerySpec(
        func=_many,
        key_columns=("k",),
        output_columns=("k", "n"),
        state_fields=parse_schema("n long", "state_schema"),
        timeout="NoTimeout",
        store=StoreSpec(
            DirectoryStateStorage(tmp / "durable", fsync=False),
            str(tmp / "local"),
            "job-1",
            max_parallelism=4,
        ),
    )
    schema = pa.schema([("k", pa.string()), ("n", pa.int64()), (RESULT_COLUMN, pa.string())])
    return PinnedTaskRunner(
        spec=spec, tasks=("t0",), batch=0, start_batch=-1, tokens={},
        key_groups={"t0": (0, 1, 2, 3)}, batch_time_ms=0, input_columns=("k",),
        output_schema=schema, deliver=lambda t, b, out, tok: delivered.append(len(out)),
    )  # fmt: skip


def _keyed(keys: list[str], rows: int) -> list[pa.RecordBatch]:
    """``rows`` rows per key, key group 0, in Arrow batches of 1,000 rows."""
    column = [k for k in keys for _ in range(rows)]
    table = pa.table({"k": column, GROUP_COLUMN: pa.array([0] * len(column), pa.int64())})
    return table.to_batches(max_chunksize=1000)


def test_output_streams_out_while_input_streams_in_then_one_result(tmp_path: Path) -> None:
    delivered: list[int] = []
    runner = _stream_runner(tmp_path, delivered)
    read: list[int] = []
    batches = _keyed(["a", "b", "c"], OUTPUT_CHUNK_ROWS)

    def incoming() -> Iterator[pa.RecordBatch]:
        for i, batch in enumerate(batches):
            read.append(i)
            yield batch

    out = runner(incoming())
    first = next(out)
    assert first.num_rows > 0 and first.column(RESULT_COLUMN).null_count == first.num_rows
    assert len(read) < len(batches)  # output handed to Spark before all input was read
    assert delivered == [] and runner.spec.store.storage.list_files(0) == []  # not yet
    rest = list(out)
    results = [r for b in rest for r in b.column(RESULT_COLUMN).to_pylist() if r]
    assert len(results) == 1 and rest[-1].num_rows == 1
    assert first.num_rows + sum(b.num_rows for b in rest[:-1]) == 3 * OUTPUT_CHUNK_ROWS
    assert delivered == [3 * OUTPUT_CHUNK_ROWS]  # the whole output, after the checkpoint
    assert runner.spec.store.storage.list_files(0) != []


def test_a_late_chunk_that_does_not_fit_checkpoints_and_delivers_nothing(tmp_path: Path) -> None:
    delivered: list[int] = []
    runner = _stream_runner(tmp_path, delivered)
    yielded = 0
    with pytest.raises(StatefulFunctionError, match="column 'n' should be int64"):
        for batch in runner(iter(_keyed(["a", "b", "bad"], OUTPUT_CHUNK_ROWS))):
            yielded += batch.num_rows
    assert yielded >= OUTPUT_CHUNK_ROWS  # earlier chunks went out (Spark drops a failed task's)
    assert delivered == []
    assert all(runner.spec.store.storage.list_files(g) == [] for g in range(4))


def test_a_batch_streams_when_a_task_may_read_more_than_the_threshold_or_nobody_knows() -> None:
    """coordinator.streaming.stage.streams_rows: the choice between one table per task (fast)
    and rows streamed as Spark sorted them (bounded memory)."""
    from coordinator.streaming.stage import STREAM_ROWS, streams_rows

    assert STREAM_ROWS == 1_000_000
    assert streams_rows(None, STREAM_ROWS)  # a first batch: nothing says how many
    assert not streams_rows(333_334, STREAM_ROWS)  # 4M records over 12 partitions
    assert not streams_rows(STREAM_ROWS, STREAM_ROWS)
    assert streams_rows(STREAM_ROWS + 1, STREAM_ROWS)
    assert streams_rows(1, 0) and not streams_rows(0, 0)  # 0: every batch with rows streams


def test_row_processors_get_an_integer_column_with_nulls_as_ints_and_none() -> None:
    """As Spark's Row worker (Arrow's ``as_py``): 3 and None, not pandas' 3.0 and NaN; the pandas
    API keeps pandas' floats, as Spark's ``transformWithStateInPandas`` gives them."""
    from locality.spark.state.processor_rows import rows_of

    table = pa.table(
        {
            GROUP_COLUMN: pa.array([0, 0], pa.int64()),
            "user": ["u1", "u1"],
            "seed": pa.array([3, None], pa.int64()),
        }
    )
    ((_, _, frame),) = key_runs(table, ("user",), ("user", "seed"), row_values=True)
    seeds = [row.seed for row in rows_of(frame)]
    assert seeds == [3, None] and type(seeds[0]) is int
    ((_, _, pandas_frame),) = key_runs(table, ("user",), ("user", "seed"))
    assert pandas_frame["seed"].dtype == "float64" and math.isnan(pandas_frame["seed"].iloc[1])


def test_a_query_of_a_row_processor_asks_for_python_values(tmp_path: Path) -> None:
    from locality.spark.state.processor import ProcessorFunction

    def spec(rows: bool) -> QuerySpec:
        store = StoreSpec(DirectoryStateStorage(tmp_path, fsync=False), str(tmp_path), "q", 4)
        function = ProcessorFunction(object(), "None", rows=rows)
        return QuerySpec(function, ("user",), ("user",), (), "NoTimeout", store)

    assert spec(True).row_values and not spec(False).row_values
