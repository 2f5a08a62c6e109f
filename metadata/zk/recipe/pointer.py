"""The version pointer (``jobModelVersion``) and the manifest heads a processor follows (a mixin
of :class:`~metadata.zk.recipe.jobmodels.JobModelStore`).

A processor hears of a new version from its watch on the pointer, reads the pointer again
(re-arming the watch) and then the new version's manifest. :meth:`VersionPointer.latest_version`
with a ``guess`` (the version after the one the processor follows: almost always the new one)
reads that manifest in the same round trip; the store keeps it for the next
:meth:`VersionPointer.read_manifest_head` of that version (one version, read once: the store
decides nothing with it).
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from metadata.errors import CorruptDataError
from metadata.zk.errors import NotFound
from metadata.zk.layout import JobLayout, parse_int_name
from metadata.zk.ops import ZkOps
from metadata.zk.pipelined import Watcher
from metadata.zk.recipe.manifests import ManifestHead
from metadata.zk.watch import Watch

__all__ = ["VersionPointer"]


class VersionPointer:
    """Reads and watches of the version pointer, and manifest heads (module docstring)."""

    _ops: ZkOps
    _layout: JobLayout
    _prefetched: tuple[int, bytes] | None = None  # (version, its manifest) read in advance

    def _parse_version(self, data: bytes) -> int | None:
        text = data.decode("ascii", errors="replace").strip()
        if not text:
            return None
        version = parse_int_name(text)
        if version is None:
            raise CorruptDataError(
                self._layout.job_model_version, f"not a job-model version: {text[:40]!r}"
            )
        return version

    def _read_version(self) -> tuple[int | None, ZnodeStat]:
        path = self._layout.job_model_version
        found = self._ops.get(path, "read job model version")
        if found is None:
            raise NotFound(path, "the job folder is not set up (no jobModelVersion node)")
        return self._parse_version(found[0]), found[1]

    def _pointer_stat(self) -> ZnodeStat:
        """The stat of the version pointer, whatever it holds."""
        path = self._layout.job_model_version
        found = self._ops.get(path, "read job model version")
        if found is None:
            raise NotFound(path, "the job folder is not set up (no jobModelVersion node)")
        return found[1]

    def latest_version(
        self, *, watch: Watcher | None = None, guess: int | None = None
    ) -> int | None:
        """The latest published version, or None if none was published (or there is no job);
        ``watch``: kazoo's one-shot watch left on the version pointer (ZkOps.get_watched).
        ``guess``: a version whose manifest is read in the same round trip (prefetched, for
        :meth:`read_manifest_head`, if it is the latest)."""
        path, what = self._layout.job_model_version, "read job model version"
        if guess is None:
            found = self._ops.get_watched(path, what, watch)
        else:
            found, manifest = self._ops.get_both(
                path, self._layout.job_model(guess), what=what, watch=watch
            )
            self._prefetched = None if manifest is None else (guess, manifest[0])
        return None if found is None else self._parse_version(found[0])

    def versions(self) -> list[int]:
        """The versions stored under ``jobModels/``, sorted (committed or not)."""
        names = self._ops.children(self._layout.job_models, "list job models") or []
        return sorted(v for v in map(parse_int_name, names) if v is not None)

    def watch_version(self, callback: Callable[[int | None], None]) -> Watch:
        """Call ``callback(latest version or None)`` now and on every change."""
        path = self._layout.job_model_version
        watch = Watch(self._ops.log, "jobModelVersion", path)

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool:
            try:
                version = None if data is None else self._parse_version(data)
            except CorruptDataError:
                self._ops.log.exception("zk.job_model_version_corrupt", path=path)
                return not watch.stopped
            return watch.deliver(callback, version)

        self._ops.call(
            "watch job model version", path, lambda: DataWatch(self._ops.client, path, on_data)
        )
        return watch

    def read_manifest_head(self, version: int) -> ManifestHead:
        """The manifest of committed job model ``version`` decoded only as far as a processor
        decides (:mod:`~metadata.zk.recipe.manifests`); NotFound if it is not committed."""
        path, prefetched, self._prefetched = self._layout.job_model(version), self._prefetched, None
        if prefetched is not None and prefetched[0] == version and prefetched[1]:
            return ManifestHead.from_bytes(prefetched[1], path, version)
        found = self._ops.get(path, f"read job model {version}")
        if found is None:
            raise NotFound(path, f"job model version {version} does not exist")
        if not found[0]:
            raise NotFound(path, f"job model version {version} is not committed")
        return ManifestHead.from_bytes(found[0], path, version)
