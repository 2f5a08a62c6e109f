"""A job model's manifest read only as far as a processor needs to decide: its *head*.

After a death every processor of the job reads the new version's manifest
(:class:`~metadata.zk.chunks.Manifest`, the data of ``jobModels/<v>``), and most of them (the
survivors: neither losing nor gaining a task) need only ``version``, ``base``, ``losing`` and
``gaining`` from it. The rest, the references of every chunk and container view (about one per
2 KB of compressed model: dozens at a thousand processors), is what decoding costs most and what
only a processor that reads its container uses. :class:`ManifestHead` checks the head fields
and keeps the bytes; :meth:`ManifestHead.manifest` decodes (and checks) the whole manifest when
it is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from metadata.errors import CorruptDataError
from metadata.zk.chunks import MANIFEST_FORMAT, Manifest

__all__ = ["ManifestHead"]


@dataclass(frozen=True, slots=True)
class ManifestHead:
    """``version``, ``base``, ``losing`` and ``gaining`` of a manifest (the fields of
    :class:`~metadata.zk.chunks.Manifest`), with its bytes for :meth:`manifest`."""

    version: int
    base: int | None
    losing: tuple[str, ...]
    gaining: tuple[str, ...] | None
    data: bytes
    path: str

    @classmethod
    def from_bytes(cls, data: bytes, path: str, version: int) -> ManifestHead:
        """The head of the manifest ``data`` of version ``version`` stored at ``path``;
        CorruptDataError naming ``path`` if it is not one (or describes another version)."""
        try:
            document = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CorruptDataError(path, f"manifest is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise CorruptDataError(path, "manifest is not a JSON object")
        fmt = _integer(document, "format", path)
        if fmt != MANIFEST_FORMAT:
            raise CorruptDataError(
                path, f"unknown manifest format {fmt} (this reader knows {MANIFEST_FORMAT})"
            )
        described = _integer(document, "version", path)
        if described != version:
            raise CorruptDataError(path, f"manifest describes version {described}")
        base = _integer(document, "base", path) if "base" in document else None
        losing: tuple[str, ...] = ()
        gaining: tuple[str, ...] | None = None
        if base is not None:
            losing = _processor_ids(document, "losing", path)
            if "gaining" in document:
                gaining = _processor_ids(document, "gaining", path)
        return cls(version, base, losing, gaining, data, path)

    def manifest(self) -> Manifest:
        """The whole manifest, decoded and checked (CorruptDataError naming its path)."""
        return Manifest.from_bytes(self.data, self.path)


def _integer(document: dict[str, Any], key: str, path: str) -> int:
    value = document.get(key)
    if type(value) is not int:
        raise CorruptDataError(path, f"manifest field {key} should be int, got {value!r:.60}")
    return value


def _processor_ids(document: dict[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = document.get(key)
    if not isinstance(value, list) or not all(isinstance(pid, str) for pid in value):
        raise CorruptDataError(path, f"manifest field {key} should list processor ids")
    return tuple(value)
