"""Standby lag reports: ``standbyLag/<processor id>/<task name>`` = the lag of that processor's
copy of the task's state (decimal text; 0 = caught up), both names URL-encoded.

The entries are ephemeral: they go with the session of the processor that wrote them, so a
processor that dies leaves no report behind (its folder stays, empty, for its next life). A
folder exists only while its processor reports a copy, or after it died holding some: removing
a processor's last entry removes its folder too. :meth:`StandbyLagStore.read` lists the folders
once and reads only those of the processors asked for, so a job with no standbys costs the
leader one request per grouper run, whatever the number of processors.

A processor writes the entries of the standby replicas it holds; nothing else writes there. The
writes are differential, as task locality's are: :meth:`StandbyLagStore.write` reads the stored
value of each given task and writes only the entries that differ (a create for a new one, a
conditional set for a changed one), batched into transactions below ZooKeeper's request limit; a
report that changes nothing writes nothing. :meth:`StandbyLagStore.remove` deletes the entries
of copies the processor no longer holds, :meth:`StandbyLagStore.clear` every entry of a
processor (a processor starting again clears what its previous life left).

A write that loses a race (an entry created, changed or removed meanwhile, the processor's
folder removed) is read again and retried with tenacity, at most ``max_attempts`` times, then
raises :class:`~metadata.zk.errors.WriteConflict`; every other error propagates. The recipe
stores and reads; what a lag means (a caught-up copy, the active's own processor) is the
coordinator's to decide.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from metadata.errors import CorruptDataError
from metadata.zk.errors import TransactionRejected, WriteConflict
from metadata.zk.layout import JobLayout, decode_name
from metadata.zk.ops import Op, ZkOps
from metadata.zk.races import LostRace, lost_race, retry_races

__all__ = ["StandbyLagStore"]


def _encode(task: str, lag: int) -> bytes:
    if not isinstance(task, str) or not task:
        raise ValueError(f"task name must be a non-empty string, got {task!r}")
    if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
        raise ValueError(f"lag of {task!r} must be an integer >= 0, got {lag!r}")
    return str(lag).encode()


def _decode(path: str, data: bytes) -> int:
    text = data.decode("utf-8", errors="replace")
    if not text.isdigit() or not text.isascii():
        raise CorruptDataError(path, f"standby lag is not a decimal integer: {data[:60]!r}")
    return int(text)


class StandbyLagStore:
    """Reads and differentially writes the standby lag reports of one job.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        store.standby_lag.write("p-2", {"Partition 0": 1200, "Partition 3": 0})  # creates 2
        store.standby_lag.write("p-2", {"Partition 0": 1200})      # unchanged: writes nothing
        store.standby_lag.read(["p-2"])       # {"p-2": {"Partition 0": 1200, "Partition 3": 0}}
        store.standby_lag.remove("p-2", ["Partition 3"])           # the copy was dropped
        store.standby_lag.clear("p-2")                             # a processor starting again

    """

    def __init__(
        self, ops: ZkOps, layout: JobLayout, *, max_attempts: int = 5, max_pause_s: float = 0.05
    ) -> None:
        self._ops = ops
        self._layout = layout
        self._folder = layout.standby_lag
        self._max_attempts = max_attempts
        self._max_pause_s = max_pause_s

    # ---------------------------------------------------------------- reading

    def read(
        self,
        processors: Collection[str] | None = None,
        *,
        on_corrupt: Callable[[CorruptDataError], None] | None = None,
    ) -> dict[str, dict[str, int]]:
        """Processor id -> {task name: lag}, for ``processors`` (None: every processor with a
        report). A corrupt entry raises :class:`CorruptDataError`; with ``on_corrupt``, it is
        reported there instead and left out."""
        names = self._ops.children(self._folder, "list standby lag processors") or []
        reporting = [decode_name(name, f"{self._folder}/{name}") for name in names]
        if processors is not None:
            wanted = set(processors)
            reporting = [pid for pid in reporting if pid in wanted]
        lags: dict[str, dict[str, int]] = {}
        for processor_id in sorted(reporting):
            entries = self._read_processor(processor_id, on_corrupt)
            if entries:
                lags[processor_id] = entries
        return lags

    def _read_processor(
        self, processor_id: str, on_corrupt: Callable[[CorruptDataError], None] | None
    ) -> dict[str, int]:
        folder = self._layout.standby_lag_folder(processor_id)
        names = self._ops.children(folder, "list standby lag") or []
        paths = [f"{folder}/{name}" for name in names]
        found = self._ops.get_many(paths, "read standby lag", folder)
        entries: dict[str, int] = {}
        for name, path in zip(names, paths, strict=True):
            entry = found.get(path)
            if entry is None:
                continue  # removed between listing and reading
            try:
                entries[decode_name(name, path)] = _decode(path, entry[0])
            except CorruptDataError as exc:
                if on_corrupt is None:
                    raise
                on_corrupt(exc)
        return entries

    # ---------------------------------------------------------------- writing

    def write(self, processor_id: str, lags: Mapping[str, int]) -> int:
        """Write the entries of ``lags`` (task -> lag of this processor's copy) that differ
        from what is stored; returns the number of write operations (the processor's folder
        included, when it is created; 0: nothing changed). Tasks not named keep their entry."""
        wanted = {
            self._layout.standby_lag_entry(processor_id, task): _encode(task, lag)
            for task, lag in lags.items()
        }
        if not wanted:
            return 0
        return self._retrying(lambda: self._write_changed(processor_id, wanted), "write")

    def remove(self, processor_id: str, tasks: Collection[str]) -> int:
        """Delete the entries of ``tasks`` (copies the processor no longer holds), and the
        processor's folder if that leaves it empty; returns the number of deletes (entries
        already gone are not counted)."""
        paths = [self._layout.standby_lag_entry(processor_id, task) for task in tasks]
        deleted = self._retrying(lambda: self._delete_present(paths), "remove")
        return deleted + self._remove_folder_if_empty(processor_id) if deleted else deleted

    def clear(self, processor_id: str) -> int:
        """Delete every entry of ``processor_id`` and its folder; returns the number of
        deletes."""
        folder = self._layout.standby_lag_folder(processor_id)
        names = self._ops.children(folder, "list standby lag") or []
        return self.remove(processor_id, [decode_name(name, f"{folder}/{name}") for name in names])

    def _write_changed(self, processor_id: str, wanted: Mapping[str, bytes]) -> int:
        folder = self._layout.standby_lag_folder(processor_id)
        current = self._ops.get_many(wanted, "read standby lag", folder)
        ops = []
        for path, data in wanted.items():
            entry = current.get(path)
            if entry is None:
                ops.append(Op("create", path, data, ephemeral=True))
            elif entry[0] != data:
                ops.append(Op("set", path, data, version=entry[1].version))
        written = 0
        creates = any(op.kind == "create" for op in ops)
        if creates and self._ops.exists(folder, "check standby lag folder") is None:
            self._ops.ensure(folder, what="create standby lag folder")
            written += 1
        written += self._commit(ops, "write standby lag")
        self._ops.log.debug(
            "zk.standby_lag_written", processor=processor_id, tasks=len(wanted), written=written
        )
        return written

    def _remove_folder_if_empty(self, processor_id: str) -> int:
        """Delete the processor's folder if it holds no entry (1 if deleted). A folder that got
        an entry meanwhile stays: that write is newer than this removal."""
        folder = self._layout.standby_lag_folder(processor_id)
        stat = self._ops.exists(folder, "check standby lag folder")
        if stat is None or stat.numChildren:
            return 0
        try:
            deleted = self._ops.delete(folder, what="remove empty standby lag folder")
        except WriteConflict:  # not empty any more: an entry was written meanwhile
            return 0
        return 1 if deleted else 0

    def _delete_present(self, paths: Collection[str]) -> int:
        if not paths:
            return 0
        found = self._ops.get_many(paths, "read standby lag", self._folder)
        ops = [Op("delete", path, version=e[1].version) for path, e in found.items() if e]
        return self._commit(ops, "remove standby lag")

    def _commit(self, ops: list[Op], what: str) -> int:
        try:
            return self._ops.commit_batched(ops, what)
        except TransactionRejected as exc:
            if lost_race(exc):
                raise LostRace(str(exc)) from exc
            raise

    def _retrying(self, attempt: Callable[[], int], what: str) -> int:
        return retry_races(
            attempt,
            ops=self._ops,
            folder=self._folder,
            what=f"{what} standby lag",
            event="zk.standby_lag_write_conflict",
            attempts=self._max_attempts,
            max_pause_s=self._max_pause_s,
        )
