"""Job models: versioned, compressed, chunked, published atomically, fenced, with retention.

Publishing version v (a leader write, every step fenced by the leader epoch):

1. early checks, writing nothing: the epoch is still in force, v is above the latest version;
2. ``jobModels/<v>`` is created empty (the folder of the chunks; empty = not committed), and the
   leftovers of an earlier uncommitted attempt of an epoch not newer than ours are removed;
3. the job-model JSON (format 2: columns, :mod:`metadata.columns`; readers accept format 1
   too) is compressed and split into chunks of at most ``chunk_size``
   bytes, each created as ``jobModels/<v>/e<epoch>-<i>`` in its own fenced transaction; then the
   *container views* (:func:`~metadata.zk.viewcodec.container_views`: a processor reads its
   own tasks from one node of a few KB, or the few chunks of its own container when that is
   bigger than a node, instead of the whole model), in as few fenced transactions as fit;
4. ONE fenced transaction commits it: check the epoch, check every chunk and view, set the
   manifest into ``jobModels/<v>`` (the commit marker), set ``jobModelVersion`` to v (conditional
   on the version read in step 1), create barrier v (state NEW, expecting the participants).

Readers follow ``jobModelVersion`` only and read the manifest before the chunks, so they never see
a half-written model: until step 4 commits, nothing points at the new chunks.
:meth:`JobModelStore.read_container` reads the manifest and one view, one node or a few chunks
(or, for a model published without views, the whole model). After a commit, versions and barriers
older than the newest ``retention`` versions are removed (fenced, best effort: a failure there is
logged and retried after the next publish); :meth:`JobModelStore.remove_below` is that deletion
as a primitive. The chunks and views are written by :class:`~metadata.zk.fenced.PartWriter`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import orjson
from kazoo.protocol.states import ZnodeStat

from metadata.columns import ModelColumns
from metadata.errors import CorruptDataError
from metadata.model import ContainerModel, JobModel
from metadata.serde import JobModelDocument
from metadata.zk.chunks import ChunkRef, Manifest, decode_document, split_blob
from metadata.zk.errors import FencedOut, NotFound, TransactionRejected, WriteConflict, ZkStoreError
from metadata.zk.fenced import Fence, PartWriter
from metadata.zk.layout import JobLayout
from metadata.zk.ops import Op, ZkOps
from metadata.zk.recipe.barriers import Barriers
from metadata.zk.recipe.epoch import LeaderEpoch, LeaderEpochs
from metadata.zk.recipe.pointer import VersionPointer
from metadata.zk.recipe.views import read_container
from metadata.zk.viewcodec import container_views, with_views

__all__ = ["LOSING_LIMIT", "JobModelStore"]

#: A manifest lists at most this many losing processors (else none: everyone reads first).
LOSING_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class _Encoded:
    """A job model ready to store: its JSON, manifest, chunks and container views' chunks."""

    raw: bytes
    manifest: Manifest
    chunks: list[tuple[str, bytes]]
    views: list[tuple[ChunkRef, bytes]]


class JobModelStore(VersionPointer):
    """Publishes, reads and removes the versioned job models of one job.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        epoch = store.epochs.acquire()
        store.job_models.publish(model, epoch=epoch, participants=model.containers)
        latest = store.job_models.read_latest()              # the model just published
        mine = store.job_models.read_container(model.version, "p-1")
        store.job_models.remove_below(model.version - 9, epoch=epoch)

    """

    def __init__(
        self,
        ops: ZkOps,
        layout: JobLayout,
        epochs: LeaderEpochs,
        barriers: Barriers,
        *,
        run_id: str,
        chunk_size: int,
        retention: int,
        compression_level: int = 1,
    ) -> None:
        self._ops = ops
        self._layout = layout
        self._epochs = epochs
        self._barriers = barriers
        self._run_id = run_id
        self._chunk_size = chunk_size
        self._retention = retention
        self._level = compression_level

    # ---------------------------------------------------------------- publishing

    def publish(
        self,
        model: JobModel,
        *,
        epoch: LeaderEpoch,
        participants: Collection[str],
        grouper: str = "",
        retention: bool = True,
        base: int | None = None,
        losing: Collection[str] = (),
        gaining: Collection[str] | None = None,
        over_corrupt_pointer: bool = False,
    ) -> None:
        """Publish ``model`` as version ``model.version`` with barrier v expecting ``participants``;
        then, if ``retention``, remove the versions beyond the retention (best effort).

        ``retention``: the coordinator passes False and calls :meth:`remove_old_versions` once
        the barrier is decided, so the deletes do not compete with the processors reading the new
        version. ``base`` and ``losing``: the version the model was planned against and the
        processors that lose a task against it, as the leader decided them; the manifest records
        them so that the others can join the barrier at once (a list longer than
        :data:`LOSING_LIMIT` is not stored: then everyone reads first). ``gaining``: the processors
        given a task against ``base`` (None: not said); the others read no container.
        ``over_corrupt_pointer``: a version pointer that does not parse is overwritten (the new
        version must then be above every version stored), instead of raising
        :class:`~metadata.errors.CorruptDataError`: a leader replacing a model it could not read.

        Raises :class:`FencedOut` if ``epoch`` is no longer in force (nothing becomes visible),
        :class:`WriteConflict` if the version is not above the latest or another publish won.
        """
        version = model.version
        what = f"publish job model {version}"
        version_stat = self._check_publishable(version, epoch, what, over_corrupt_pointer)
        encoded = self._encode(
            model, grouper=grouper, epoch=epoch.epoch, base=base, losing=losing, gaining=gaining
        )
        fence = self._epochs.fence(epoch)
        model_path = self._layout.job_model(version)
        views = [(ref.name, data) for ref, data in encoded.views]
        folder, checks = PartWriter(fence, what).write(version, model_path, encoded.chunks, views)
        pointer = str(version).encode()
        commit = [
            Op("set", model_path, encoded.manifest.to_bytes(), version=folder.version),
            Op("set", self._layout.job_model_version, pointer, version=version_stat.version),
            *self._barriers.create_ops(version, participants),
            *checks,
        ]
        self._commit(version, encoded.manifest, fence, commit, what)
        self._ops.log.info(
            "zk.job_model_published",
            version=version,
            epoch=epoch.epoch,
            processors=len(model.containers),
            tasks=sum(len(c.tasks) for c in model.containers.values()),
            json_bytes=len(encoded.raw),
            stored_bytes=encoded.manifest.size,
            chunks=len(encoded.chunks),
            views=len(encoded.views),
        )
        if retention:
            self._remove_old_versions_best_effort(version, epoch)

    def _check_publishable(
        self, version: int, epoch: LeaderEpoch, what: str, over_corrupt_pointer: bool = False
    ) -> ZnodeStat:
        """Step 1, writing nothing: ``epoch`` is in force and ``version`` above the latest (the
        highest version stored, when a corrupt pointer is to be overwritten); returns the stat
        of ``jobModelVersion`` (the commit sets it conditionally)."""
        self._epochs.ensure_holds(epoch, what)
        try:
            latest, version_stat = self._read_version()
        except CorruptDataError:
            if not over_corrupt_pointer:
                raise
            version_stat = self._pointer_stat()
            stored = [*self.versions(), *self._barriers.versions()]
            latest = max(stored) if stored else None
        if latest is not None and version <= latest:
            raise WriteConflict(
                self._layout.job_model_version,
                f"{what}: version {version} is not above the latest published version {latest}",
            )
        return version_stat

    def _encode(
        self,
        model: JobModel,
        *,
        grouper: str,
        epoch: int,
        base: int | None,
        losing: Collection[str],
        gaining: Collection[str] | None = None,
    ) -> _Encoded:
        """The job-model JSON (format 2, :mod:`metadata.columns`), compressed into chunks, its
        container views and its manifest (with ``base``, ``losing`` and ``gaining`` when given)."""
        columns = ModelColumns(model, run_id=self._run_id, grouper=grouper)
        raw = orjson.dumps(columns.document())
        manifest, chunks = split_blob(
            raw, version=model.version, epoch=epoch, chunk_size=self._chunk_size, level=self._level
        )
        views = container_views(
            columns,
            epoch=epoch,
            first_index=len(chunks),
            size=manifest.size,
            chunk_size=self._chunk_size,
        )
        manifest = with_views(manifest, views)
        if base is not None and base < model.version and len(losing) <= LOSING_LIMIT:
            said = gaining is not None and len(gaining) <= LOSING_LIMIT
            manifest = replace(
                manifest,
                base=base,
                losing=tuple(sorted(losing)),
                gaining=tuple(sorted(gaining)) if said and gaining is not None else None,
            )
        return _Encoded(raw, manifest, chunks, [part for view in views for part in view])

    def _commit(
        self, version: int, manifest: Manifest, fence: Fence, ops: Sequence[Op], what: str
    ) -> None:
        """Step 4: the one fenced transaction that makes version ``version`` visible. A refusal
        after our own commit went through (its answer lost) is success."""
        try:
            self._ops.commit([fence.guard, *ops], what)
        except TransactionRejected as exc:
            if self._committed(version, manifest):
                self._ops.log.info("zk.publish_answer_lost_but_committed", version=version)
            elif exc.index == 0:
                raise fence.refused(what) from None
            else:
                raise WriteConflict(exc.path, f"{what}: {exc.problem}") from exc

    def _committed(self, version: int, manifest: Manifest) -> bool:
        found = self._ops.get(self._layout.job_model(version), "verify publish")
        return found is not None and found[0] == manifest.to_bytes()

    # ---------------------------------------------------------------- reading

    def read(self, version: int) -> JobModel:
        """Job model ``version`` (NotFound if it is not committed)."""
        return self.read_document(version).model

    def read_latest(self) -> JobModel | None:
        """The latest committed job model, or None if none was published yet."""
        document = self.read_latest_document()
        return None if document is None else document.model

    def read_latest_document(self) -> JobModelDocument | None:
        """The latest committed job model with its run id and grouper, or None if none was
        published yet. A version removed by retention while reading it (a newer one was
        published meanwhile) is followed to the newer one, a few times at most."""
        for _ in range(3):
            version = self.latest_version()
            if version is None:
                return None
            try:
                return self.read_document(version)
            except NotFound:
                if self.latest_version() == version:
                    raise
                # a newer version was published and retention removed this one meanwhile
        raise WriteConflict(self._layout.job_model_version, "the latest version kept moving")

    def read_document(self, version: int) -> JobModelDocument:
        """Job model ``version`` with its run id and grouper; NotFound if it is not committed."""
        path = self._layout.job_model(version)
        manifest = self.read_manifest(version)
        paths = {ref.name: f"{path}/{ref.name}" for ref in manifest.chunks}
        chunks = self._ops.get_many(paths.values(), f"read job model {version}", path, large=True)
        data: dict[str, bytes | None] = {}
        for name, chunk_path in paths.items():
            entry = chunks.get(chunk_path)
            data[name] = None if entry is None else entry[0]
        return decode_document(manifest, data, path=path)

    def read_manifest(self, version: int) -> Manifest:
        """The manifest of committed job model ``version`` (NotFound if not committed)."""
        return self.read_manifest_head(version).manifest()

    def read_container(
        self, version: int, processor_id: str, *, manifest: Manifest | None = None
    ) -> ContainerModel | None:
        """``processor_id``'s container in job model ``version`` (None: the model has none), read
        from its container view: the manifest (unless given) and one small node (or the chunks
        of a view bigger than a node). A model
        published without views, or whose view is missing or corrupt (logged with its node:
        :mod:`~metadata.zk.recipe.views`), is read whole. NotFound if the version is not
        committed; CorruptDataError if the whole model is unreadable too."""
        if manifest is None:
            manifest = self.read_manifest(version)
        elif manifest.version != version:
            raise ValueError(f"the manifest given is of version {manifest.version}, not {version}")
        path = self._layout.job_model(version)
        return read_container(
            self._ops, path, manifest, processor_id, lambda: self.read_document(version).model
        )

    # ---------------------------------------------------------------- retention

    def remove_below(self, version: int, *, epoch: LeaderEpoch) -> int:
        """Delete the job models (with their chunks and views) and the barriers of every version
        below ``version``, fenced by ``epoch``; returns the number of nodes deleted.

        The deletes go in as few transactions as fit, each fenced: :class:`FencedOut` once
        ``epoch`` moved on (the batches before it stay applied)."""
        ops: list[Op] = []
        removed = [old for old in self.versions() if old < version]
        for old in removed:
            path = self._layout.job_model(old)
            ops += [
                Op("delete", f"{path}/{c}") for c in self._ops.children(path, "list chunks") or []
            ]
            ops.append(Op("delete", path))
        for old in self._barriers.versions():
            if old < version:
                ops += self._barriers.delete_ops(old)
        if not ops:
            return 0
        deleted = self._epochs.fence(epoch).commit_batched(ops, "remove old job models")
        self._ops.log.info(
            "zk.retention", removed_versions=removed, nodes=deleted, kept_from=version
        )
        return deleted

    def remove_old_versions(self, *, epoch: LeaderEpoch, latest: int | None = None) -> int:
        """Apply retention now (publish does it too): :meth:`remove_below` the oldest of the
        newest ``retention`` versions up to ``latest`` (default: the latest published);
        returns the nodes deleted."""
        if latest is None:
            latest = self.latest_version()
            if latest is None:
                return 0
        return self.remove_below(latest - self._retention + 1, epoch=epoch)

    def _remove_old_versions_best_effort(self, version: int, epoch: LeaderEpoch) -> None:
        """Retention after ``version``; a failure is logged (and retried after the next one)."""
        try:
            self.remove_old_versions(epoch=epoch, latest=version)
        except FencedOut as exc:
            self._ops.log.warning(
                "zk.retention_skipped_fenced_out", version=version, error=str(exc)
            )
        except ZkStoreError as exc:  # WriteConflict, NotFound, StoreUnavailable, ...
            self._ops.log.warning("zk.retention_failed", version=version, error=str(exc))
