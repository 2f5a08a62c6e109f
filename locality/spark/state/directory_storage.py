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
    """:class:`Storage` in a directory: ``<root>/keygroups/`` and ``<root>/records/``."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        super().__init__(Path(root) / "keygroups", fsync=fsync)
        self.state_root = Path(root)
        self.records = Path(root) / "records"

    def list_records(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.records) if not n.startswith("."))
        except FileNotFoundError:
            return []

    def read_record(self, name: str) -> bytes | None:
        try:
            return (self.records / name).read_bytes()
        except FileNotFoundError:
            return None

    def put_record(self, name: str, data: bytes) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.records)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(tmp, self.records / name)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def create_record(self, name: str, data: bytes) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.records)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            try:
                os.link(tmp, self.records / name)
            except FileExistsError:
                raise FileExistsError(f"{self.records / name} already exists") from None
        finally:
            Path(tmp).unlink(missing_ok=True)

    def delete_record(self, name: str) -> None:
        (self.records / name).unlink(missing_ok=True)

    @property
    def outputs(self) -> Path:
        return self.state_root / "outputs"

    def put_output(self, name: str, data: bytes) -> None:
        self.outputs.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.outputs)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(tmp, self.outputs / name)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def read_output(self, name: str) -> bytes | None:
        try:
            return (self.outputs / name).read_bytes()
        except FileNotFoundError:
            return None

    def list_outputs(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.outputs) if not n.startswith("."))
        except FileNotFoundError:
            return []

    def delete_output(self, name: str) -> None:
        (self.outputs / name).unlink(missing_ok=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirectoryStateStorage) and other.state_root == self.state_root

    def __hash__(self) -> int:
        return hash(self.state_root)

    def __repr__(self) -> str:
        return f"DirectoryStateStorage({str(self.state_root)!r})"
