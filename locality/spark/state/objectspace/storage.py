"""Where checkpoint files live: the :class:`CheckpointStorage` protocol, the filesystem's
:class:`DirectoryStorage` and the in-memory :class:`MemoryStorage`. Imports nothing of the
package."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

__all__ = ["CheckpointStorage", "DirectoryStorage", "MemoryStorage"]


class CheckpointStorage(Protocol):
    """Where checkpoint files live: a flat namespace of files per key group.

    ``create_file`` must be atomic (a reader sees the whole file or no file, also after a
    crash) and must refuse to overwrite (``FileExistsError``).
    """

    def list_files(self, key_group: int) -> list[str]:
        """The names of the key group's files (no temporary files); [] if none."""
        ...

    def read_file(self, key_group: int, name: str) -> bytes: ...

    def create_file(self, key_group: int, name: str, data: bytes) -> None: ...

    def delete_file(self, key_group: int, name: str) -> None:
        """Delete the file if it exists."""
        ...

    def describe(self, key_group: int, name: str) -> str:
        """Where the file is, for error messages (a path)."""
        ...


class DirectoryStorage:
    """Checkpoint files under ``root``: ``<root>/kg-<group:05d>/<name>``.

    ``create_file`` writes ``.<name>.*.tmp`` in the same folder, fsyncs it (``fsync=True``),
    publishes it with ``os.link`` (atomic; fails if the name exists, so nothing is ever
    overwritten), removes the temporary name and fsyncs the folder. On a filesystem without
    hard links it falls back to ``os.replace`` after checking the name is free.
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync

    def folder(self, key_group: int) -> Path:
        return self.root / f"kg-{key_group:05d}"

    def list_files(self, key_group: int) -> list[str]:
        try:
            entries = os.listdir(self.folder(key_group))
        except FileNotFoundError:
            return []
        return sorted(name for name in entries if not name.startswith("."))

    def read_file(self, key_group: int, name: str) -> bytes:
        return (self.folder(key_group) / name).read_bytes()

    def _sync_dir(self, path: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        folder = self.folder(key_group)
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            self._sync_dir(folder.parent)
        target = folder / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise FileExistsError(f"{target} already exists (not overwritten)") from None
            except OSError:  # no hard links here
                if target.exists():
                    raise FileExistsError(f"{target} already exists (not overwritten)") from None
                os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
        self._sync_dir(folder)

    def delete_file(self, key_group: int, name: str) -> None:
        folder = self.folder(key_group)
        (folder / name).unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self._sync_dir(folder)

    def describe(self, key_group: int, name: str) -> str:
        return str(self.folder(key_group) / name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DirectoryStorage) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"DirectoryStorage({str(self.root)!r})"


class MemoryStorage:
    """Checkpoint files in a dict (tests, and a model of :class:`DirectoryStorage`)."""

    def __init__(self) -> None:
        self.files: dict[tuple[int, str], bytes] = {}

    def list_files(self, key_group: int) -> list[str]:
        return sorted(name for group, name in self.files if group == key_group)

    def read_file(self, key_group: int, name: str) -> bytes:
        try:
            return self.files[key_group, name]
        except KeyError:
            raise FileNotFoundError(self.describe(key_group, name)) from None

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        if (key_group, name) in self.files:
            raise FileExistsError(f"{self.describe(key_group, name)} already exists")
        self.files[key_group, name] = bytes(data)

    def delete_file(self, key_group: int, name: str) -> None:
        self.files.pop((key_group, name), None)

    def describe(self, key_group: int, name: str) -> str:
        return f"memory:kg-{key_group:05d}/{name}"
