"""The MetadataStore on ZooKeeper: :class:`ZkMetadataStore`, one job's recipes on one client.

The store builds the recipes of :mod:`metadata.zk.recipe` on one :class:`~metadata.zk.ops.ZkOps`
and exposes them as attributes; callers reach a recipe directly:

=======================  =====================  ===========================================
attribute                recipe                 ZooKeeper nodes, what it does
=======================  =====================  ===========================================
``store.processors``     ``ProcessorRegistry``  ``processors/``: register, read, watch
``store.locality``       ``TaskLocalityStore``  ``localityData/``: read, differential write,
                                                per-run reset (I7)
``store.job_models``     ``JobModelStore``      ``jobModels/``, ``jobModelVersion``: chunked
                                                atomic publish, read, retention
``store.barriers``       ``Barriers``           ``barriers/``: join, watch, decide
``store.epochs``         ``LeaderEpochs``       ``leader/epoch``: acquire, fence leader writes
``store.checkpoints``    ``CheckpointStore``    ``checkpoints/``: input offsets (SEP-32)
``store.history``        ``RebalanceHistory``   ``history/``: the last N rebalances (leader,
                                                fenced)
``store.batches``        ``BatchHistory``       ``history/``: the last N streaming batches
                                                (the driver)
``store.standby_lag``    ``StandbyLagStore``    ``standbyLag/``: each processor's standby
                                                copies' lag, differential writes
``store.streaming_       ``StreamingCommits``   ``streaming/commits``: a streaming query's
commits``                                       driver epoch and commit pointer
=======================  =====================  ===========================================

Every error is a :class:`~metadata.errors.MetadataError` (see :mod:`metadata.zk.errors` and
``docs/zookeeper.md``); bad data read from ZooKeeper is a
:class:`~metadata.errors.CorruptDataError` naming the path, and a reader never writes.

The store's methods of before the recipes (``store.join_barrier(v, pid)``, ...) still resolve,
deprecated, through :data:`DEPRECATED_NAMES` (kept for external scripts).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.security import Permissions

from metadata.zk.client import ancestor_acl, describe_acl, foreign_rights, job_acl
from metadata.zk.errors import TransactionRejected, UnsafeAcl
from metadata.zk.layout import JobLayout
from metadata.zk.ops import SAFE_REQUEST_BYTES, ZkOps
from metadata.zk.recipe.barriers import Barriers
from metadata.zk.recipe.batches import BatchHistory
from metadata.zk.recipe.checkpoints import CheckpointStore
from metadata.zk.recipe.epoch import LeaderEpochs
from metadata.zk.recipe.history import RebalanceHistory
from metadata.zk.recipe.jobmodels import JobModelStore
from metadata.zk.recipe.locality import TaskLocalityStore
from metadata.zk.recipe.processors import ProcessorRegistry
from metadata.zk.recipe.standby_lag import StandbyLagStore
from metadata.zk.recipe.streaming_commits import StreamingCommits
from metadata.zk.transaction import Op

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEPRECATED_NAMES",
    "MAX_CHUNK_SIZE",
    "MAX_TASKS",
    "ZkMetadataStore",
]

#: Default chunk size of a stored job model: well below ZooKeeper's 1 MB request limit.
DEFAULT_CHUNK_SIZE = 900_000
#: The largest chunk size the store accepts (a chunk plus its request overhead must fit).
MAX_CHUNK_SIZE = SAFE_REQUEST_BYTES - 4_096
#: The most tasks (and input partitions) a job may have: what the store is measured to hold with
#: room to spare (``benchmarks/zk_store.py``, docs/benchmarks.md: a 1,000,000-task model and its
#: locality nodes). At 10,000,000 a coordinator ran out of memory before publishing.
MAX_TASKS = 2_000_000

#: Deprecated: the store's members of before the recipes, old name -> ``"attribute.member"``.
#: Kept so that external scripts written against them still run; new code calls the recipe.
DEPRECATED_NAMES: dict[str, str] = {
    "job_folder": "layout.folder",
    "register_processor": "processors.register",
    "unregister_processor": "processors.unregister",
    "read_processors": "processors.read",
    "read_processor_locality": "processors.locality",
    "watch_processors": "processors.watch",
    "read_task_locality": "locality.read",
    "write_task_locality": "locality.write",
    "reset_task_locality": "locality.reset",
    "acquire_epoch": "epochs.acquire",
    "current_epoch": "epochs.current",
    "holds_epoch": "epochs.holds",
    "publish_job_model": "job_models.publish",
    "read_job_model": "job_models.read",
    "read_job_model_document": "job_models.read_document",
    "read_latest_version": "job_models.latest_version",
    "read_latest_job_model": "job_models.read_latest",
    "read_latest_job_model_document": "job_models.read_latest_document",
    "read_manifest": "job_models.read_manifest",
    "read_container": "job_models.read_container",
    "watch_version": "job_models.watch_version",
    "remove_old_versions": "job_models.remove_old_versions",
    "join_barrier": "barriers.join",
    "barrier_state": "barriers.state",
    "barrier_participants": "barriers.participants",
    "barrier_expected": "barriers.expected",
    "watch_barrier": "barriers.watch",
    "watch_barrier_state": "barriers.watch_state",
    "set_barrier_state": "barriers.set_state",
    "read_checkpoint": "checkpoints.read",
    "write_checkpoint": "checkpoints.write",
    "write_checkpoints": "checkpoints.write_many",
    "read_partition_checkpoint": "checkpoints.read_partition",
    "read_checkpoints": "checkpoints.read_all",
}


class ZkMetadataStore:
    """One job's metadata in ZooKeeper (layout: DESIGN.md "ZooKeeper layout", docs/zookeeper.md).

    ``client`` is a started KazooClient (see :func:`~metadata.zk.client.connect`);
    ``job_folder`` the job's folder (``JobConfig.job_folder``); ``run_id`` the run whose task
    locality this store reads and writes (I7); ``auth`` the "user:password" whose digest ACL
    every created node gets (empty: an open ACL); ``retention`` how many job-model versions (and
    barriers) are kept; ``chunk_size`` the largest stored chunk of a job model.
    ``retry_deadline_s``/``op_timeout_s`` bound the retries of transient failures.

    Example::

        store = ZkMetadataStore(connect("zk-1:2181"), "/affinity/clicks-1", run_id="r1")
        store.ensure_layout()
        store.processors.register("p-1", "zone-a/node-1")
        epoch = store.epochs.acquire()
        store.job_models.publish(model, epoch=epoch, participants=["p-1"])
        store.barriers.join(model.version, "p-1")

    The recipes are the attributes ``processors``, ``locality``, ``job_models``, ``barriers``,
    ``epochs``, ``checkpoints``, ``history`` and ``standby_lag`` (see the module docstring);
    besides them the store has ``layout`` (every path), ``run_id``, ``client``,
    ``election_path`` (for kazoo's Election recipe), the counters ``ops`` (write operations:
    creates, sets, deletes, inside transactions too), ``reads`` and ``transactions``, and
    :meth:`ensure_layout`,
    :meth:`job_exists`, :meth:`sync`, :meth:`within` (a time budget for a block of calls),
    :meth:`close`. The recipes' ``watch*`` methods return a
    :class:`~metadata.zk.watch.Watch` whose ``stop()`` ends the callbacks; callbacks run on
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
        compression_level: int = 1,
        log: Any = None,  # a structlog logger (default: metadata.zk)
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
        self.log = (log if log is not None else structlog.get_logger("metadata.zk")).bind(
            job_folder=job_folder, run_id=run_id
        )
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
        self.epochs = LeaderEpochs(self._ops, self.layout)
        self.processors = ProcessorRegistry(self._ops, self.layout)
        self.locality = TaskLocalityStore(self._ops, self.layout, run_id)
        self.barriers = Barriers(self._ops, self.layout, self.epochs)
        self.checkpoints = CheckpointStore(self._ops, self.layout)
        self.history = RebalanceHistory(self._ops, self.layout, self.epochs)
        self.batches = BatchHistory(self._ops, self.layout)
        self.standby_lag = StandbyLagStore(self._ops, self.layout)
        self.streaming_commits = StreamingCommits(self._ops, self.layout)
        self.job_models = JobModelStore(
            self._ops,
            self.layout,
            self.epochs,
            self.barriers,
            run_id=run_id,
            chunk_size=chunk_size,
            retention=retention,
            compression_level=compression_level,
        )

    def __getattr__(self, name: str) -> Any:
        """The deprecated names of :data:`DEPRECATED_NAMES`, resolved to their recipe member."""
        target = DEPRECATED_NAMES.get(name)
        if target is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        warnings.warn(
            f"ZkMetadataStore.{name} is deprecated: use store.{target}",
            DeprecationWarning,
            stacklevel=2,
        )
        owner, member = target.split(".")
        return getattr(getattr(self, owner), member)

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

    def within(self, seconds: float) -> AbstractContextManager[None]:
        """A block whose calls of this store, made by this thread, end within ``seconds`` in all
        (:mod:`metadata.zk.deadline`); once it is spent they raise :class:`StoreUnavailable`."""
        return self._ops.deadlines.within(seconds)

    def close(self) -> None:
        """Detach from the client (the client itself stays open: it belongs to the caller)."""
        self._ops.close()

    def sync(self) -> None:
        """Make the next reads of this store see every write committed before this call (the
        connected server catches up with the ZooKeeper leader first). Use it before a read
        that decides on the latest state without a write of this client just before it."""
        self._ops.sync(self.layout.folder, "sync with the ZooKeeper leader")

    def read_node(self, path: str) -> tuple[bytes, int] | None:
        """The data and znode version of ``path`` (None: no such node), for tools that look at
        a node whatever it holds (``affinity repair``)."""
        found = self._ops.get(path, "read node")
        return None if found is None else (found[0], found[1].version)

    def remove_unusable(
        self, path: str, *, zversion: int, what: str, unchanged: Mapping[str, int] | None = None
    ) -> bool:
        """Delete ``path`` of this job, with what is under it, in one transaction, if the node
        is still at znode version ``zversion`` and each node of ``unchanged`` (the node that
        failed to read, e.g. a chunk below ``path``) still at its version, as a reader found
        them unusable: an operator's repair (``affinity repair --apply``). False if any changed
        or went meanwhile (nothing is deleted then). Not fenced by the leader epoch: it removes
        only what no reader can use.
        """
        if path != self.layout.folder and not path.startswith(self.layout.folder + "/"):
            raise ValueError(f"{path} is not in the job's folder {self.layout.folder}")
        ops: list[Op] = []

        def below(node: str) -> None:
            for child in sorted(self._ops.children(node, f"{what}: list") or []):
                below(f"{node}/{child}")
                ops.append(Op("delete", f"{node}/{child}"))

        guards = [Op("check", node, version=v) for node, v in sorted((unchanged or {}).items())]
        below(path)
        ops.append(Op("delete", path, version=zversion))
        try:
            self._ops.commit([*guards, *ops], what)
        except TransactionRejected:
            return False
        self._ops.log.warning("zk.unusable_node_removed", node=path, nodes=len(ops))
        return True

    def job_exists(self) -> bool:
        """True if the job folder exists (readers use this to tell 'no such job')."""
        return self._ops.exists(self.layout.folder, "check job folder") is not None

    def ensure_layout(self) -> None:
        """Create the job folder and its persistent nodes if missing (idempotent).

        With credentials (``auth``), the nodes it finds already there are checked first: one
        whose ACL lets anyone else change it (a folder squatted before the job started) raises
        :class:`UnsafeAcl` naming the node and the ACL found, before anything is written in it;
        a folder above the job that others may do more than list and create in is logged
        (``zk.ancestor_acl_open``)."""
        parts = self.layout.folder.strip("/").split("/")
        for depth in range(1, len(parts)):
            path = "/" + "/".join(parts[:depth])
            if self._ops.exists(path, "ensure layout") is None:
                self._ops.ensure(path, what="ensure layout", acl=ancestor_acl(self._auth))
            elif self._auth:
                self._check_acl(path, ancestor=True)
        nodes: list[tuple[str, bytes]] = [(p, b"") for p in self.layout.containers()]
        nodes += [
            (self.layout.job_model_version, b""),
            (self.layout.epoch, b"0"),
            (self.layout.locality, self.locality.marker_data()),
            (self.layout.locality_writes, b""),
        ]
        missing = []
        for path, data in nodes:
            if self._ops.exists(path, "ensure layout") is None:
                missing.append((path, data))
            elif self._auth:
                self._check_acl(path)
        for path, data in missing:
            self._ops.ensure(path, data, what="ensure layout")

    def _check_acl(self, path: str, *, ancestor: bool = False) -> None:
        """Refuse a job node others can change; log a folder above it others can change."""
        acls, _ = self._ops.call("check ACL", path, lambda: self.client.get_acls(path))
        allowed = Permissions.CREATE if ancestor else 0
        foreign = foreign_rights(acls, self._auth, allowed)
        if not foreign:
            return
        if ancestor:
            self.log.warning("zk.ancestor_acl_open", path=path, acl=describe_acl(acls))
            return
        raise UnsafeAcl(
            path,
            f"others can change this node of a protected job (ACL found: {describe_acl(acls)});"
            " it was not created with the job's credentials: remove it (or give it the job's"
            " digest ACL only) before starting the job",
        )
