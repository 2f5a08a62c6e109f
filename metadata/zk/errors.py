"""Errors of the ZooKeeper metadata store; every one is a :class:`MetadataError` naming a path.

Callers of :class:`metadata.zk.ZkMetadataStore` only ever see these (and
:class:`metadata.errors.CorruptDataError` for unusable data): no kazoo exception escapes the store.

============================  =================================================================
error                         meaning
============================  =================================================================
``FencedOut``                 the leader epoch moved on: this leader was deposed and wrote nothing
``PermissionDenied``          the node's ACL refuses this client (missing or wrong credentials)
``NotFound``                  the node (job, version, barrier) does not exist
``WriteConflict``             a conditional write lost a race or would break an invariant
                              (a version not above the latest, a barrier already decided);
                              subclasses ``NodeExists``, ``VersionMismatch``,
                              ``TransactionRejected`` say which
``NodeTooLarge``              the write would exceed ZooKeeper's request limit; nothing was sent
``StoreUnavailable``          ZooKeeper did not answer within the bounded retries
``SessionLost``               the client's session expired during the call (ephemerals are gone)
``UnsafeAcl``                 a protected job found a node of its folder that others can change
``DuplicateRegistration``     an older live registration holds this processor id; ours was
                              given up (the older one wins)
============================  =================================================================
"""

from __future__ import annotations

from metadata.errors import CorruptDataError, MetadataError

__all__ = [
    "CorruptDataError",
    "DuplicateRegistration",
    "FencedOut",
    "NodeExists",
    "NodeTooLarge",
    "NotFound",
    "PermissionDenied",
    "SessionLost",
    "StoreUnavailable",
    "TransactionRejected",
    "UnsafeAcl",
    "VersionMismatch",
    "WriteConflict",
    "ZkStoreError",
]


class ZkStoreError(MetadataError):
    """Base of the store's own errors: ``path`` is the ZooKeeper path, ``problem`` what happened."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class FencedOut(ZkStoreError):
    """A leader write was refused because the leader epoch changed: this leader lost its epoch.

    The write was a transaction that ``check``-ed the epoch node, so nothing of it was applied.
    """


class PermissionDenied(ZkStoreError):
    """ZooKeeper refused the operation (``NoAuth``): the job is protected by a digest ACL and this
    client has no (or other) credentials."""


class NotFound(ZkStoreError):
    """The node does not exist (no such job, job-model version or barrier)."""


class WriteConflict(ZkStoreError):
    """A conditional write was refused: another writer got there first, or the write would break
    an invariant (job-model versions strictly increase; a decided barrier stays decided)."""


class NodeExists(WriteConflict):
    """A create found the node already there."""


class VersionMismatch(WriteConflict):
    """A conditional write (expecting a znode version) found the node at another version."""


class TransactionRejected(WriteConflict):
    """ZooKeeper refused a transaction: operation ``index`` (on ``path``) failed with ``error``.

    Nothing of the transaction was applied. The store turns the rejections it expects into
    :class:`FencedOut` or a specific :class:`WriteConflict`; any other surfaces as this.
    """

    def __init__(self, path: str, problem: str, *, index: int, error: Exception) -> None:
        super().__init__(path, problem)
        self.index = index
        self.error = error


class NodeTooLarge(ZkStoreError):
    """The write would not fit in one ZooKeeper request (``jute.maxbuffer``, about 1 MB).

    Checked before sending: ZooKeeper reports an oversized request as a lost connection, which a
    retrying client would retry forever.
    """


class StoreUnavailable(ZkStoreError):
    """ZooKeeper could not be reached (connection loss, timeouts) within the bounded retries."""


class SessionLost(StoreUnavailable):
    """The client's session expired (or the client was closed) while the operation was running.

    Ephemeral nodes of the old session (processor registration, barrier participation) are gone;
    the caller must register again.
    """


class DuplicateRegistration(ZkStoreError):
    """An older live registration (``path``) holds ``processor_id``: the registration ``node`` was
    refused and removed; the older one keeps the id (see :mod:`metadata.zk.recipe.processors`)."""

    def __init__(self, processor_id: str, node: str, older: str) -> None:
        super().__init__(
            older,
            f"processor id {processor_id!r} is already registered by this live processor;"
            f" the registration {node} was refused (one processor per id)",
        )
        self.processor_id = processor_id
        self.node = node


class UnsafeAcl(ZkStoreError):
    """A protected job (credentials set) found a node of its folder (``path``) whose ACL lets
    others change it: someone else created it. The job does not run there."""
