"""ZooKeeper operations with bounded retries, error mapping, size checks and an operation count.

:class:`ZkOps` is the only place the store talks to kazoo. Each call:

- waits (bounded) for the client to be connected, then sends the request and waits at most
  ``op_timeout_s`` for the answer;
- keeps, per thread, to the time budget a caller set for a block of calls
  (:mod:`metadata.zk.deadline`: ``with ops.deadlines.within(10.0): ...``), every wait capped by
  what is left of it;
- retries transient failures with tenacity (bounded: ``max_attempts``, ``retry_deadline_s``) and
  maps every other kazoo error to a :class:`~metadata.zk.errors.ZkStoreError` naming the path
  (:mod:`metadata.zk.retry`);
- reads many nodes in multiRead batches (:mod:`metadata.zk.multiread`), reads leaving a watch
  and sends two requests in one round trip (:mod:`metadata.zk.pipelined`);
- refuses, before sending, any request ZooKeeper would reject for its size (ZooKeeper reports
  those as a lost connection, which would otherwise be retried forever): :class:`NodeTooLarge`;
- counts write operations (``ops``: creates, sets and deletes, including those inside
  transactions), reads and transactions.

A retried write may have been applied by an attempt whose answer was lost: a retried create can
then fail with :class:`NodeExists`, a retried delete with :class:`NotFound`, a retried conditional
set with :class:`VersionMismatch`. The recipes handle these explicitly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    NoNodeError,
    UnimplementedError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from metadata.zk.deadline import Deadlines
from metadata.zk.errors import NodeExists, NodeTooLarge
from metadata.zk.multiread import Found, read_batched, read_each
from metadata.zk.pipelined import PipelinedReads
from metadata.zk.retry import NotConnected, call_with_retries
from metadata.zk.transaction import Op, add_to, batches, rejection

__all__ = ["REQUEST_LIMIT", "SAFE_REQUEST_BYTES", "Op", "ZkOps"]

T = TypeVar("T")

#: ZooKeeper's default ``jute.maxbuffer``: no request (or node) may reach this many bytes.
REQUEST_LIMIT = 1_048_575
#: What the store allows itself per request, leaving room for headers.
SAFE_REQUEST_BYTES = 1_000_000
#: Rough per-operation overhead of a request (headers, flags, versions), in bytes.
_OP_OVERHEAD = 64


class ZkOps(PipelinedReads):
    """Runs the store's ZooKeeper operations (see the module docstring)."""

    def __init__(
        self,
        client: KazooClient,
        *,
        acl: Sequence[ACL],
        log: Any,
        retry_deadline_s: float = 30.0,
        max_attempts: int = 50,
        op_timeout_s: float = 15.0,
        read_batch: int = 1000,
    ) -> None:
        self.client = client
        self.acl = list(acl)
        self.log = log
        self.retry_deadline_s = retry_deadline_s
        self.max_attempts = max_attempts
        self.op_timeout_s = op_timeout_s
        self.read_batch = read_batch
        self._multi_read = True
        self._acl_bytes = sum(12 + len(a.id.scheme) + len(a.id.id) for a in self.acl)
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self.deadlines = Deadlines()
        self._writes = 0
        self._reads = 0
        self._transactions = 0
        if client.connected:
            self._connected.set()
        client.add_listener(self._on_state)

    # ---------------------------------------------------------------- counters

    @property
    def writes(self) -> int:
        """Write operations applied so far (creates, sets, deletes, inside transactions too)."""
        return self._writes

    @property
    def reads(self) -> int:
        return self._reads

    @property
    def transactions(self) -> int:
        return self._transactions

    def _count(self, *, writes: int = 0, reads: int = 0, transactions: int = 0) -> None:
        with self._lock:
            self._writes += writes
            self._reads += reads
            self._transactions += transactions

    # ---------------------------------------------------------------- connection

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()

    def close(self) -> None:
        """Stop following the client's connection state."""
        self.client.remove_listener(self._on_state)

    def _await_connection(self) -> None:
        if self.client.connected:
            return
        self._connected.wait(timeout=self.deadlines.cap(1.0))
        if not self.client.connected:
            raise NotConnected("not connected to ZooKeeper")

    def _wait(self, async_result: Any) -> Any:
        return async_result.get(timeout=self.deadlines.cap(self.op_timeout_s))

    # ---------------------------------------------------------------- the retry loop

    def call(self, what: str, path: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` once connected, with bounded retries of transient failures; map kazoo
        errors (:func:`~metadata.zk.retry.call_with_retries`)."""

        def connected_attempt() -> T:
            if self.deadlines.remaining() == 0:  # nothing sent once the caller's budget is spent
                raise NotConnected("the time budget of this thread's ZooKeeper calls is spent")
            self._await_connection()
            return attempt()

        return call_with_retries(
            what,
            path,
            connected_attempt,
            log=self.log,
            deadline_s=self.deadlines.cap(self.retry_deadline_s),
            max_attempts=self.max_attempts,
        )

    # ---------------------------------------------------------------- sizes

    def request_size(self, op: Op) -> int:
        """A generous estimate of ``op``'s share of a request, in bytes."""
        acl = self._acl_bytes if op.kind == "create" else 0
        return _OP_OVERHEAD + len(op.path.encode()) + len(op.data) + acl

    def check_size(self, ops: Sequence[Op], what: str) -> int:
        size = sum(self.request_size(op) for op in ops)
        if size > SAFE_REQUEST_BYTES:
            biggest = max(ops, key=self.request_size)
            raise NodeTooLarge(
                biggest.path,
                f"{what}: a request of {size} bytes would exceed ZooKeeper's limit "
                f"({REQUEST_LIMIT} bytes; the store allows {SAFE_REQUEST_BYTES}); "
                "nothing was written",
            )
        return size

    # ---------------------------------------------------------------- reads

    def get(self, path: str, what: str) -> tuple[bytes, ZnodeStat] | None:
        """The node's data and stat, or None if it does not exist."""

        def attempt() -> tuple[bytes, ZnodeStat] | None:
            try:
                data, stat = self._wait(self.client.get_async(path))
            except NoNodeError:
                return None
            self._count(reads=1)
            return bytes(data or b""), stat

        return self.call(what, path, attempt)

    def exists(self, path: str, what: str) -> ZnodeStat | None:
        def attempt() -> ZnodeStat | None:
            stat: ZnodeStat | None = self._wait(self.client.exists_async(path))
            self._count(reads=1)
            return stat

        return self.call(what, path, attempt)

    def children(self, path: str, what: str) -> list[str] | None:
        """The node's children (unsorted), or None if it does not exist."""

        def attempt() -> list[str] | None:
            try:
                names: list[str] = self._wait(self.client.get_children_async(path))
            except NoNodeError:
                return None
            self._count(reads=1)
            return list(names)

        return self.call(what, path, attempt)

    def get_many(
        self, paths: Iterable[str], what: str, parent: str, *, large: bool = False
    ) -> Found:
        """Read many nodes; None = missing. Small nodes go ``read_batch`` to a multiRead request
        (see :mod:`metadata.zk.multiread`); ``large`` nodes (job-model chunks) one request each,
        pipelined, so no answer grows beyond ZooKeeper's limit."""
        wanted = list(paths)
        if not wanted:
            return {}

        def attempt() -> Found:
            if large or not self._multi_read:
                return read_each(self.client, wanted, what, wait=self._wait)
            try:
                return read_batched(
                    self.client, wanted, what, wait=self._wait, batch=self.read_batch
                )
            except UnimplementedError:
                self.log.warning("zk.multiread_unsupported", fallback="one request per node")
                self._multi_read = False
                return read_each(self.client, wanted, what, wait=self._wait)

        found = self.call(what, parent, attempt)
        self._count(reads=len(wanted))
        return found

    def sync(self, path: str, what: str) -> None:
        """ZooKeeper's ``sync``: the server this client is connected to catches up with the
        leader before answering, so the next read sees every write committed before this call
        (a lagging follower would otherwise serve an old state, SAMZA-2301)."""

        def attempt() -> None:
            self._wait(self.client.sync_async(path))

        self.call(what, path, attempt)

    # ---------------------------------------------------------------- single writes

    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        what: str,
        ephemeral: bool = False,
        sequence: bool = False,
        acl: Sequence[ACL] | None = None,
        recover: Callable[[], str | None] | None = None,
    ) -> str:
        """Create a node (with the store's ACL unless ``acl`` is given); returns its path.

        ``recover`` is called before every retry: if it finds the node an earlier attempt created
        (its answer lost with the connection), that path is returned instead of creating another.
        """
        self.check_size([Op("create", path + ("0" * 10 if sequence else ""), data)], what)
        chosen = list(self.acl if acl is None else acl)
        attempts = 0

        def attempt() -> str:
            nonlocal attempts
            attempts += 1
            if attempts > 1 and recover is not None:
                existing = recover()
                if existing is not None:
                    return existing
            created: str = self._wait(
                self.client.create_async(
                    path, data, acl=chosen, ephemeral=ephemeral, sequence=sequence
                )
            )
            self._count(writes=1)
            return created

        return self.call(what, path, attempt)

    def ensure(
        self, path: str, data: bytes = b"", *, what: str, acl: Sequence[ACL] | None = None
    ) -> bool:
        """Create the node unless it exists; True if this call created it."""
        try:
            self.create(path, data, what=what, acl=acl)
        except NodeExists:
            return False
        return True

    def set(self, path: str, data: bytes, *, what: str, version: int = -1) -> ZnodeStat:
        self.check_size([Op("set", path, data)], what)

        def attempt() -> ZnodeStat:
            stat: ZnodeStat = self._wait(self.client.set_async(path, data, version))
            self._count(writes=1)
            return stat

        return self.call(what, path, attempt)

    def delete(self, path: str, *, what: str, version: int = -1, missing_ok: bool = True) -> bool:
        """Delete a node (no children); True if this call deleted it."""

        def attempt() -> bool:
            try:
                self._wait(self.client.delete_async(path, version))
            except NoNodeError:
                if missing_ok:
                    return False
                raise
            self._count(writes=1)
            return True

        return self.call(what, path, attempt)

    # ---------------------------------------------------------------- transactions

    def commit(self, ops: Sequence[Op], what: str) -> list[Any]:
        """Apply ``ops`` as one transaction (all or nothing); returns kazoo's per-op results.

        A refused transaction raises :class:`TransactionRejected` naming the operation that
        failed (``index``, its ``path`` and the kazoo ``error``), or :class:`PermissionDenied`.
        """
        if not ops:
            return []
        self.check_size(ops, what)
        writes = sum(1 for op in ops if op.writes)

        def attempt() -> list[Any]:
            transaction = self.client.transaction()
            add_to(transaction, ops, self.acl)
            results: list[Any] = self._wait(transaction.commit_async())
            refused = rejection(ops, results, what)
            if refused is not None:
                self._count(transactions=1)
                raise refused
            self._count(writes=writes, transactions=1)
            return results

        return self.call(what, ops[0].path, attempt)

    def commit_batched(
        self,
        ops: Sequence[Op],
        what: str,
        *,
        guards: Sequence[Op] = (),
        budget: int = SAFE_REQUEST_BYTES,
    ) -> int:
        """Apply ``ops`` in as few transactions as fit in ``budget`` bytes each, every one
        starting with the ``guards`` (checks). Returns the number of write operations applied.

        Each transaction is atomic; the batches together are not (a failure leaves the earlier
        batches applied), so use it for writes where every single operation stands on its own.
        """
        applied = 0
        reserved = sum(self.request_size(g) for g in guards)
        for batch in batches(ops, budget=budget, reserved=reserved, size=self.request_size):
            self.commit([*guards, *batch], what)
            applied += len(batch)
        return applied
