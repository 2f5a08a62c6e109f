"""Transactions: :class:`Op` (one operation), how a list of them becomes a kazoo transaction,
how a refused one is reported (:func:`rejection`), and how many are cut into batches that each fit
in one request (:func:`batches`). No I/O: :class:`~metadata.zk.ops.ZkOps` sends them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kazoo.client import TransactionRequest
from kazoo.exceptions import NoAuthError, RolledBackError, RuntimeInconsistency
from kazoo.security import ACL

from metadata.zk.errors import PermissionDenied, TransactionRejected

__all__ = ["Op", "add_to", "batches", "rejection"]


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


def add_to(transaction: TransactionRequest, ops: Sequence[Op], acl: list[ACL]) -> None:
    """Add ``ops`` to a kazoo transaction (creates get ``acl``)."""
    for op in ops:
        if op.kind == "create":
            transaction.create(op.path, op.data, acl=acl, ephemeral=op.ephemeral)
        elif op.kind == "set":
            transaction.set_data(op.path, op.data, op.version)
        elif op.kind == "delete":
            transaction.delete(op.path, op.version)
        else:
            transaction.check(op.path, op.version)


def rejection(ops: Sequence[Op], results: list[Any], what: str) -> Exception | None:
    """The error of a refused transaction (None if it was applied): the operation that failed
    first for a reason of its own (not merely rolled back), as :class:`TransactionRejected` (or
    :class:`PermissionDenied`)."""
    failures = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
    if not failures:
        return None
    index, error = next(
        ((i, r) for i, r in failures if not isinstance(r, RolledBackError | RuntimeInconsistency)),
        failures[0],
    )
    op = ops[index]
    if isinstance(error, NoAuthError):
        return PermissionDenied(
            op.path,
            f"{what}: permission denied (NoAuth) on {op.kind}; the job is "
            "protected by an ACL and this client has no or other credentials",
        )
    return TransactionRejected(
        op.path,
        f"{what}: {op.kind} failed with {type(error).__name__}; nothing was applied",
        index=index,
        error=error,
    )


def batches(
    ops: Sequence[Op], *, budget: int, reserved: int, size: Callable[[Op], int]
) -> Iterator[list[Op]]:
    """``ops`` cut, in order, into batches whose ``size`` adds up to at most ``budget`` bytes
    with ``reserved`` bytes taken (guards); a batch holds at least one operation."""
    batch: list[Op] = []
    used = reserved
    for op in ops:
        op_size = size(op)
        if batch and used + op_size > budget:
            yield batch
            batch, used = [], reserved
        batch.append(op)
        used += op_size
    if batch:
        yield batch
