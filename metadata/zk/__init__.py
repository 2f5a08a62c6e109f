"""The MetadataStore on ZooKeeper (kazoo): one job's processors, task locality, job models,
barriers, leader epoch and checkpoints, in the layout of DESIGN.md ("ZooKeeper layout").

``from metadata.zk import connect, ZkMetadataStore`` is the entry point; every error the store
raises, the layout, the barrier states (``NEW``/``DONE``/``TIMED_OUT``: aliases of
:class:`~metadata.model.BarrierState`) and the recipes' value types are re-exported here.

Holds the plumbing, one concern a module: ``client`` (connect, ACLs), ``handler`` and
``connection`` (kazoo's threading handler waiting with one ``poll`` and handing answers over
through one lock, its connection reading and writing before it waits, several messages a read,
the calling thread writing its own request), ``store``
(:class:`ZkMetadataStore`, which holds the recipes), ``ops`` (every ZooKeeper call: retries,
sizes, counters), ``deadline`` (a time budget for a block of calls), ``retry`` (the retry
loop, kazoo -> store errors), ``transaction`` (operations,
batching), ``multiread`` (many reads at once), ``fenced`` (leader writes fenced by the epoch),
``errors``, ``layout`` (paths), ``watch``, ``chunks`` (the chunked, compressed job-model codec);
and the recipes in :mod:`metadata.zk.recipe`.

May import ``metadata.model``, ``metadata.serde``, ``metadata.errors``, ``metadata.checkpoints``,
kazoo and the libraries it needs; never ``coordinator``, ``groupers`` or ``locality``.
"""

from metadata.checkpoints import PartitionCheckpoint
from metadata.model import BarrierState
from metadata.zk.chunks import Manifest
from metadata.zk.client import ancestor_acl, connect, job_acl
from metadata.zk.errors import (
    CorruptDataError,
    DuplicateRegistration,
    FencedOut,
    NodeExists,
    NodeTooLarge,
    NotFound,
    PermissionDenied,
    SessionLost,
    StoreUnavailable,
    TransactionRejected,
    UnsafeAcl,
    VersionMismatch,
    WriteConflict,
    ZkStoreError,
)
from metadata.zk.layout import JobLayout
from metadata.zk.ops import REQUEST_LIMIT, SAFE_REQUEST_BYTES
from metadata.zk.recipe import (
    Barriers,
    CheckpointStore,
    JobModelStore,
    LeaderEpoch,
    LeaderEpochs,
    ProcessorRegistration,
    ProcessorRegistry,
    TaskLocalityStore,
)
from metadata.zk.store import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, ZkMetadataStore
from metadata.zk.watch import Watch

#: The barrier states, as they were spelled before :class:`BarrierState` (the same members).
NEW = BarrierState.NEW
DONE = BarrierState.DONE
TIMED_OUT = BarrierState.TIMED_OUT

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DONE",
    "MAX_CHUNK_SIZE",
    "NEW",
    "REQUEST_LIMIT",
    "SAFE_REQUEST_BYTES",
    "TIMED_OUT",
    "BarrierState",
    "Barriers",
    "CheckpointStore",
    "CorruptDataError",
    "DuplicateRegistration",
    "FencedOut",
    "JobLayout",
    "JobModelStore",
    "LeaderEpoch",
    "LeaderEpochs",
    "Manifest",
    "NodeExists",
    "NodeTooLarge",
    "NotFound",
    "PartitionCheckpoint",
    "PermissionDenied",
    "ProcessorRegistration",
    "ProcessorRegistry",
    "SessionLost",
    "StoreUnavailable",
    "TaskLocalityStore",
    "TransactionRejected",
    "UnsafeAcl",
    "VersionMismatch",
    "Watch",
    "WriteConflict",
    "ZkMetadataStore",
    "ZkStoreError",
    "ancestor_acl",
    "connect",
    "job_acl",
]
