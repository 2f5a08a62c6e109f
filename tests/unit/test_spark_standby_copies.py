"""Standby copies of ``stateful_foreach_batch`` state (locality.spark.state.standby): brought to
each commit incrementally (only the batch's checkpoint files), used warm when a task fails over
to the standby's host, replaced in full when they missed a commit, and never trusting a file a
failed attempt left on the standby's host. (Batches, crashes, lost hosts and standby refreshes
in random order: the state machine of ``test_spark_state_store``.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_spark_state_store import (
    TASKS,
    CrashingStorage,
    InjectedCrash,
    output_of,
    query,
    run_batch,
)

from locality.spark.state import QuerySpec, forget_memory, latest_commit
from locality.spark.state.standby import StandbyOutcome, StandbyWork, refresh_standby


def refresh(spec: QuerySpec, host: str) -> dict[str, StandbyOutcome]:
    """The driver's standby stage after a commit: every task's copy on ``host``."""
    storage = spec.store.storage
    commit = latest_commit(storage)
    assert commit is not None
    before = latest_commit(storage, before=commit.batch)
    outcomes = {}
    for task in TASKS:
        previous = (before.batch, before.tokens[task]) if before is not None else None
        work = StandbyWork(
            task, commit.batch, commit.tokens[task], commit.key_groups[task], previous
        )
        outcomes[task] = refresh_standby(spec.store, work, host)
    return outcomes


def test_a_copy_follows_each_commit_with_only_its_deltas_and_serves_a_failover(
    tmp_path: Path,
) -> None:
    spec = query(tmp_path)
    active = {"t0": "h1", "t1": "h1"}
    run_batch(spec, 0, {k: 1 for k in range(16)}, active)
    first = refresh(spec, "h2")
    assert {o.mode for o in first.values()} == {"full"}
    full_bytes = sum(o.bytes_applied for o in first.values())
    assert full_bytes > 0
    for batch in (1, 2, 3):
        run_batch(spec, batch, {batch: 2}, active)  # one key changes per batch
        step = refresh(spec, "h2")
        assert {o.mode for o in step.values()} == {"incremental"}
        assert 0 < sum(o.bytes_applied for o in step.values()) < full_bytes
        assert refresh(spec, "h2")["t0"].mode == "current"  # nothing left to apply

    forget_memory()
    shutil.rmtree(tmp_path / "local" / "q-1" / "h1")  # h1 is lost with its local copies
    failover = run_batch(spec, 4, {k: 1 for k in range(16)}, {"t0": "h2", "t1": "h2"})
    assert {o.source for o in failover.values()} == {"local"}
    assert sum(o.bytes_restored for o in failover.values()) == 0
    expected = [(k, 2 + (2 if k in (1, 2, 3) else 0)) for k in range(16)]
    assert output_of(failover) == expected


def test_a_copy_that_missed_a_commit_is_replaced_in_full(tmp_path: Path) -> None:
    spec = query(tmp_path)
    active = {"t0": "h1", "t1": "h1"}
    run_batch(spec, 0, {k: 1 for k in range(8)}, active)
    refresh(spec, "h2")
    run_batch(spec, 1, {0: 1}, active)
    run_batch(spec, 2, {0: 1}, active)  # no refresh after batch 1
    assert {o.mode for o in refresh(spec, "h2").values()} == {"full"}
    forget_memory()
    moved = run_batch(spec, 3, {0: 1}, {"t0": "h2", "t1": "h2"})
    assert {o.source for o in moved.values()} == {"local"}
    assert output_of(moved) == [(0, 4)]


def test_a_file_a_failed_attempt_left_on_the_standby_host_is_replaced(tmp_path: Path) -> None:
    """h2 holds a standby copy at batch 0, then runs batch 1 as an active and crashes after
    writing some checkpoint files; batch 1 is retried on h1 with other rows (a source that is
    not replayable gives other input), writing files of the same names. The refresh must not
    keep h2's files of those names: failing over to h2 then gives the committed state."""
    spec = query(tmp_path)
    run_batch(spec, 0, {k: 1 for k in range(16)}, {"t0": "h1", "t1": "h1"})
    refresh(spec, "h2")
    forget_memory()
    CrashingStorage.budget = 2  # two key groups of t0 checkpointed on h2, then the crash
    with pytest.raises(InjectedCrash):
        run_batch(spec, 1, {k: 5 for k in range(16)}, {"t0": "h2", "t1": "h2"})
    CrashingStorage.budget = None
    forget_memory()
    run_batch(spec, 1, {k: 2 for k in range(16)}, {"t0": "h1", "t1": "h1"})
    step = refresh(spec, "h2")
    assert step["t0"].mode == "incremental" and step["t0"].files_applied > 0
    forget_memory()
    failover = run_batch(spec, 2, {k: 1 for k in range(16)}, {"t0": "h2", "t1": "h2"})
    assert {o.source for o in failover.values()} == {"local"}
    assert output_of(failover) == [(k, 4) for k in range(16)]
