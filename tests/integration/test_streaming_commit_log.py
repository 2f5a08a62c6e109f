"""The streaming commit log on a real ZooKeeper: one live driver per job (a second driver deposes
the first, whose next begin and commit are refused naming both), records created never
overwritten, a batch id below the latest commit refused (never a silent wipe), a replay started
from the commit before it, and a pointer lost or pointing nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from coordinator.streaming.commits import CommitLog, CommitLogError, DriverFenced
from locality.spark.state import CommitRecord, DirectoryStateStorage
from metadata.zk import ZkMetadataStore

pytestmark = pytest.mark.zk

LOG = structlog.get_logger("test")


def _record(batch: int, start: CommitRecord | None, head: str) -> CommitRecord:
    return CommitRecord(
        batch, {"t0": f"tok{batch}"}, {"t0": (0,)}, 4, heads={0: head},
        prev=start.name if start else None,
    )  # fmt: skip


def test_a_second_driver_deposes_the_first(zk_store: ZkMetadataStore, tmp_path: Path) -> None:
    storage = DirectoryStateStorage(tmp_path, fsync=False)
    first = CommitLog.open(zk_store, storage, "app-1@host-a:1", LOG)
    zero = first.commit(_record(0, first.start_of(0), "base-00000000-0-a.json"))
    assert first.latest() == zero and zero.epoch == first.epoch == 1

    second = CommitLog.open(zk_store, storage, "app-2@host-b:2", LOG)
    assert second.epoch == 2
    with pytest.raises(DriverFenced, match=r"app-1@host-a:1.*deposed by driver 'app-2@host-b:2'"):
        first.start_of(1)
    records = sorted(storage.list_records())
    with pytest.raises(DriverFenced, match="epoch 1"):
        first.commit(_record(1, zero, "delta-00000001-1-b.json"))
    assert sorted(storage.list_records()) == records  # the refused record was removed
    one = second.commit(_record(1, second.start_of(1), "delta-00000001-1-c.json"))
    assert second.latest() == one and one.prev == zero.name and one.driver == "app-2@host-b:2"


def test_a_lower_batch_id_is_refused_and_the_same_id_replays(
    zk_store: ZkMetadataStore, tmp_path: Path
) -> None:
    storage = DirectoryStateStorage(tmp_path, fsync=False)
    log = CommitLog.open(zk_store, storage, "app-1@h:1", LOG)
    start = None
    for batch in range(3):
        start = log.commit(_record(batch, log.start_of(batch), f"base-{batch:08d}-{batch}-a.json"))
    before = sorted(storage.list_records())
    with pytest.raises(CommitLogError, match=r"batch 0 is below batch 2.*checkpointLocation"):
        log.start_of(0)
    assert sorted(storage.list_records()) == before  # nothing was changed
    # Spark runs batch 2 again in the driver that committed it: done already
    assert log.committed_here(2) and not log.committed_here(1) and not log.committed_here(3)
    # a restart where Spark runs batch 2 again: it starts from batch 1's commit
    restarted = CommitLog.open(zk_store, storage, "app-1@h:2", LOG)
    assert not restarted.committed_here(2)  # another driver's commit: run it again
    replay_start = restarted.start_of(2)
    assert replay_start is not None and replay_start.batch == 1
    again = restarted.commit(_record(2, replay_start, "base-00000002-2-b.json"))
    assert restarted.latest() == again and again.name != (start.name if start else "")
    restarted.prune(again, replay_start)
    names = sorted(n for n in storage.list_records() if n.startswith("commit-"))
    assert len(names) == 3 and again.name in names  # the replaced batch 2 record is gone


def test_a_lost_pointer_adopts_the_records_and_a_changed_directory_is_named(
    zk_store: ZkMetadataStore, tmp_path: Path
) -> None:
    storage = DirectoryStateStorage(tmp_path / "state", fsync=False)
    log = CommitLog.open(zk_store, storage, "app-1@h:1", LOG)
    zero = log.commit(_record(0, None, "base-00000000-0-a.json"))
    zk_store.client.delete(log.pointer.path)  # a new ensemble: ZooKeeper forgot
    adopted = CommitLog.open(zk_store, storage, "app-2@h:1", LOG)
    assert adopted.latest() == zero and adopted.epoch == zero.epoch + 1

    elsewhere = DirectoryStateStorage(tmp_path / "other", fsync=False)
    moved = CommitLog.open(zk_store, elsewhere, "app-3@h:1", LOG)
    with pytest.raises(CommitLogError, match=r"directory was changed or emptied.*job\.run_id"):
        moved.start_of(1)
    fresh_run = zk_store.streaming_commits.for_run("run-2")
    assert fresh_run.current() is None  # a new run id: a pointer of its own
