"""A Spark 4 ``StatefulProcessor`` run per task on the object space (no Spark): ValueState,
ListState, MapState, TTL, processing-time timers, deleteIfExists, errors named, the state kept
across warm and restored starts, and a MapState entry change checkpointing only that entry; a
hypothesis test drives a per-user MapState of counters against a model through host moves."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locality.spark.state import (
    QuerySpec,
    StatefulFunctionError,
    TaskOutcome,
    forget_memory,
    latest_commit,
)
from locality.spark.state.processor_state import ProcessorUsageError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._processor_run import processor_spec
from benchmarks._processor_run import run_batch as run_tasks

MAXP = 4
TASKS = {"t0": (0, 2), "t1": (1, 3)}


class Counters:
    """A per-user MapState of counters and a ValueState total (the cluster test's too)."""

    def init(self, handle: Any) -> None:
        self.counts = handle.getMapState("counts", "kind string", "n long")
        self.total = handle.getValueState("total", "n long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        total = (self.total.get() or (0,))[0]
        for pdf in rows:
            for kind in pdf["kind"]:
                n = (self.counts.getValue((kind,)) or (0,))[0] + 1
                self.counts.updateValue((kind,), (n,))
                total += 1
        self.total.update((total,))
        kinds = sorted(k for (k,) in self.counts.keys())  # noqa: SIM118 (MapState.keys)
        yield pd.DataFrame({"k": [key[0]], "out": [f"{total}:{','.join(kinds)}"]})

    def close(self) -> None:
        pass


class Dedup:
    """Emits a value the first time it is seen within the TTL (ProcessingTime)."""

    def init(self, handle: Any) -> None:
        self.seen = handle.getValueState("seen", "flag boolean", ttlDurationMs=1000)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        if not self.seen.exists():
            self.seen.update((True,))
            yield pd.DataFrame({"k": [key[0]], "out": ["new"]})


class Sessions:
    """A ListState of values, closed by a processing-time timer 500 ms after the last row."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.values = handle.getListState("values", "v long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        for t in list(self.handle.listTimers()):
            self.handle.deleteTimer(t)
        for pdf in rows:
            self.values.appendList([(int(v),) for v in pdf["v"]])
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 500)
        return iter([])

    def handleExpiredTimer(self, key: Any, timerValues: Any, info: Any) -> Iterator[pd.DataFrame]:
        total = sum(v for (v,) in self.values.get())
        self.values.clear()
        yield pd.DataFrame({"k": [key[0]], "out": [f"{total}@{info.getExpiryTimeInMs()}"]})


def spec_of(root: Path, processor: Any, mode: str = "None") -> QuerySpec:
    return processor_spec(root, processor, mode, MAXP)


def run_batch(
    spec: QuerySpec, batch: int, rows: list[dict[str, Any]], time_ms: int = 0, host: str = "h1"
) -> dict[str, TaskOutcome]:
    """The driver's part in miniature: start from the latest commit, run both tasks, commit."""
    frame = pd.DataFrame(rows, columns=["k", "kind", "v"])
    return run_tasks(spec, batch, frame, TASKS, time_ms, host)


def output(outcomes: dict[str, TaskOutcome]) -> list[tuple[int, str]]:
    frames = [o.output for o in outcomes.values() if len(o.output)]
    rows = pd.concat(frames) if frames else pd.DataFrame({"k": [], "out": []})
    return sorted((int(k), str(o)) for k, o in zip(rows["k"], rows["out"], strict=True))


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    forget_memory()
    yield
    forget_memory()


def test_map_and_value_state_survive_warm_and_restored_starts(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, Counters())
    first = run_batch(
        spec, 0, [{"k": 1, "kind": "a"}, {"k": 1, "kind": "b"}, {"k": 2, "kind": "a"}]
    )
    assert output(first) == [(1, "2:a,b"), (2, "1:a")]
    assert {o.source for o in first.values()} == {"new"}
    second = run_batch(spec, 1, [{"k": 1, "kind": "c"}])
    assert output(second) == [(1, "3:a,b,c")]
    assert second["t1"].source == "memory"
    forget_memory()
    third = run_batch(spec, 2, [{"k": 1, "kind": "a"}, {"k": 2, "kind": "z"}], host="h2")
    assert output(third) == [(1, "4:a,b,c"), (2, "2:a,z")]
    assert {o.source for o in third.values()} == {"restored"}


def test_a_map_entry_change_checkpoints_that_entry_only(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, Counters())
    run_batch(spec, 0, [{"k": 1, "kind": f"kind-{i}"} for i in range(50)])
    run_batch(spec, 1, [{"k": 1, "kind": "kind-7"}])
    folder = tmp_path / "durable" / "keygroups" / "kg-00001"
    delta = [p for p in folder.iterdir() if p.name.startswith("delta-")]
    assert len(delta) == 1
    document = json.loads(delta[0].read_text())
    patch = document["objects"]["tws/map/counts"]["patch"]
    assert patch == {"set": {'[1]\t["kind-7"]': [[2], None]}}


def test_value_state_ttl_expires_at_batch_time_plus_ttl(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, Dedup(), "ProcessingTime")
    assert output(run_batch(spec, 0, [{"k": 1}], time_ms=10_000)) == [(1, "new")]
    assert output(run_batch(spec, 1, [{"k": 1}], time_ms=10_999)) == []
    assert output(run_batch(spec, 2, [{"k": 1}], time_ms=11_000)) == [(1, "new")]  # 10_000 + ttl
    assert output(run_batch(spec, 3, [{"k": 1}], time_ms=11_999)) == []
    assert output(run_batch(spec, 4, [], time_ms=20_000)) == []
    assert output(run_batch(spec, 5, [{"k": 1}], time_ms=20_001)) == [(1, "new")]


class Recent:
    """A ListState and a MapState with a TTL: the values of the last second, per key."""

    def init(self, handle: Any) -> None:
        self.values = handle.getListState("values", "v long", ttlDurationMs=1000)
        self.latest = handle.getMapState("latest", "v long", "at long", ttlDurationMs=1000)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        for pdf in rows:
            for v in pdf["v"]:
                self.values.appendValue((int(v),))
                self.latest.updateValue((int(v),), (now,))
        listed = ",".join(str(v) for (v,) in self.values.get())
        mapped = ",".join(f"{v}@{at}" for (v,), (at,) in self.latest.iterator())
        yield pd.DataFrame({"k": [key[0]], "out": [f"{listed}|{mapped}"]})


def test_list_and_map_ttl_expire_per_element_and_leave_the_state(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, Recent(), "ProcessingTime")
    run_batch(spec, 0, [{"k": 1, "v": 1}, {"k": 1, "v": 2}], time_ms=1000)
    assert output(run_batch(spec, 1, [{"k": 1, "v": 3}], time_ms=1500)) == [
        (1, "1,2,3|1@1000,2@1000,3@1500")
    ]
    assert output(run_batch(spec, 2, [{"k": 1, "v": 2}], time_ms=2000)) == [
        (1, "3,2|2@2000,3@1500")
    ]
    assert output(run_batch(spec, 3, [], time_ms=3000)) == []
    forget_memory()  # what a restore loads: the expired entries are gone from the checkpoint
    state = json.dumps(restored_group(spec, 1))
    assert state == json.dumps({"tws/list/values": {}, "tws/map/latest": {}})


def restored_group(spec: QuerySpec, group_id: int) -> dict[str, Any]:
    from locality.spark.state.objectspace import ObjectSpace

    commit = latest_commit(spec.store.storage)
    assert commit is not None and commit.heads is not None
    heads = {g: h for g, h in commit.heads.items() if g == group_id}
    space, _ = ObjectSpace.load(spec.store.storage, [group_id], max_parallelism=MAXP, heads=heads)
    group = space.group(group_id)
    return {name: group.get_map(name).to_dict() for name in sorted(group.names())}


def test_processing_time_timers_fire_once_in_expiry_order(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, Sessions(), "ProcessingTime")
    run_batch(spec, 0, [{"k": 1, "v": 2}, {"k": 2, "v": 5}], time_ms=1000)
    run_batch(spec, 1, [{"k": 1, "v": 3}], time_ms=1200)  # moves key 1's timer to 1700
    assert output(run_batch(spec, 2, [], time_ms=1499)) == []
    assert output(run_batch(spec, 3, [], time_ms=1500)) == [(2, "5@1500")]  # at its expiry
    assert output(run_batch(spec, 4, [], time_ms=5000)) == [(1, "5@1700")]
    assert output(run_batch(spec, 5, [], time_ms=9000)) == []


def test_timers_and_ttl_are_refused_in_time_mode_none(tmp_path: Path) -> None:
    with pytest.raises(ProcessorUsageError, match="a TTL needs timeMode 'ProcessingTime'"):
        spec_of(tmp_path, Dedup(), "None")
    spec = spec_of(tmp_path, Sessions(), "None")
    with pytest.raises(StatefulFunctionError, match=r"key \(1,\).*timers need timeMode"):
        run_batch(spec, 0, [{"k": 1, "v": 1}])


def test_what_affinity_does_not_run_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ProcessorUsageError, match="EventTime' needs an event-time watermark"):
        spec_of(tmp_path, Counters(), "EventTime")
    with pytest.raises(ProcessorUsageError, match="timeMode must be one of"):
        spec_of(tmp_path, Counters(), "Wallclock")
    with pytest.raises(ProcessorUsageError, match="object has no init"):
        spec_of(tmp_path, object())

    class Nested(Counters):
        def init(self, handle: Any) -> None:
            handle.getValueState("when", "t timestamp")

    with pytest.raises(ProcessorUsageError, match=r"Nested\.init: value state 'when'.*'timestamp'"):
        spec_of(tmp_path, Nested())


def test_delete_if_exists_drops_a_variable_for_every_key(tmp_path: Path) -> None:
    run_batch(spec_of(tmp_path, Counters()), 0, [{"k": 1, "kind": "a"}, {"k": 2, "kind": "b"}])

    class Dropped(Counters):
        def init(self, handle: Any) -> None:
            handle.deleteIfExists("counts")
            super().init(handle)

    forget_memory()
    again = run_batch(
        spec_of(tmp_path, Dropped()), 1, [{"k": 1, "kind": "c"}, {"k": 2, "kind": "c"}]
    )
    assert output(again) == [(1, "2:c"), (2, "2:c")]  # the totals stayed, the maps went


def test_a_value_that_does_not_fit_its_schema_names_the_key(tmp_path: Path) -> None:
    class Wrong(Counters):
        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            self.total.update(("many",))
            return iter([])

    with pytest.raises(StatefulFunctionError, match=r"batch 0, key \(1,\): a state value"):
        run_batch(spec_of(tmp_path, Wrong()), 0, [{"k": 1, "kind": "a"}])


batches = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 5), st.sampled_from("abc")), max_size=8),
        st.sampled_from(["same", "new-worker", "other-host"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=25, deadline=None)
@given(batches)
def test_counters_match_a_model_through_moves(tmp_path_factory: Any, plan: Any) -> None:
    root = tmp_path_factory.mktemp("counters")
    forget_memory()
    spec = spec_of(root, Counters())
    model: dict[int, dict[str, int]] = {}
    host = "h1"
    for batch, (rows, move) in enumerate(plan):
        if move != "same":
            forget_memory()
        if move == "other-host":
            host = f"h{batch}"
        got = output(run_batch(spec, batch, [{"k": k, "kind": c} for k, c in rows], host=host))
        for k, c in rows:
            model.setdefault(k, {}).setdefault(c, 0)
            model[k][c] += 1
        keys = sorted({k for k, _ in rows})
        want = [(k, f"{sum(model[k].values())}:{','.join(sorted(model[k]))}") for k in keys]
        assert got == want
