"""The MetadataStore on ZooKeeper (kazoo): one job's processors, task locality, job models,
barriers, leader epoch and checkpoints, in the layout of DESIGN.md ("ZooKeeper layout").

``from metadata.zk import connect, ZkMetadataStore`` is the entry point; every error the store
raises, the layout and the barrier states are re-exported here too.
"""

from metadata.checkpoints import PartitionCheckpoint
from metadata.zk.chunks import Manifest
from metadata.zk.client import ancestor_acl, connect, job_acl
from metadata.zk.errors import (
    CorruptDataError,
    FencedOut,
    NodeExists,
    NodeTooLarge,
    NotFound,
    PermissionDenied,
    SessionLost,
    StoreUnavailable,
    TransactionRejected,
    VersionMismatch,
    WriteConflict,
    ZkStoreError,
)
from metadata.zk.layout import JobLayout
from metadata.zk.ops import REQUEST_LIMIT, SAFE_REQUEST_BYTES
from metadata.zk.recipe.barriers import DONE, NEW, TIMED_OUT
from metadata.zk.recipe.epoch import LeaderEpoch
from metadata.zk.recipe.processors import ProcessorRegistration
from metadata.zk.store import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, ZkMetadataStore
from metadata.zk.watch import Watch

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DONE",
    "MAX_CHUNK_SIZE",
    "NEW",
    "REQUEST_LIMIT",
    "SAFE_REQUEST_BYTES",
    "TIMED_OUT",
    "CorruptDataError",
    "FencedOut",
    "JobLayout",
    "LeaderEpoch",
    "Manifest",
    "NodeExists",
    "NodeTooLarge",
    "NotFound",
    "PartitionCheckpoint",
    "PermissionDenied",
    "ProcessorRegistration",
    "SessionLost",
    "StoreUnavailable",
    "TransactionRejected",
    "VersionMismatch",
    "Watch",
    "WriteConflict",
    "ZkMetadataStore",
    "ZkStoreError",
    "ancestor_acl",
    "connect",
    "job_acl",
]
