"""Job models: versioned, compressed, chunked, published atomically, fenced, with retention.

Publishing version v (a leader write, every step fenced by the leader epoch):

1. early checks, writing nothing: the epoch is still in force, v is above the latest version;
2. ``jobModels/<v>`` is created empty (the folder of the chunks; empty = not committed), and the
   leftovers of an earlier uncommitted attempt of an epoch not newer than ours are removed;
3. the job-model JSON (format 1) is compressed and split into chunks of at most ``chunk_size``
   bytes, each created as ``jobModels/<v>/e<epoch>-<i>`` in its own fenced transaction;
   Then the *container views*: the containers spread over a few small nodes by processor id
   (:func:`~metadata.zk.chunks.view_index`), each a compressed job model holding only its
   containers, about ``VIEW_TARGET_BYTES`` each, so that a processor reads its own tasks without
   fetching and decoding the whole model (at T=10,000 and P=100: one node of a few KB instead of
   the whole model). The views are created in as few fenced transactions as fit;
4. ONE fenced transaction commits it: check the epoch, check every chunk and view, set the
   manifest into ``jobModels/<v>`` (the commit marker), set ``jobModelVersion`` to v (conditional
   on the version read in step 1), create barrier v (state NEW, expecting the participants).

Readers follow ``jobModelVersion`` only and read the manifest before the chunks, so they never see
a half-written model: until step 4 commits, nothing points at the new chunks.
:meth:`JobModelStore.read_container` reads the manifest and one view (or, for a model published
without views, the whole model). After a commit,
versions and barriers older than the newest ``retention`` versions are removed (fenced, best
effort: a failure there is logged and retried after the next publish).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

import orjson
from kazoo.exceptions import NodeExistsError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from metadata.errors import CorruptDataError, JobModelFormatError
from metadata.model import ContainerModel, JobModel
from metadata.serde import (
    JobModelDocument,
    job_model_to_dict,
    load_container,
    load_job_model_document,
)
from metadata.zk.chunks import (
    ChunkRef,
    Manifest,
    chunk_epoch,
    compress_view,
    decompress_view,
    join_blob,
    split_blob,
    view_index,
)
from metadata.zk.errors import FencedOut, NotFound, TransactionRejected, WriteConflict, ZkStoreError
from metadata.zk.layout import BARRIER_PREFIX, JobLayout, parse_int_name
from metadata.zk.ops import Op, ZkOps
from metadata.zk.recipe.barriers import Barriers
from metadata.zk.recipe.epoch import LeaderEpoch, LeaderEpochs
from metadata.zk.watch import Watch

__all__ = ["LOSING_LIMIT", "VIEW_TARGET_BYTES", "JobModelStore", "losing_processors"]

#: A manifest lists at most this many losing processors (else none: everyone reads first).
LOSING_LIMIT = 2000


def losing_processors(previous: JobModel, model: JobModel) -> tuple[str, ...]:
    """The processors of ``previous`` that do not keep every one of their tasks (the same task
    model under the same name) in ``model``, or are not in it; sorted."""
    losing = []
    for pid, before in previous.containers.items():
        after = model.containers.get(pid)
        if after is None or any(
            after.tasks.get(name) != task for name, task in before.tasks.items()
        ):
            losing.append(pid)
    return tuple(sorted(losing))


#: About how many compressed bytes one container view holds (the number of views is the whole
#: model's compressed size over this, at most one per container).
VIEW_TARGET_BYTES = 2 * 1024


class JobModelStore:
    """Publishes and reads the versioned job models of one job."""

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
        compression_level: int = 6,
    ) -> None:
        self._ops = ops
        self._layout = layout
        self._epochs = epochs
        self._barriers = barriers
        self._run_id = run_id
        self._chunk_size = chunk_size
        self._retention = retention
        self._level = compression_level

    # ---------------------------------------------------------------- the version pointer

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

    def latest_version(self) -> int | None:
        """The latest published version, or None if none was published (or there is no job)."""
        found = self._ops.get(self._layout.job_model_version, "read job model version")
        return None if found is None else self._parse_version(found[0])

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

    # ---------------------------------------------------------------- publishing

    def publish(
        self,
        model: JobModel,
        *,
        epoch: LeaderEpoch,
        participants: Collection[str],
        grouper: str = "",
        retention: bool = True,
        previous: JobModel | None = None,
    ) -> None:
        """Publish ``model`` as version ``model.version`` with barrier v expecting ``participants``;
        then, if ``retention``, remove the versions beyond the retention (best effort).

        ``previous``: the model in force, if known; the manifest then lists the processors that
        lose a task against it (``base``, ``losing``), so the others can join the barrier at once.

        Raises :class:`FencedOut` if ``epoch`` is no longer in force (nothing becomes visible),
        :class:`WriteConflict` if the version is not above the latest or another publish won.
        """
        version = model.version
        what = f"publish job model {version}"
        self._epochs.ensure_holds(epoch, what)
        latest, version_stat = self._read_version()
        if latest is not None and version <= latest:
            raise WriteConflict(
                self._layout.job_model_version,
                f"{what}: version {version} is not above the latest published version {latest}",
            )
        document = job_model_to_dict(model, run_id=self._run_id, grouper=grouper)
        raw = orjson.dumps(document)
        manifest, chunks = split_blob(
            raw, version=version, epoch=epoch.epoch, chunk_size=self._chunk_size, level=self._level
        )
        views = self._views(
            model, document, epoch=epoch.epoch, first_index=len(chunks), size=manifest.size
        )
        if views:
            manifest = replace(manifest, views=tuple(ref for ref, _ in views))
        if previous is not None and previous.version < version:
            losing = losing_processors(previous, model)
            if len(losing) <= LOSING_LIMIT:
                manifest = replace(manifest, base=previous.version, losing=losing)
        guard = self._epochs.guard(epoch)
        model_path = self._layout.job_model(version)
        folder = self._prepare_folder(version, epoch, what)
        checks = []
        for name, data in chunks:
            chunk_path = f"{model_path}/{name}"
            checks.append(
                Op("check", chunk_path, version=self._write_chunk(chunk_path, data, epoch, what))
            )
        views_written = self._write_views(
            model_path, [(ref.name, data) for ref, data in views], epoch, what
        )
        checks += [
            Op("check", f"{model_path}/{name}", version=node_version)
            for name, node_version in views_written
        ]
        commit = [
            guard,
            Op("set", model_path, manifest.to_bytes(), version=folder.version),
            Op(
                "set",
                self._layout.job_model_version,
                str(version).encode(),
                version=version_stat.version,
            ),
            *self._barriers.create_ops(version, participants),
            *checks,
        ]
        try:
            self._ops.commit(commit, what)
        except TransactionRejected as exc:
            if self._committed(version, manifest):
                self._ops.log.info("zk.publish_answer_lost_but_committed", version=version)
            elif exc.index == 0:
                raise self._epochs.fenced_out(epoch, what) from None
            else:
                raise WriteConflict(exc.path, f"{what}: {exc.problem}") from exc
        self._ops.log.info(
            "zk.job_model_published",
            version=version,
            epoch=epoch.epoch,
            processors=len(model.containers),
            tasks=sum(len(c.tasks) for c in model.containers.values()),
            json_bytes=len(raw),
            stored_bytes=manifest.size,
            chunks=len(chunks),
            views=len(views),
        )
        if retention:
            self.remove_old_versions_best_effort(version, epoch)

    def _fenced(self, ops: list[Op], epoch: LeaderEpoch, what: str) -> None:
        try:
            self._ops.commit([self._epochs.guard(epoch), *ops], what)
        except TransactionRejected as exc:
            if exc.index == 0:
                raise self._epochs.fenced_out(epoch, what) from None
            raise

    def _prepare_folder(self, version: int, epoch: LeaderEpoch, what: str) -> ZnodeStat:
        """Create ``jobModels/<v>`` (empty = uncommitted) or clean an abandoned attempt in it."""
        path = self._layout.job_model(version)
        found = self._ops.get(path, what)
        if found is None:
            try:
                self._fenced([Op("create", path, b"")], epoch, what)
            except TransactionRejected as exc:
                if not isinstance(exc.error, NodeExistsError):
                    raise  # created meanwhile (by us, answer lost, or another leader) is fine
            found = self._ops.get(path, what)
            if found is None:
                raise WriteConflict(path, f"{what}: the version folder vanished while writing")
        data, stat = found
        if data:
            raise WriteConflict(path, f"{what}: version {version} is already committed")
        stale = []
        for name in self._ops.children(path, what) or []:
            owner = chunk_epoch(name)
            if owner is not None and owner <= epoch.epoch:
                stale.append(Op("delete", f"{path}/{name}"))
        if stale:
            self._ops.log.info("zk.abandoned_chunks_removed", version=version, chunks=len(stale))
            try:
                self._ops.commit_batched(stale, what, guards=[self._epochs.guard(epoch)])
            except TransactionRejected as exc:
                if exc.index == 0:
                    raise self._epochs.fenced_out(epoch, what) from None
                raise
        return stat

    def _views(
        self, model: JobModel, document: dict[str, Any], *, epoch: int, first_index: int, size: int
    ) -> list[tuple[ChunkRef, bytes]]:
        """The container views of ``model`` (none if it has no containers, or if a view would
        not fit in one chunk: readers then read the whole model). ``document`` is the model's
        format-1 dict, whose container entries the views share."""
        if not model.containers:
            return []
        # Views are compressed faster (level 1, larger) and spread by a hash (uneven): aim well
        # below the chunk size.
        target = min(VIEW_TARGET_BYTES, max(1, self._chunk_size // 4))
        count = min(len(model.containers), max(1, math.ceil(size / target)))
        groups: dict[int, dict[str, Any]] = defaultdict(dict)
        containers = document["containers"]
        for pid in model.containers:
            groups[view_index(pid, count)][pid] = containers[pid]
        views = []
        for index in range(count):
            part = {
                "format": document["format"],
                "version": model.version,
                "run_id": self._run_id,
                "containers": dict(sorted(groups.get(index, {}).items())),
            }
            ref, data = compress_view(
                orjson.dumps(part), epoch=epoch, index=first_index + index, level=1
            )
            if len(data) > self._chunk_size:
                self._ops.log.warning(
                    "zk.views_skipped", version=model.version, view_bytes=len(data)
                )
                return []
            views.append((ref, data))
        return views

    def _write_views(
        self, folder: str, chunks: list[tuple[str, bytes]], epoch: LeaderEpoch, what: str
    ) -> list[tuple[str, int]]:
        """Create the (small) view nodes under ``folder`` in as few fenced transactions as fit;
        returns each one's name and znode version. A node left by our own earlier attempt (its
        answer lost) is overwritten one by one."""
        if not chunks:
            return []
        ops = [Op("create", f"{folder}/{name}", data) for name, data in chunks]
        try:
            self._ops.commit_batched(ops, what, guards=[self._epochs.guard(epoch)])
            return [(name, 0) for name, _ in chunks]
        except TransactionRejected as exc:
            if exc.index == 0:
                raise self._epochs.fenced_out(epoch, what) from None
            if not isinstance(exc.error, NodeExistsError):
                raise
        return [
            (name, self._write_chunk(f"{folder}/{name}", data, epoch, what))
            for name, data in chunks
        ]

    def _write_chunk(self, path: str, data: bytes, epoch: LeaderEpoch, what: str) -> int:
        """Create one chunk (fenced); returns its znode version."""
        try:
            self._fenced([Op("create", path, data)], epoch, what)
            return 0
        except TransactionRejected as exc:
            if not isinstance(exc.error, NodeExistsError):
                raise
        # Our own earlier attempt created it (its answer was lost): overwrite it.
        found = self._ops.get(path, what)
        if found is None:
            raise WriteConflict(path, f"{what}: a chunk vanished while writing it")
        self._fenced([Op("set", path, data, version=found[1].version)], epoch, what)
        return int(found[1].version) + 1

    def _committed(self, version: int, manifest: Manifest) -> bool:
        found = self._ops.get(self._layout.job_model(version), "verify publish")
        return found is not None and found[0] == manifest.to_bytes()

    # ---------------------------------------------------------------- reading

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
        raw = join_blob(manifest, data, path=path)
        try:
            document = load_job_model_document(raw)
        except JobModelFormatError as exc:
            raise CorruptDataError(path, f"job model: {exc}") from None
        if document.model.version != version:
            raise CorruptDataError(path, f"holds job model version {document.model.version}")
        return document

    def read_manifest(self, version: int) -> Manifest:
        """The manifest of committed job model ``version`` (NotFound if not committed)."""
        path = self._layout.job_model(version)
        found = self._ops.get(path, f"read job model {version}")
        if found is None:
            raise NotFound(path, f"job model version {version} does not exist")
        if not found[0]:
            raise NotFound(path, f"job model version {version} is not committed")
        manifest = Manifest.from_bytes(found[0], path)
        if manifest.version != version:
            raise CorruptDataError(path, f"manifest describes version {manifest.version}")
        return manifest

    def read_container(
        self, version: int, processor_id: str, *, manifest: Manifest | None = None
    ) -> ContainerModel | None:
        """``processor_id``'s container in job model ``version`` (None: the model has none), read
        from its container view: the manifest (unless given) and one small node. A model
        published without views is read whole. NotFound if the version is not committed;
        CorruptDataError if the view does not match the manifest."""
        path = self._layout.job_model(version)
        if manifest is None:
            manifest = self.read_manifest(version)
        elif manifest.version != version:
            raise ValueError(f"the manifest given is of version {manifest.version}, not {version}")
        if not manifest.views:
            return self.read_document(version).model.containers.get(processor_id)
        ref = manifest.views[view_index(processor_id, len(manifest.views))]
        view_path = f"{path}/{ref.name}"
        view = self._ops.get(view_path, f"read container view of job model {version}")
        raw = decompress_view(ref, None if view is None else view[0], path=view_path)
        try:
            held, container = load_container(raw, processor_id)
        except JobModelFormatError as exc:
            raise CorruptDataError(view_path, f"container view: {exc}") from None
        if held != version:
            raise CorruptDataError(view_path, f"holds job model version {held}")
        return container

    # ---------------------------------------------------------------- retention

    def remove_old_versions_best_effort(self, version: int, epoch: LeaderEpoch) -> None:
        """Retention after ``version``; a failure is logged (and retried after the next one)."""
        try:
            self.remove_old_versions(epoch=epoch, latest=version)
        except FencedOut as exc:
            self._ops.log.warning(
                "zk.retention_skipped_fenced_out", version=version, error=str(exc)
            )
        except (WriteConflict, NotFound, ZkStoreError) as exc:
            self._ops.log.warning("zk.retention_failed", version=version, error=str(exc))

    def remove_old_versions(self, *, epoch: LeaderEpoch, latest: int) -> int:
        """Remove job models and barriers older than the newest ``retention`` versions (fenced);
        returns the number of nodes deleted."""
        keep_from = latest - self._retention + 1
        ops: list[Op] = []
        removed: list[int] = []
        for name in self._ops.children(self._layout.job_models, "list job models") or []:
            old = parse_int_name(name)
            if old is None or old >= keep_from:
                continue
            removed.append(old)
            path = self._layout.job_model(old)
            ops += [
                Op("delete", f"{path}/{c}") for c in self._ops.children(path, "list chunks") or []
            ]
            ops.append(Op("delete", path))
        for name in self._ops.children(self._layout.barriers, "list barriers") or []:
            old = (
                parse_int_name(name.removeprefix(BARRIER_PREFIX))
                if name.startswith(BARRIER_PREFIX)
                else None
            )
            if old is None or old >= keep_from:
                continue
            ops += self._barriers.delete_ops(old)
        if not ops:
            return 0
        try:
            deleted = self._ops.commit_batched(
                ops, "remove old job models", guards=[self._epochs.guard(epoch)]
            )
        except TransactionRejected as exc:
            if exc.index == 0:
                raise self._epochs.fenced_out(epoch, "remove old job models") from None
            raise
        self._ops.log.info(
            "zk.retention", removed_versions=sorted(removed), nodes=deleted, kept_from=keep_from
        )
        return deleted
