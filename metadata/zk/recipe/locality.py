"""Task locality: one node per task, ``localityData/<task name, url-encoded>`` = location id.

Locality belongs to a run (invariant I7): the ``localityData`` node holds ``{"run_id": ...}``, and
entries are only read by a store of that run id. A store of another run id reads nothing; the
first write of a new run deletes the old entries and marks the folder with the new run id
(:meth:`TaskLocalityStore.reset`), so a new run starts with no locality.

Writes are differential: :meth:`TaskLocalityStore.write` reads the current value of each given
task and writes only the entries that differ (a create for a new task, a conditional set for a
changed one), batched into transactions below ZooKeeper's request limit. Each transaction checks
the ``localityData`` node's version, so no entry lands in a folder that was reset meanwhile.
Writes are partial updates: tasks not named keep their entry (each processor writes its own tasks,
invariant I4).

No per-node reads where the store knows the values: every write transaction also bumps the
version of ``localityWrites`` (an unconditional set, so writers never conflict on it). A store
remembers the entries it wrote or read with their node versions, and the ``localityWrites``
version its own last transaction left; while that version (and the ``localityData`` marker) is
unchanged, no one else wrote, so it compares with what it remembers and reads nothing. Once anyone
else wrote, it forgets and reads again; a conditional set that fails on a stale version makes it
forget and retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping

from kazoo.protocol.states import ZnodeStat

from metadata.errors import CorruptDataError
from metadata.ids import location_id_problem
from metadata.zk.errors import NotFound, WriteConflict
from metadata.zk.layout import JobLayout, decode_name
from metadata.zk.ops import SAFE_REQUEST_BYTES, Op, ZkOps
from metadata.zk.transaction import batches

__all__ = ["TaskLocalityStore"]

_CONFLICTS = (WriteConflict, NotFound)


class TaskLocalityStore:
    """Reads and differentially writes the task locality of one run of one job.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store`` (of run ``store.run_id``)::

        store.locality.write({"Partition 0": "zone-a/node-1"})   # only what changed is written
        store.locality.read()                                    # {"Partition 0": "zone-a/node-1"}
        store.locality.reset()                                   # a new run starts empty (I7)

    """

    def __init__(
        self, ops: ZkOps, layout: JobLayout, run_id: str, *, max_attempts: int = 5
    ) -> None:
        if not run_id:
            raise ValueError("run_id must not be empty")
        self._ops = ops
        self._layout = layout
        self._path = layout.locality
        self._run_id = run_id
        self._max_attempts = max_attempts
        self._known = _Known()

    def marker_data(self) -> bytes:
        return json.dumps({"run_id": self._run_id}, separators=(",", ":")).encode()

    def _marker(self) -> tuple[str | None, ZnodeStat] | None:
        """(run id the entries belong to, stat of ``localityData``), or None if it is missing."""
        found = self._ops.get(self._path, "read locality run")
        if found is None:
            return None
        data, stat = found
        if not data:
            return None, stat
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptDataError(
                self._path, f"locality run marker is not valid JSON: {exc}"
            ) from None
        run_id = document.get("run_id") if isinstance(document, dict) else None
        if not isinstance(run_id, str) or not run_id:
            raise CorruptDataError(self._path, f"locality run marker has no run_id: {data[:60]!r}")
        return run_id, stat

    # ---------------------------------------------------------------- reading

    def read(
        self, *, on_corrupt: Callable[[CorruptDataError], None] | None = None
    ) -> dict[str, str]:
        """Task name -> location id, for this run (empty for a run that has written nothing).

        A corrupt entry raises :class:`CorruptDataError`; with ``on_corrupt``, it is reported
        there instead and left out (the task reads as having no recorded location)."""
        for _ in range(self._max_attempts):
            marker = self._marker()
            if marker is None or marker[0] != self._run_id:
                return {}
            names = self._ops.children(self._path, "list task locality") or []
            paths = [f"{self._path}/{name}" for name in names]
            found = self._ops.get_many(paths, "read task locality", self._path)
            locality: dict[str, str] = {}
            for name, path in zip(names, paths, strict=True):
                entry = found.get(path)
                if entry is None:
                    continue  # deleted between listing and reading
                try:
                    locality[decode_name(name, path)] = self._decode_location(path, entry[0])
                except CorruptDataError as exc:
                    if on_corrupt is None:
                        raise
                    on_corrupt(exc)
            again = self._marker()
            if again is not None and again[1].version == marker[1].version:
                return locality
            self._ops.log.info("zk.locality_reset_while_reading")
        raise WriteConflict(self._path, "task locality kept being reset while reading it")

    @staticmethod
    def _decode_location(path: str, data: bytes) -> str:
        try:
            location = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptDataError(path, f"location id is not UTF-8 text: {exc}") from None
        problem = location_id_problem(location)
        if problem is not None:
            raise CorruptDataError(path, problem)
        return location

    # ---------------------------------------------------------------- writing

    def write(self, locality: Mapping[str, str]) -> int:
        """Write the entries of ``locality`` that differ from what is stored; returns the number
        of write operations (creates, sets, and deletes of a reset for a new run)."""
        applied = 0
        for attempt in range(1, self._max_attempts + 1):
            marker = self._marker()
            try:
                if marker is None:
                    self._ops.create(self._path, self.marker_data(), what="create locality folder")
                    applied += 1
                    continue
                run_id, stat = marker
                if run_id != self._run_id:
                    applied += self._reset(stat, run_id)
                    continue
                applied += self._write_changed(locality, stat)
                return applied
            except _CONFLICTS as exc:
                self._known.forget()
                self._ops.log.info("zk.locality_write_conflict", attempt=attempt, error=str(exc))
        raise WriteConflict(
            self._path, f"task locality changed concurrently in {self._max_attempts} attempts"
        )

    def _write_changed(self, locality: Mapping[str, str], marker: ZnodeStat) -> int:
        known = self._known
        writes = self._writes_version()
        if (known.marker, known.writes) != (marker.version, writes):
            known.forget()  # another writer (or a reset) since our last write
        changed = {t: loc for t, loc in locality.items() if known.location.get(t) != loc}
        wanted = {
            task: (self._layout.locality_entry(task), data) for task, data in _checked(changed)
        }
        unknown = [path for task, (path, _) in wanted.items() if task not in known.version]
        current = self._ops.get_many(unknown, "read task locality", self._path)
        ops, tasks = [], []
        for task, (path, data) in wanted.items():
            version = known.version.get(task)
            entry = None if version is not None else current.get(path)
            if version is not None:
                ops.append(Op("set", path, data, version=version))
            elif entry is None:
                ops.append(Op("create", path, data))
            elif entry[0] != data:
                ops.append(Op("set", path, data, version=entry[1].version))
            else:
                known.remember(task, changed[task], entry[1].version)
                continue
            tasks.append((task, changed[task]))
        self._commit(ops, tasks, marker, writes)
        self._ops.log.debug("zk.locality_written", tasks=len(locality), written=len(ops))
        return len(ops)

    def _commit(
        self, ops: list[Op], tasks: list[tuple[str, str]], marker: ZnodeStat, writes: int
    ) -> None:
        """Apply ``ops`` (writing ``tasks``, in order) in batched transactions, each checking the
        marker and bumping ``localityWrites``; remember what was written, and whether only we
        wrote since ``writes``."""
        known = self._known
        guards = [
            Op("check", self._path, version=marker.version),
            Op("set", self._layout.locality_writes, b"", version=-1),
        ]
        reserved = sum(self._ops.request_size(g) for g in guards)
        done = 0
        alone = True
        for batch in batches(
            ops, budget=SAFE_REQUEST_BYTES, reserved=reserved, size=self._ops.request_size
        ):
            results = self._ops.commit([*guards, *batch], "write task locality")
            writes += 1
            alone = alone and results[1].version == writes
            for op, result in zip(batch, results[2:], strict=True):
                version = 0 if op.kind == "create" else result.version
                known.remember(*tasks[done], version)
                done += 1
        known.marker = marker.version
        known.writes = writes if alone else None

    def _writes_version(self) -> int:
        """The version of ``localityWrites`` (created if missing: a job laid out before it)."""
        path = self._layout.locality_writes
        found = self._ops.get(path, "read locality writes")
        if found is None:
            self._ops.ensure(path, what="create locality writes")
            found = self._ops.get(path, "read locality writes")
            if found is None:
                raise NotFound(path, "locality writes node vanished")
        return int(found[1].version)

    def reset(self) -> int:
        """Start this run's locality: delete every entry (of any run), mark the run id."""
        for _ in range(self._max_attempts):
            marker = self._marker()
            try:
                if marker is None:
                    self._ops.create(self._path, self.marker_data(), what="create locality folder")
                    return 1
                return self._reset(marker[1], marker[0])
            except _CONFLICTS as exc:
                self._ops.log.info("zk.locality_reset_conflict", error=str(exc))
        raise WriteConflict(self._path, "task locality changed concurrently while resetting it")

    def _reset(self, marker: ZnodeStat, old_run: str | None) -> int:
        self._known.forget()
        names = self._ops.children(self._path, "list task locality") or []
        deletes = [Op("delete", f"{self._path}/{name}") for name in names]
        guard = Op("check", self._path, version=marker.version)
        applied = self._ops.commit_batched(deletes, "reset task locality", guards=[guard])
        self._ops.set(
            self._path, self.marker_data(), what="mark locality run", version=marker.version
        )
        self._ops.log.info(
            "zk.locality_reset", old_run_id=old_run, run_id=self._run_id, deleted=applied
        )
        return applied + 1


def _checked(locality: Mapping[str, str]) -> Iterator[tuple[str, bytes]]:
    """(task, encoded location) of each entry; ValueError for a bad task name or location."""
    for task, location in locality.items():
        if not isinstance(task, str) or not task:
            raise ValueError(f"task name must be a non-empty string, got {task!r}")
        problem = location_id_problem(location)
        if problem is not None:
            raise ValueError(f"{task!r}: {problem}")
        yield task, str(location).encode()


class _Known:
    """What a store knows is stored: task -> location and node version, valid while the marker
    and ``localityWrites`` are at ``marker`` and ``writes`` (None: not known)."""

    def __init__(self) -> None:
        self.location: dict[str, str] = {}
        self.version: dict[str, int] = {}
        self.marker: int | None = None
        self.writes: int | None = None

    def remember(self, task: str, location: str, version: int) -> None:
        self.location[task] = location
        self.version[task] = version

    def forget(self) -> None:
        self.location.clear()
        self.version.clear()
        self.marker = self.writes = None
