"""The executor side of a processor's initial state and of the Row-based ``transformWithState``
(no Spark): ``handleInitialState`` per key before its rows, a key of the initial state without
rows called there only and its state kept; Rows in and out, one initial Row per call."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import Row

from locality.spark.state import (
    CommitRecord,
    QuerySpec,
    StatefulFunctionError,
    TaskBatch,
    TaskOutcome,
    forget_memory,
    latest_commit,
    run_task_batch,
    write_commit,
)
from locality.spark.state.processor import ProcessorFunction

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._processor_run import processor_spec

calls: list[tuple[str, int, str]] = []


class Seeded:
    """A total per key seeded by the initial state's ``seed``; every call logged in calls."""

    def init(self, handle: Any) -> None:
        self.total = handle.getValueState("total", "n long")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        seed = initialState.seed if isinstance(initialState, Row) else initialState["seed"].sum()
        calls.append(("initial", key[0], type(initialState).__name__))
        self.total.update(((self.total.get() or (0,))[0] + int(seed),))

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        given = list(rows)
        calls.append(("rows", key[0], type(given[0]).__name__))
        count = sum(1 for _ in given) if isinstance(given[0], Row) else len(given[0])
        total = (self.total.get() or (0,))[0] + count
        self.total.update((total,))
        if isinstance(given[0], Row):
            yield Row(k=key[0], out=f"{total}:{','.join(r.kind for r in given)}")
        else:
            yield pd.DataFrame({"k": [key[0]], "out": [f"{total}:{','.join(given[0]['kind'])}"]})


def spec_of(root: Path, rows: bool) -> QuerySpec:
    return processor_spec(root, Seeded(), "None", 4, rows=rows)


def run(spec: QuerySpec, batch: int, rows: list[tuple[int, str]],
        initial: list[tuple[int, int]]) -> TaskOutcome:  # fmt: skip
    """One task owning key groups 0-3 (key k in group k), from the latest commit; committed."""
    storage = spec.store.storage
    start = latest_commit(storage, before=batch)
    frame = pd.DataFrame(rows, columns=["k", "kind"])
    seeds = pd.DataFrame(initial, columns=["k", "seed"])
    work = TaskBatch(
        task="t0",
        batch=batch,
        start_batch=start.batch if start else -1,
        token=start.tokens.get("t0") if start else None,
        key_groups=(0, 1, 2, 3),
        batch_time_ms=0,
        rows=tuple((k, (k,), p.reset_index(drop=True)) for k, p in frame.groupby("k")),
        heads=start.heads if start else {},
        initial=tuple((k, (k,), p.reset_index(drop=True)) for k, p in seeds.groupby("k")),
    )
    outcome = run_task_batch(spec, work, "h1")
    write_commit(storage, CommitRecord.of(batch, {"t0": outcome}, 4, start))
    return outcome


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget_memory()
    calls.clear()
    yield
    forget_memory()


@pytest.mark.parametrize("rows", [False, True], ids=["pandas", "Row"])
def test_initial_state_comes_first_per_key_and_alone_for_keys_without_rows(
    tmp_path: Path, rows: bool
) -> None:
    spec = spec_of(tmp_path, rows)
    first = run(spec, 0, [(1, "a"), (3, "b"), (1, "c")], [(1, 10), (2, 20), (1, 5)])
    kind = "Row" if rows else "DataFrame"
    initial_1 = [("initial", 1, kind)] * (2 if rows else 1)  # Rows: one call per initial row
    assert calls == [*initial_1, ("rows", 1, kind), ("initial", 2, kind), ("rows", 3, kind)]
    assert sorted(map(tuple, first.output.values.tolist())) == [(1, "17:a,c"), (3, "1:b")]
    calls.clear()
    second = run(spec, 1, [(2, "d")], [])  # key 2's state came from the initial state alone
    assert calls == [("rows", 2, kind)]
    assert second.output.values.tolist() == [[2, "21:d"]]


def test_a_row_processor_yielding_a_dataframe_fails_naming_the_key(tmp_path: Path) -> None:
    class Wrong(Seeded):
        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            yield pd.DataFrame({"k": [key[0]], "out": ["x"]})

    spec = spec_of(tmp_path, True)
    spec = QuerySpec(**{**spec.__dict__, "func": ProcessorFunction(Wrong(), "None", rows=True)})
    with pytest.raises(StatefulFunctionError, match=r"key \(1,\).*must yield pyspark Rows"):
        run(spec, 0, [(1, "a")], [])
