"""A task's rows cut into one run per key as they stream in, Arrow batch by Arrow batch.

The rows come sorted by key group and key (Spark's ``sortWithinPartitions`` before the task's
``mapInArrow``, which spills to disk; or :func:`sort_rows` for rows a task reads itself), so the
rows of one key are consecutive. :func:`stream_key_runs` yields (key group, key, the key's rows)
for each key as soon as its last row has arrived: a run that goes on into the next Arrow batch
is carried over, never the whole partition in memory (one Arrow batch and the open run at most).

A key's values are Python values, ``None`` for null and NaN alike (one key, as in the key's JSON
text): the sort puts NaN with the nulls (:func:`sort_rows`, and the JVM sort orders NaN as null)
and the cut compares NaN as null. A key whose rows come in two runs (rows not sorted) raises
:class:`UnsortedRowsError` rather than calling the function twice for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from locality.spark.state.keyspace import key_text

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "GROUP_COLUMN",
    "KeyRun",
    "UnsortedRowsError",
    "key_runs",
    "sort_rows",
    "stream_key_runs",
]

#: The key group column the driver adds before the shuffle (its home: :mod:`.pinned_task`).
GROUP_COLUMN = "_affinity_group"

#: (key group, key, the key's rows with the input columns, index 0..n-1)
KeyRun = tuple[int, tuple[Any, ...], "pd.DataFrame"]


class UnsortedRowsError(RuntimeError):
    """A key's rows came in two runs: the task's rows were not sorted by key group and key."""


def stream_key_runs(
    batches: Iterable[pa.RecordBatch],
    key_columns: Sequence[str],
    input_columns: Sequence[str],
    *,
    row_values: bool = False,
) -> Iterator[KeyRun]:
    """One run per key of the sorted ``batches`` (module docstring), in the rows' order;
    ``row_values``: an integer column with nulls keeps Python ints and None (as Arrow's
    ``as_py``, for Row processors) rather than becoming pandas floats."""
    open_key: tuple[int, tuple[Any, ...]] | None = None
    pieces: list[pd.DataFrame] = []
    done: set[tuple[int, str]] = set()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        starts, idents = _cuts(batch, key_columns)
        frame = batch.select(list(input_columns)).to_pandas(integer_object_nulls=row_values)
        ends = [*starts[1:], batch.num_rows]
        for start, end, ident in zip(starts, ends, idents, strict=True):
            piece = frame.iloc[start:end]
            if ident == open_key:  # the open run goes on in this batch (its first run only)
                pieces.append(piece)
                continue
            if open_key is not None:
                yield _closed(open_key, pieces, done)
            open_key, pieces = ident, [piece]
    if open_key is not None:
        yield _closed(open_key, pieces, done)


def key_runs(
    table: pa.Table | None,
    key_columns: Sequence[str],
    input_columns: Sequence[str],
    *,
    row_values: bool = False,
) -> list[KeyRun]:
    """Every run of ``table`` (sorted here first), in memory: for tests and small tables."""
    if table is None or table.num_rows == 0:
        return []
    sorted_ = sort_rows(table, key_columns)
    batches = sorted_.to_batches()
    return list(stream_key_runs(batches, key_columns, input_columns, row_values=row_values))


def sort_rows(table: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """``table`` sorted by key group and key, NaN as null, nulls last (in memory)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [GROUP_COLUMN, *key_columns]
    keys = pa.table({f"k{i}": _nan_as_null(table.column(n)) for i, n in enumerate(names)})
    order = [(f"k{i}", "ascending", "at_end") for i in range(len(names))]
    return table.take(pc.sort_indices(keys, sort_keys=order))


def _cuts(
    batch: pa.RecordBatch, key_columns: Sequence[str]
) -> tuple[list[int], list[tuple[int, tuple[Any, ...]]]]:
    """Where each run of ``batch`` starts, and its (key group, key)."""
    import numpy as np

    n = batch.num_rows
    changed = np.zeros(n - 1, dtype=bool)
    for name in (GROUP_COLUMN, *key_columns):
        changed |= _changes(_nan_as_null(batch.column(name)))
    starts = np.concatenate(([0], np.flatnonzero(changed) + 1)).astype(np.int64)
    at = starts.tolist()
    groups = batch.column(GROUP_COLUMN).take(starts).to_pylist()
    values = [batch.column(c).take(starts).to_pylist() for c in key_columns]
    idents = [
        (int(groups[i]), tuple(_python(column[i]) for column in values)) for i in range(len(at))
    ]
    return at, idents


def _nan_as_null(column: Any) -> Any:
    """A floating-point column with its NaN as null (any other column as it is)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_floating(column.type):
        return column
    return pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)


def _changes(column: Any) -> Any:
    """Per row after the first: does ``column`` differ from the row before (nulls equal)?"""
    import numpy as np
    import pyarrow.compute as pc

    current, previous = column.slice(1), column.slice(0, len(column) - 1)
    differs = pc.fill_null(pc.not_equal(current, previous), True)
    both_null = pc.and_(pc.is_null(current), pc.is_null(previous))
    return np.asarray(pc.and_not(differs, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def _python(value: Any) -> Any:
    """NaN as None (the key's JSON text has null for both)."""
    return None if isinstance(value, float) and value != value else value


def _closed(
    ident: tuple[int, tuple[Any, ...]], pieces: list[pd.DataFrame], done: set[tuple[int, str]]
) -> KeyRun:
    import pandas as pd

    group, key = ident
    text = key_text(key)
    if (group, text) in done:
        raise UnsortedRowsError(
            f"key {key!r} of key group {group} came in two runs: a task's rows must be sorted "
            f"by {GROUP_COLUMN} and the key columns"
        )
    done.add((group, text))
    frame = pieces[0] if len(pieces) == 1 else pd.concat(pieces)
    return group, key, frame.reset_index(drop=True)
