"""ZooKeeper operations with bounded retries, error mapping, size checks and an operation count.

:class:`ZkOps` is the only place the store talks to kazoo. Each call:

- waits (bounded) for the client to be connected, then sends the request and waits at most
  ``op_timeout_s`` for the answer;
- retries transient failures (``ConnectionLoss``, ``SessionMoved``, ``OperationTimeout``, a
  request timeout, not connected) with tenacity: exponential back-off up to 1 s, at most
  ``max_attempts`` attempts and ``retry_deadline_s`` seconds, each retry logged; then raises
  :class:`StoreUnavailable`;
- maps every other kazoo error to a :class:`~metadata.zk.errors.ZkStoreError` naming the path
  (``NoAuth`` -> :class:`PermissionDenied`, ``NoNode`` -> :class:`NotFound`, ...);
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
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import tenacity
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    SessionMovedError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

from metadata.zk.errors import (
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
from metadata.zk.multiread import send_multi_read

__all__ = ["REQUEST_LIMIT", "SAFE_REQUEST_BYTES", "Op", "ZkOps"]

T = TypeVar("T")

#: ZooKeeper's default ``jute.maxbuffer``: no request (or node) may reach this many bytes.
REQUEST_LIMIT = 1_048_575
#: What the store allows itself per request, leaving room for headers.
SAFE_REQUEST_BYTES = 1_000_000
#: multiRead requests (or single gets, for large nodes) in flight at once.
_BATCHES_IN_FLIGHT = 4
_REQUESTS_IN_FLIGHT = 16
#: Rough per-operation overhead of a request (headers, flags, versions), in bytes.
_OP_OVERHEAD = 64


class _NotConnected(Exception):
    """The client has no connection right now (transient)."""


_TRANSIENT: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    SessionMovedError,
    OperationTimeoutError,
    KazooTimeoutError,
    _NotConnected,
)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction."""

    kind: Literal["create", "set", "delete", "check"]
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False

    @property
    def writes(self) -> bool:
        return self.kind != "check"


class ZkOps:
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
        self._connected.wait(timeout=1.0)
        if not self.client.connected:
            raise _NotConnected("not connected to ZooKeeper")

    def _wait(self, async_result: Any) -> Any:
        return async_result.get(timeout=self.op_timeout_s)

    # ---------------------------------------------------------------- the retry loop

    def call(self, what: str, path: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` with bounded retries of transient failures; map kazoo errors."""
        started = time.monotonic()
        retrying = tenacity.Retrying(
            stop=(
                tenacity.stop_after_delay(self.retry_deadline_s)
                | tenacity.stop_after_attempt(self.max_attempts)
            ),
            wait=tenacity.wait_exponential(multiplier=0.05, max=1.0)
            + tenacity.wait_random(0, 0.05),
            retry=tenacity.retry_if_exception_type(_TRANSIENT),
            before_sleep=self._log_retry(what, path),
            reraise=True,
        )
        try:
            for try_ in retrying:
                with try_:
                    self._await_connection()
                    return attempt()
        except _TRANSIENT as exc:
            elapsed = time.monotonic() - started
            self.log.error("zk.unavailable", what=what, path=path, error=repr(exc), seconds=elapsed)
            raise StoreUnavailable(
                path,
                f"{what}: ZooKeeper did not answer within {elapsed:.1f}s "
                f"(bounded retries of {type(exc).__name__})",
            ) from exc
        except (NoAuthError, AuthFailedError) as exc:
            raise PermissionDenied(
                path,
                f"{what}: permission denied ({type(exc).__name__}); the job is protected by an "
                "ACL and this client has no or other credentials (zookeeper.auth)",
            ) from exc
        except SessionExpiredError as exc:  # also ConnectionClosedError
            raise SessionLost(path, f"{what}: the ZooKeeper session expired or was closed") from exc
        except NoNodeError as exc:
            raise NotFound(path, f"{what}: no such node (or no parent node)") from exc
        except NodeExistsError as exc:
            raise NodeExists(path, f"{what}: the node already exists") from exc
        except BadVersionError as exc:
            raise VersionMismatch(path, f"{what}: the node changed meanwhile") from exc
        except NotEmptyError as exc:
            raise WriteConflict(path, f"{what}: the node has children") from exc
        except KazooException as exc:
            raise ZkStoreError(path, f"{what}: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _log_retry(self, what: str, path: str) -> Callable[[tenacity.RetryCallState], None]:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            self.log.warning(
                "zk.retry",
                what=what,
                path=path,
                attempt=state.attempt_number,
                error=repr(error),
                next_wait_s=round(state.upcoming_sleep, 3),
            )

        return before_sleep

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
    ) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        """Read many nodes; None = missing. Small nodes go ``read_batch`` to a multiRead request
        (see :mod:`metadata.zk.multiread`); ``large`` nodes (job-model chunks) one request each,
        pipelined, so no answer grows beyond ZooKeeper's limit."""
        wanted = list(paths)
        if not wanted:
            return {}

        def attempt() -> dict[str, tuple[bytes, ZnodeStat] | None]:
            if large or not self._multi_read:
                return self._get_each(wanted, what)
            try:
                return self._get_batched(wanted, what)
            except UnimplementedError:
                self.log.warning("zk.multiread_unsupported", fallback="one request per node")
                self._multi_read = False
                return self._get_each(wanted, what)

        found = self.call(what, parent, attempt)
        self._count(reads=len(wanted))
        return found

    def _result(
        self, path: str, result: Any, what: str, found: dict[str, tuple[bytes, ZnodeStat] | None]
    ) -> None:
        if isinstance(result, NoNodeError):
            found[path] = None
        elif isinstance(result, NoAuthError):
            raise PermissionDenied(
                path, f"{what}: permission denied (NoAuth); check zookeeper.auth"
            )
        elif isinstance(result, Exception):
            raise result
        else:
            data, stat = result
            found[path] = (bytes(data or b""), stat)

    def _get_batched(
        self, paths: list[str], what: str
    ) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        found: dict[str, tuple[bytes, ZnodeStat] | None] = {}
        pending: deque[tuple[list[str], Any]] = deque()

        def drain_one() -> None:
            batch, async_result = pending.popleft()
            for path, result in zip(batch, self._wait(async_result), strict=True):
                self._result(path, result, what, found)

        for start in range(0, len(paths), self.read_batch):
            batch = paths[start : start + self.read_batch]
            pending.append((batch, send_multi_read(self.client, batch)))
            if len(pending) >= _BATCHES_IN_FLIGHT:
                drain_one()
        while pending:
            drain_one()
        return found

    def _get_each(self, paths: list[str], what: str) -> dict[str, tuple[bytes, ZnodeStat] | None]:
        found: dict[str, tuple[bytes, ZnodeStat] | None] = {}
        pending: deque[tuple[str, Any]] = deque()

        def drain_one() -> None:
            path, async_result = pending.popleft()
            try:
                result = self._wait(async_result)
            except (NoNodeError, NoAuthError) as exc:
                result = exc
            self._result(path, result, what, found)

        for path in paths:
            pending.append((path, self.client.get_async(path)))
            if len(pending) >= _REQUESTS_IN_FLIGHT:
                drain_one()
        while pending:
            drain_one()
        return found

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
            for op in ops:
                if op.kind == "create":
                    transaction.create(op.path, op.data, acl=self.acl, ephemeral=op.ephemeral)
                elif op.kind == "set":
                    transaction.set_data(op.path, op.data, op.version)
                elif op.kind == "delete":
                    transaction.delete(op.path, op.version)
                else:
                    transaction.check(op.path, op.version)
            results: list[Any] = self._wait(transaction.commit_async())
            failures = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
            if failures:
                self._count(transactions=1)
                index, error = next(
                    (
                        (i, r)
                        for i, r in failures
                        if not isinstance(r, RolledBackError | RuntimeInconsistency)
                    ),
                    failures[0],
                )
                op = ops[index]
                if isinstance(error, NoAuthError):
                    raise PermissionDenied(
                        op.path,
                        f"{what}: permission denied (NoAuth) on {op.kind}; the job is "
                        "protected by an ACL and this client has no or other credentials",
                    )
                raise TransactionRejected(
                    op.path,
                    f"{what}: {op.kind} failed with {type(error).__name__}; nothing was applied",
                    index=index,
                    error=error,
                )
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
        guard_size = sum(self.request_size(g) for g in guards)
        applied = 0
        batch: list[Op] = []
        size = guard_size
        for op in ops:
            op_size = self.request_size(op)
            if batch and size + op_size > budget:
                self.commit([*guards, *batch], what)
                applied += len(batch)
                batch, size = [], guard_size
            batch.append(op)
            size += op_size
        if batch:
            self.commit([*guards, *batch], what)
            applied += len(batch)
        return applied
