"""The MetadataStore on ZooKeeper (kazoo): processors, task locality, job models, barriers, fencing.

:func:`connect` builds and starts a :class:`KazooClient` from plain arguments (hosts, session
timeout, digest credentials, TLS files). :class:`ZkMetadataStore` is one job's view of the
ZooKeeper layout of DESIGN.md; it is a thin facade over small recipes, one job each:

==========================  ===============================================================
``ProcessorRegistry``       ``processors/``: register, read, watch live processors
``TaskLocalityStore``       ``localityData/``: read, differential write, per-run reset (I7)
``JobModelStore``           ``jobModels/``, ``jobModelVersion``: chunked atomic publish, read,
                            retention
``Barriers``                ``barriers/``: join, watch, decide (DONE / TIMED_OUT)
``LeaderEpochs``            ``leader/epoch``: acquire, and fence every leader write
``CheckpointStore``         ``checkpoints/``: input offsets per stream partition and key bucket
                            (SEP-32: a split inherits, a merge takes the minimum), compare-and-set
``ZkOps``                   retries, error mapping, size checks, the operation counter
==========================  ===============================================================

Every error is a :class:`~metadata.errors.MetadataError` (see :mod:`metadata.zk.errors` and
``docs/zookeeper.md``); bad data read from ZooKeeper is a
:class:`~metadata.errors.CorruptDataError` naming the path, and a reader never writes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import structlog
from kazoo.client import KazooClient

from metadata.checkpoints import PartitionCheckpoint
from metadata.model import ContainerModel, JobModel, SystemStreamPartition
from metadata.serde import JobModelDocument
from metadata.zk.chunks import Manifest
from metadata.zk.client import ancestor_acl, job_acl
from metadata.zk.errors import NotFound, WriteConflict
from metadata.zk.layout import JobLayout
from metadata.zk.ops import SAFE_REQUEST_BYTES, ZkOps
from metadata.zk.recipe.barriers import Barriers
from metadata.zk.recipe.checkpoints import CheckpointStore
from metadata.zk.recipe.epoch import LeaderEpoch, LeaderEpochs
from metadata.zk.recipe.jobmodels import JobModelStore
from metadata.zk.recipe.locality import TaskLocalityStore
from metadata.zk.recipe.processors import ProcessorRegistration, ProcessorRegistry
from metadata.zk.watch import Watch

__all__ = ["DEFAULT_CHUNK_SIZE", "MAX_CHUNK_SIZE", "ZkMetadataStore"]

#: Default chunk size of a stored job model: well below ZooKeeper's 1 MB request limit.
DEFAULT_CHUNK_SIZE = 900_000
#: The largest chunk size the store accepts (a chunk plus its request overhead must fit).
MAX_CHUNK_SIZE = SAFE_REQUEST_BYTES - 4_096


class ZkMetadataStore:
    """One job's metadata in ZooKeeper (layout: DESIGN.md "ZooKeeper layout", docs/zookeeper.md).

    ``client`` is a started KazooClient (see :func:`connect`); ``job_folder`` the job's folder
    (``JobConfig.job_folder``); ``run_id`` the run whose task locality this store reads and
    writes (I7); ``auth`` the "user:password" whose digest ACL every created node gets (empty: an
    open ACL); ``retention`` how many job-model versions (and barriers) are kept; ``chunk_size``
    the largest stored chunk of a job model. ``retry_deadline_s``/``op_timeout_s`` bound the
    retries of transient failures.

    Processors:
        ``register_processor(pid, location, host="", **extra) -> node``,
        ``unregister_processor(node)``, ``read_processors() -> (live, duplicates)``,
        ``read_processor_locality() -> {pid: location}``, ``watch_processors(cb(children))``.
    Task locality (of ``run_id``):
        ``read_task_locality() -> {task: location}``, ``write_task_locality(mapping) -> ops``
        (differential, partial update), ``reset_task_locality()``.
    Leadership:
        ``acquire_epoch() -> LeaderEpoch``, ``current_epoch()``, ``holds_epoch(epoch)``,
        ``election_path`` (for kazoo's Election recipe).
    Job models:
        ``publish_job_model(model, epoch=, participants=, grouper="")`` (fenced, atomic, creates
        barrier v), ``read_job_model(v)``, ``read_job_model_document(v)``,
        ``read_latest_version()``, ``read_latest_job_model()``, ``watch_version(cb(v))``,
        ``remove_old_versions(epoch=)``.
    Barriers:
        ``join_barrier(v, pid)``, ``barrier_state(v)``, ``barrier_participants(v)``,
        ``barrier_expected(v)``, ``watch_barrier(v, cb(state, participants))``,
        ``set_barrier_state(v, state, epoch=)`` (fenced).
    Checkpoints (offsets are the next offset to read; ``factor`` is the elasticity factor of
    the reading task, 1 with ``key_bucket=-1`` for a whole partition; see docs/zookeeper.md):
        ``read_checkpoint(ssp, factor) -> offset | None``, ``write_checkpoint(ssp, factor,
        offset) -> PartitionCheckpoint``, ``write_checkpoints({ssp: offset}, factor)``,
        ``read_partition_checkpoint(system, stream, partition) -> PartitionCheckpoint | None``,
        ``read_checkpoints() -> {whole ssp: PartitionCheckpoint}``.
    Counters:
        ``ops`` (write operations: creates, sets, deletes, inside transactions too), ``reads``,
        ``transactions``.

    ``watch_*`` return a :class:`Watch` whose ``stop()`` ends the callbacks; callbacks run on
    kazoo's event thread and must not block for long.
    """

    def __init__(
        self,
        client: KazooClient,
        job_folder: str,
        *,
        run_id: str,
        auth: str = "",
        retention: int = 10,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        retry_deadline_s: float = 30.0,
        op_timeout_s: float = 15.0,
        compression_level: int = 6,
    ) -> None:
        if retention < 1:
            raise ValueError(f"retention must be >= 1, got {retention}")
        if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise ValueError(f"chunk_size must be in 1..{MAX_CHUNK_SIZE}, got {chunk_size}")
        if not run_id:
            raise ValueError("run_id must not be empty")
        self.layout = JobLayout(job_folder)
        self.run_id = run_id
        self.client = client
        self._auth = auth
        self.log = structlog.get_logger("metadata.zk").bind(job_folder=job_folder, run_id=run_id)
        if auth and ("digest", auth) not in client.auth_data:
            if client.connected:
                client.add_auth("digest", auth)
            else:
                client.auth_data.add(("digest", auth))
        self._ops = ZkOps(
            client,
            acl=job_acl(auth),
            log=self.log,
            retry_deadline_s=retry_deadline_s,
            op_timeout_s=op_timeout_s,
        )
        self._epochs = LeaderEpochs(self._ops, self.layout)
        self._processors = ProcessorRegistry(self._ops, self.layout)
        self._locality = TaskLocalityStore(self._ops, self.layout, run_id)
        self._barriers = Barriers(self._ops, self.layout, self._epochs)
        self._checkpoints = CheckpointStore(self._ops, self.layout)
        self._job_models = JobModelStore(
            self._ops,
            self.layout,
            self._epochs,
            self._barriers,
            run_id=run_id,
            chunk_size=chunk_size,
            retention=retention,
            compression_level=compression_level,
        )

    # ---------------------------------------------------------------- set-up

    @property
    def job_folder(self) -> str:
        return self.layout.folder

    @property
    def election_path(self) -> str:
        """Where coordinator replicas run kazoo's Election recipe (``leader/election``)."""
        return self.layout.election

    @property
    def ops(self) -> int:
        """ZooKeeper write operations applied by this store (creates, sets, deletes; inside
        transactions too; checks are not writes)."""
        return self._ops.writes

    @property
    def reads(self) -> int:
        return self._ops.reads

    @property
    def transactions(self) -> int:
        return self._ops.transactions

    def close(self) -> None:
        """Detach from the client (the client itself stays open: it belongs to the caller)."""
        self._ops.close()

    def job_exists(self) -> bool:
        """True if the job folder exists (readers use this to tell 'no such job')."""
        return self._ops.exists(self.layout.folder, "check job folder") is not None

    def ensure_layout(self) -> None:
        """Create the job folder and its persistent nodes if missing (idempotent)."""
        parts = self.layout.folder.strip("/").split("/")
        for depth in range(1, len(parts)):
            path = "/" + "/".join(parts[:depth])
            if self._ops.exists(path, "ensure layout") is None:
                self._ops.ensure(path, what="ensure layout", acl=ancestor_acl(self._auth))
        nodes: list[tuple[str, bytes]] = [(p, b"") for p in self.layout.containers()]
        nodes += [
            (self.layout.job_model_version, b""),
            (self.layout.epoch, b"0"),
            (self.layout.locality, self._locality.marker_data()),
        ]
        for path, data in nodes:
            if self._ops.exists(path, "ensure layout") is None:
                self._ops.ensure(path, data, what="ensure layout")

    # ---------------------------------------------------------------- processors

    def register_processor(
        self, processor_id: str, location_id: str, host: str = "", **extra: Any
    ) -> str:
        """Register a live processor (ephemeral sequential node); returns the node path."""
        return self._processors.register(processor_id, location_id, host, **extra)

    def unregister_processor(self, node: str) -> None:
        self._processors.unregister(node)

    def read_processors(self) -> tuple[list[ProcessorRegistration], list[ProcessorRegistration]]:
        """(live registrations, one per processor id, sorted by sequence; losing duplicates)."""
        return self._processors.read()

    def read_processor_locality(self) -> dict[str, str]:
        """Live processor id -> location id."""
        return self._processors.locality()

    def watch_processors(self, callback: Callable[[list[str]], None]) -> Watch:
        """``callback(sorted child names of processors/)`` now and on every change."""
        return self._processors.watch(callback)

    # ---------------------------------------------------------------- task locality

    def read_task_locality(self) -> dict[str, str]:
        """Task name -> location id of this run (empty for a new run)."""
        return self._locality.read()

    def write_task_locality(self, locality: Mapping[str, str]) -> int:
        """Write the entries that differ from what is stored; returns the write operations."""
        return self._locality.write(locality)

    def reset_task_locality(self) -> int:
        """Delete every locality entry and mark the folder with this run id."""
        return self._locality.reset()

    # ---------------------------------------------------------------- leadership

    def acquire_epoch(self) -> LeaderEpoch:
        """Bump the leader epoch: from now on only the returned epoch's writes succeed."""
        return self._epochs.acquire()

    def current_epoch(self) -> LeaderEpoch | None:
        return self._epochs.current()

    def holds_epoch(self, epoch: LeaderEpoch) -> bool:
        return self._epochs.holds(epoch)

    # ---------------------------------------------------------------- job models

    def publish_job_model(
        self,
        model: JobModel,
        *,
        epoch: LeaderEpoch,
        participants: Collection[str],
        grouper: str = "",
        retention: bool = True,
        previous: JobModel | None = None,
    ) -> None:
        """Publish ``model`` (version ``model.version``) and barrier v, atomically and fenced.

        ``retention``: remove versions beyond the retention right after (best effort). The
        coordinator passes False and calls :meth:`remove_old_versions` once the barrier is
        decided, so the deletes do not compete with the processors reading the new version.
        ``previous`` (the model in force) lets the manifest name the processors that lose a
        task, so the others join the barrier without waiting to read their tasks.
        """
        self._job_models.publish(
            model,
            epoch=epoch,
            participants=participants,
            grouper=grouper,
            retention=retention,
            previous=previous,
        )

    def read_job_model_document(self, version: int) -> JobModelDocument:
        return self._job_models.read_document(version)

    def read_job_model(self, version: int) -> JobModel:
        return self._job_models.read_document(version).model

    def read_latest_version(self) -> int | None:
        return self._job_models.latest_version()

    def read_manifest(self, version: int) -> Manifest:
        """The manifest of job model ``version``: its chunks, container views, and which
        processors lose a task against the model in force (``Manifest.keeps_everything``)."""
        return self._job_models.read_manifest(version)

    def read_container(
        self, version: int, processor_id: str, *, manifest: Manifest | None = None
    ) -> ContainerModel | None:
        """One processor's container of job model ``version`` (None: not in it), read from its
        container view (a few KB) rather than the whole model; ``manifest`` saves a read."""
        return self._job_models.read_container(version, processor_id, manifest=manifest)

    def read_latest_job_model_document(self) -> JobModelDocument | None:
        """The latest committed job model, or None if none was published yet."""
        for _ in range(3):
            version = self.read_latest_version()
            if version is None:
                return None
            try:
                return self._job_models.read_document(version)
            except NotFound:
                if self.read_latest_version() == version:
                    raise
                # a newer version was published and retention removed this one meanwhile
        raise WriteConflict(self.layout.job_model_version, "the latest version kept moving")

    def read_latest_job_model(self) -> JobModel | None:
        document = self.read_latest_job_model_document()
        return None if document is None else document.model

    def watch_version(self, callback: Callable[[int | None], None]) -> Watch:
        return self._job_models.watch_version(callback)

    def remove_old_versions(self, *, epoch: LeaderEpoch) -> int:
        """Apply retention now (publish does it too); returns the nodes deleted."""
        latest = self.read_latest_version()
        if latest is None:
            return 0
        return self._job_models.remove_old_versions(epoch=epoch, latest=latest)

    # ---------------------------------------------------------------- barriers

    def join_barrier(self, version: int, processor_id: str) -> None:
        self._barriers.join(version, processor_id)

    def barrier_state(self, version: int) -> str | None:
        """NEW, DONE or TIMED_OUT; None if barrier ``version`` does not exist."""
        return self._barriers.state(version)

    def barrier_participants(self, version: int) -> set[str]:
        return self._barriers.participants(version)

    def barrier_expected(self, version: int) -> set[str]:
        return self._barriers.expected(version)

    def watch_barrier(
        self, version: int, callback: Callable[[str | None, set[str]], None]
    ) -> Watch:
        return self._barriers.watch(version, callback)

    def watch_barrier_state(self, version: int, callback: Callable[[str | None], None]) -> Watch:
        """Like :meth:`watch_barrier` for the state alone (what a processor waits for): no
        participant list is read, so P processors cost P reads per decision, not P x P."""
        return self._barriers.watch_state(version, callback)

    def set_barrier_state(self, version: int, state: str, *, epoch: LeaderEpoch) -> None:
        self._barriers.set_state(version, state, epoch=epoch)

    # ---------------------------------------------------------------- checkpoints

    def read_checkpoint(self, ssp: SystemStreamPartition, factor: int) -> int | None:
        """Where a task reading ``ssp`` (key bucket ``ssp.key_bucket`` of ``factor``; -1 with
        factor 1 for the whole partition) resumes: the next offset to read, None if there is no
        checkpoint for it. A split inherits the parent's offset, a merge takes the minimum."""
        return self._checkpoints.read(ssp, factor)

    def write_checkpoint(
        self, ssp: SystemStreamPartition, factor: int, offset: int
    ) -> PartitionCheckpoint:
        """Record that every message of ``ssp`` (its key bucket of ``factor``) below ``offset``
        was processed (compare-and-set); returns the partition's checkpoint as now stored."""
        return self._checkpoints.write(ssp, factor, offset)

    def write_checkpoints(
        self, offsets: Mapping[SystemStreamPartition, int], factor: int
    ) -> dict[SystemStreamPartition, PartitionCheckpoint]:
        """:meth:`write_checkpoint` for several inputs of one factor (e.g. a task's), sent
        together; returns the stored checkpoints by whole stream partition."""
        return self._checkpoints.write_many(offsets, factor)

    def read_partition_checkpoint(
        self, system: str, stream: str, partition: int
    ) -> PartitionCheckpoint | None:
        """The stored checkpoint of one stream partition (every bucket, at its last writer's
        factor), or None."""
        return self._checkpoints.read_partition(system, stream, partition)

    def read_checkpoints(self) -> dict[SystemStreamPartition, PartitionCheckpoint]:
        """Every stored checkpoint, keyed by whole stream partition (``key_bucket=-1``)."""
        return self._checkpoints.read_all()
