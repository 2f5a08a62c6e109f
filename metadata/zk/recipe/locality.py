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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from kazoo.protocol.states import ZnodeStat

from metadata.errors import CorruptDataError
from metadata.zk.errors import NotFound, WriteConflict
from metadata.zk.layout import JobLayout, decode_name
from metadata.zk.ops import Op, ZkOps

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
        if not location or not location.isprintable():
            raise CorruptDataError(
                path, f"location id is empty or not printable: {location[:60]!r}"
            )
        return location

    # ---------------------------------------------------------------- writing

    def write(self, locality: Mapping[str, str]) -> int:
        """Write the entries of ``locality`` that differ from what is stored; returns the number
        of write operations (creates, sets, and deletes of a reset for a new run)."""
        wanted: dict[str, bytes] = {}
        for task, location in locality.items():
            if not isinstance(task, str) or not task:
                raise ValueError(f"task name must be a non-empty string, got {task!r}")
            if not isinstance(location, str) or not location or not location.isprintable():
                raise ValueError(
                    f"location id of {task!r} must be printable text, got {location!r}"
                )
            wanted[self._layout.locality_entry(task)] = location.encode()
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
                applied += self._write_changed(wanted, stat)
                return applied
            except _CONFLICTS as exc:
                self._ops.log.info("zk.locality_write_conflict", attempt=attempt, error=str(exc))
        raise WriteConflict(
            self._path, f"task locality changed concurrently in {self._max_attempts} attempts"
        )

    def _write_changed(self, wanted: Mapping[str, bytes], marker: ZnodeStat) -> int:
        current = self._ops.get_many(wanted, "read task locality", self._path)
        ops = []
        for path, data in wanted.items():
            entry = current.get(path)
            if entry is None:
                ops.append(Op("create", path, data))
            elif entry[0] != data:
                ops.append(Op("set", path, data, version=entry[1].version))
        guard = Op("check", self._path, version=marker.version)
        applied = self._ops.commit_batched(ops, "write task locality", guards=[guard])
        self._ops.log.debug("zk.locality_written", tasks=len(wanted), written=applied)
        return applied

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
