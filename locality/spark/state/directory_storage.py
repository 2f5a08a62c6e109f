"""The filesystem :class:`~locality.spark.state.durable.Storage`: a stateful query's durable
directory (``state.checkpoint_dir``) on a shared mount, HDFS through FUSE, or one machine in
tests: ``<root>/keygroups/`` (the object space's chains), ``<root>/records/`` (batch records)
and ``<root>/outputs/`` (kept outputs). Records and outputs are written to a temporary name,
fsynced and published with ``os.replace`` (``put_*``) or ``os.link`` (``create_record``: fails
if the name exists). Standard library only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from locality.spark.state.objectspace import DirectoryStorage

__all__ = ["DirectoryStateStorage"]


class DirectoryStateStorage(DirectoryStorage):
    """:class:`Storage` in a directory: ``<root>/keygroups/``, ``<root>/records/`` and
    ``<root>/outputs/``."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        super().__init__(Path(root) / "keygroups", fsync=fsync)
        self.state_root = Path(root)
        self.records = Path(root) / "records"

    def list_records(self) -> list[str]:
        return _listed(self.records)

    def read_record(self, name: str) -> bytes | None:
        return _read(self.records / name)

    def put_record(self, name: str, data: bytes) -> None:
        self._write(self.records, name, data, replace=True)

    def create_record(self, name: str, data: bytes) -> None:
        self._write(self.records, name, data, replace=False)

    def delete_record(self, name: str) -> None:
        (self.records / name).unlink(missing_ok=True)

    @property
    def outputs(self) -> Path:
        return self.state_root / "outputs"

    def put_output(self, name: str, data: bytes) -> None:
        self._write(self.outputs, name, data, replace=True)

    def read_output(self, name: str) -> bytes | None:
        return _read(self.outputs / name)

    def list_outputs(self) -> list[str]:
        return _listed(self.outputs)

    def delete_output(self, name: str) -> None:
        (self.outputs / name).unlink(missing_ok=True)

    def _write(self, folder: Path, name: str, data: bytes, *, replace: bool) -> None:
        """Write ``folder/name`` atomically (a fsynced temporary file, then ``os.replace``, or
        ``os.link``, which fails if the name exists, when not ``replace``)."""
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            if replace:
                os.replace(tmp, folder / name)
                return
            try:
                os.link(tmp, folder / name)
            except FileExistsError:
                raise FileExistsError(f"{folder / name} already exists") from None
        finally:
            Path(tmp).unlink(missing_ok=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirectoryStateStorage) and other.state_root == self.state_root

    def __hash__(self) -> int:
        return hash(self.state_root)

    def __repr__(self) -> str:
        return f"DirectoryStateStorage({str(self.state_root)!r})"


def _listed(folder: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except FileNotFoundError:
        return []


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
