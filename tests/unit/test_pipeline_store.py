"""The pipeline's task store: deltas (a copy at b - 1 plus the delta of b is the state at b) and
standby copies brought up to date from deltas or, when too far behind, the full checkpoint."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from affinity_pipeline.events import apply_events
from affinity_pipeline.standby import StandbyOutcome, StandbyStage, bring_up_to, report_lags
from affinity_pipeline.store import TaskStore, apply_delta, make_delta
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.zk import ZkMetadataStore

State = dict[str, list[int]]

keys = st.sampled_from([f"k{i}" for i in range(12)])
states = st.dictionaries(keys, st.lists(st.integers(0, 50), min_size=2, max_size=2), max_size=12)
batches_of_events = st.lists(
    st.lists(st.tuples(keys, st.integers(0, 9)), max_size=15), min_size=1, max_size=6
)


def _store(root: Path, location: str, task: str = "Partition 0") -> TaskStore:
    return TaskStore(
        task, local_store_dir=root / "local", checkpoint_dir=root / "ckpt", location=location
    )


@given(before=states, after=states)
def test_a_delta_turns_the_state_before_into_the_state_after(before: State, after: State) -> None:
    delta = make_delta(3, before, after)
    copy = {k: list(v) for k, v in before.items()}
    assert apply_delta(copy, delta) == after
    assert set(delta.changed) <= set(after)
    assert all(before.get(k) != v for k, v in delta.changed.items())  # only what changed


@settings(max_examples=40, deadline=None)
@given(batches=batches_of_events)
def test_a_standby_copy_follows_the_active_through_stored_deltas(
    batches: list[list[tuple[str, int]]],
) -> None:
    """The active runs the batches at one location; after each, the copy at another location is
    brought up to date: by the delta (the copy was one batch behind), equal to the active."""
    with tempfile.TemporaryDirectory() as tmp:
        active, standby = _store(Path(tmp), "127.0.0.2"), _store(Path(tmp), "127.0.0.3")
        for batch, events in enumerate(batches):
            state = active.load(batch - 1).state
            before = {k: list(v) for k, v in state.items()}
            apply_events(state, events)
            active.save(batch, state, before)
            applied, delta_bytes, catchup_bytes = bring_up_to(standby, batch)
            assert applied == ("catch-up" if batch == 0 else "delta")
            assert (delta_bytes > 0) == (batch > 0) and (catchup_bytes > 0) == (batch == 0)
            assert standby.local_state() == (batch, state)
            loaded = standby.load(batch)  # a failover there finds the state warm
            assert (loaded.status, loaded.state) == ("warm", state)


def test_a_copy_far_behind_or_absent_catches_up_from_the_checkpoint(tmp_path: Path) -> None:
    active, standby = _store(tmp_path, "a"), _store(tmp_path, "b")
    states = [{"k1": [1, 1]}, {"k1": [2, 3]}, {"k1": [2, 3], "k2": [1, 7]}, {"k2": [2, 9]}]
    for batch, state in enumerate(states):
        active.save(batch, state, states[batch - 1] if batch else {})
        if batch == 1:
            assert bring_up_to(standby, 1)[0] == "catch-up"  # absent
    applied, delta_bytes, catchup_bytes = bring_up_to(standby, 3)  # two batches behind
    assert (applied, delta_bytes) == ("catch-up", 0)
    assert catchup_bytes == active.checkpoint_path(3).stat().st_size
    assert standby.local_state() == (3, states[3])
    assert bring_up_to(standby, 3) == ("current", 0, 0)
    # only the last two checkpoints and deltas are kept; the delta of 3 removes k1
    assert sorted(p.name for p in active.checkpoint_folder.iterdir()) == [
        "00000002.delta.json",
        "00000002.json",
        "00000003.delta.json",
        "00000003.json",
    ]
    delta, size = active.read_delta(3) or (None, 0)
    assert delta is not None and delta.removed == ("k1",) and delta.changed == {"k2": [2, 9]}
    assert size == active.delta_path(3).stat().st_size
    assert active.latest_checkpoint() == 3


def test_a_delta_is_smaller_than_the_checkpoint_when_a_batch_touches_few_keys(
    tmp_path: Path,
) -> None:
    active = _store(tmp_path, "a")
    before = {f"key-{i:04d}": [i, i] for i in range(500)}
    after = {**before, "key-0007": [8, 20]}
    size = active.save(1, after, before)
    delta, delta_size = active.read_delta(1) or (None, 0)
    assert delta is not None and delta.changed == {"key-0007": [8, 20]}
    assert delta_size * 50 < size


def _outcome(task: str, batch: int, location: str) -> StandbyOutcome:
    return StandbyOutcome(task, batch, "delta", 10, 0, location, "1", 0.01)


@pytest.mark.zk
def test_lags_are_reported_per_processor_and_stale_entries_removed(
    zk_store: ZkMetadataStore,
) -> None:
    """Each copy's lag goes under its processor; a copy that ran elsewhere is not reported; the
    entries of copies the model dropped and of processors that are gone are removed."""
    live = {"p-1": "127.0.0.2", "p-2": "127.0.0.3"}
    zk_store.standby_lag.write("p-gone", {"Partition 0": 0})
    zk_store.standby_lag.write("p-1", {"Partition 9": 0})  # a copy p-1 no longer holds
    stage = StandbyStage(
        5,
        {
            ("Partition 0", "p-1"): _outcome("Partition 0", 5, "127.0.0.2"),
            ("Partition 1", "p-2"): _outcome("Partition 1", 4, "127.0.0.3"),
            ("Partition 2", "p-2"): _outcome("Partition 2", 5, "127.0.0.2"),  # ran elsewhere
        },
        0.1,
        3,
        3,
    )
    copies = {"p-1": ["Partition 0"], "p-2": ["Partition 1", "Partition 2"]}
    assert report_lags(zk_store, stage, copies, live) > 0
    assert zk_store.standby_lag.read() == {"p-1": {"Partition 0": 0}, "p-2": {"Partition 1": 1}}
    assert report_lags(zk_store, stage, copies, live) == 0  # nothing changed: no writes
