"""A stateful query's commit log: which commit a batch starts from, and the fenced commit.

The commit records live beside the state (:mod:`locality.spark.state.durable`); ZooKeeper holds
the pointer to the latest one and the driver epoch (:class:`metadata.zk.recipe.StreamingCommits`,
one node per ``job.run_id``). The rules, in one place:

- **One live driver.** Opening the log takes the next driver epoch: every driver before it is
  deposed, and its next begin or commit is refused (:class:`DriverFenced`, naming both drivers).
- **Where a batch starts** (:meth:`CommitLog.start_of`), with ``L`` the latest commit:
  a batch id above ``L``'s starts from ``L``; the same id as ``L``'s is a replay (Spark runs a
  batch again when the driver stopped between affinity's commit and Spark's own) and starts from
  the commit ``L`` started from (``prev``), so it gives the same output and state again; a lower
  id is refused (:class:`CommitLogError`): Spark's ``checkpointLocation`` is newer than this
  state (a new query), and running it would count its records into state that already holds them,
  or, as affinity did before, silently wipe the state.
- **A replay by the driver that committed it** (:meth:`CommitLog.committed_here`): ``L``'s
  batch id run again by the driver (epoch) that made ``L`` (Spark's query failed after
  affinity's commit and before its own, and was started again in the same process) is done
  already: its state is counted and its output delivered, so nothing runs again.
- **The commit** (:meth:`CommitLog.commit`): the record is *created* under a fresh name (never
  overwriting one), then the pointer moves with compare-and-set under the driver's epoch; if a
  newer driver took over, the commit is refused and the record removed.
- **Pruning** (:meth:`CommitLog.prune`, after a commit): the records on the chain of the last
  three commits stay; every other record of a decided batch goes.

If ZooKeeper has no pointer (a new ensemble) the latest record in the directory is adopted; a
pointer naming a record the directory does not have means the directory changed: an error says
how to go on (the old directory, or a new ``job.run_id`` to start the state again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from locality.spark.state import CommitRecord, Storage
from locality.spark.state.durable import (
    KEEP_RECORDS,
    latest_commit,
    prune_records,
    read_commit,
    write_commit,
)
from metadata.zk import ZkMetadataStore
from metadata.zk.recipe import DriverFenced, DriverLease, StreamingCommits

__all__ = ["CommitLog", "CommitLogError", "DriverFenced"]


class CommitLogError(ValueError):
    """A batch cannot start from this state (the message says why and how to go on)."""


@dataclass
class CommitLog:
    """The commit log of one query's driver (module docstring); :meth:`open` to make one."""

    pointer: StreamingCommits
    storage: Storage
    lease: DriverLease
    log: Any

    @classmethod
    def open(cls, store: ZkMetadataStore, storage: Storage, driver: str, log: Any) -> CommitLog:
        """Take the driver epoch for ``driver`` (deposing every earlier driver of the run)."""
        pointer = store.streaming_commits.for_run(store.run_id)
        found = pointer.current()
        adopt, min_epoch = None, 1
        if found is None or found.record is None:
            latest = latest_commit(storage)
            if latest is not None:
                adopt, min_epoch = (latest.batch, latest.name), latest.epoch + 1
        lease = pointer.acquire(driver, adopt=adopt, min_epoch=min_epoch)
        log.info("streaming.driver_epoch", epoch=lease.epoch, driver=driver, adopted=adopt)
        return cls(pointer, storage, lease, log)

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    def latest(self) -> CommitRecord | None:
        """The latest commit (ZooKeeper's pointer); refused once this driver was deposed."""
        found = self.pointer.current()
        if found is None or found.zversion != self.lease.zversion:
            raise self.pointer.fenced(self.lease, "begin a batch")
        if found.record is None:
            return None
        try:
            return read_commit(self.storage, found.record)
        except ValueError as exc:
            raise CommitLogError(
                f"{exc}: ZooKeeper's commit pointer ({self.pointer.path}, batch {found.batch}) "
                f"names a record that state.checkpoint_dir ({self.storage!r}) does not hold: the "
                "directory was changed or emptied. Use the directory the query ran with, or set "
                "a new job.run_id to start the state again (the pointer is per run id)"
            ) from None

    def start_of(self, batch: int) -> CommitRecord | None:
        """The commit ``batch`` starts from (module docstring); a lower id is refused."""
        latest = self.latest()
        if latest is None or batch > latest.batch:
            return latest
        if batch == latest.batch:
            self.log.info("streaming.batch_again", batch=batch, replaces=latest.name)
            if latest.heads is None:  # a format 1 record: its predecessor by batch
                return latest_commit(self.storage, before=batch)
            return read_commit(self.storage, latest.prev) if latest.prev else None
        raise CommitLogError(
            f"batch {batch} is below batch {latest.batch}, the latest commit of this state "
            f"({latest.name} in {self.storage!r}): Spark's checkpointLocation is newer than "
            "the state (a new or reset query). Nothing was changed. To keep the state, restart "
            "with the checkpointLocation it ran with; to start the state again, set a new "
            "job.run_id and an empty state.checkpoint_dir (docs/spark.md, 'What happens on "
            "each failure')"
        )

    def committed_here(self, batch: int) -> bool:
        """Whether ``batch`` is the latest commit, made by this driver (module docstring)."""
        latest = self.latest()
        return latest is not None and latest.batch == batch and latest.epoch == self.lease.epoch

    def commit(self, record: CommitRecord) -> CommitRecord:
        """Create ``record`` (by this driver's epoch) and move the pointer to it; refused with
        :class:`DriverFenced` (the record removed) if a newer driver took over."""
        record = write_commit(
            self.storage, replace(record, epoch=self.lease.epoch, driver=self.lease.driver)
        )
        try:
            self.lease = self.pointer.commit(self.lease, record.batch, record.name)
        except DriverFenced:
            self.storage.delete_record(record.name)
            raise
        return record

    def prune(self, commit: CommitRecord, start: CommitRecord | None) -> list[str]:
        """Remove the records no replay can start from (module docstring)."""
        keep = [commit.name]
        if start is not None:
            keep += [start.name, start.prev or ""]
        deleted = prune_records(self.storage, set(keep[:KEEP_RECORDS]), commit.batch)
        if deleted:
            self.log.debug("streaming.records_pruned", batch=commit.batch, deleted=len(deleted))
        return deleted
