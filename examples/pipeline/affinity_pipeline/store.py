"""A task's state: a local store on the executor's machine, and durable checkpoints.

Layout (all JSON, each file replaced atomically by write-to-temp + rename)::

    <local_store_dir>/<location>/<task>/state.json      the local store (one per machine)
    <checkpoint_dir>/<task>/<batch:08d>.json              checkpoints of the last two batches
    <checkpoint_dir>/<task>/<batch:08d>.delta.json        deltas of the last two batches

``<location>`` is the executor's location id (its host by default), url-quoted, so executors on
different (loopback) hosts of one machine have separate local stores, as on separate machines:
a task that runs on another host does not see the state.

Processing batch ``b`` starts from the state after batch ``b - 1`` (the *base*):

- **warm**: the local store holds the state after ``b - 1`` (its batch number is the base):
  it is used as is, nothing is read from the checkpoints;
- **cold**: otherwise the checkpoint of ``b - 1`` is read (its size counts as bytes restored);
- **new**: ``b == 0``, there is no state yet.

Then the new state is checkpointed as batch ``b`` (before the local store is updated, so a
local store never runs ahead of the checkpoints), and checkpoints older than ``b - 1`` are
deleted (``b - 1`` stays: a retry of batch ``b`` needs it).

Each checkpoint of batch ``b`` also writes a **delta** (:class:`Delta`): only the keys batch
``b`` changed (and removed) against the state after ``b - 1``. Applied to a copy at ``b - 1``
it gives exactly the state at ``b`` (:func:`apply_delta`); standby copies
(:mod:`affinity_pipeline.standby`) are kept warm that way. Full checkpoints stay: cold restores
and copies more than one batch behind read them.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

__all__ = ["Delta", "LoadedState", "Status", "TaskStore", "apply_delta", "make_delta"]

Status = Literal["warm", "cold", "new"]


@dataclass(frozen=True)
class LoadedState:
    state: dict[str, list[int]]
    status: Status
    bytes_restored: int


@dataclass(frozen=True)
class Delta:
    """What batch ``batch`` changed: ``changed`` keys with their new value, ``removed`` keys."""

    batch: int
    changed: dict[str, list[int]]
    removed: tuple[str, ...] = ()


def make_delta(batch: int, before: dict[str, list[int]], after: dict[str, list[int]]) -> Delta:
    """The delta that turns ``before`` (the state after ``batch - 1``) into ``after``."""
    changed = {k: list(v) for k, v in after.items() if before.get(k) != v}
    removed = tuple(sorted(k for k in before if k not in after))
    return Delta(batch, changed, removed)


def apply_delta(state: dict[str, list[int]], delta: Delta) -> dict[str, list[int]]:
    """``state`` (after ``delta.batch - 1``) with ``delta`` applied, in place; returned."""
    for key in delta.removed:
        state.pop(key, None)
    for key, value in delta.changed.items():
        state[key] = list(value)
    return state


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _encode(task: str, batch: int, state: dict[str, list[int]]) -> bytes:
    document = {"task": task, "batch": batch, "state": state}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


class TaskStore:
    """One task's local store (at ``location``) and checkpoints."""

    def __init__(
        self, task: str, *, local_store_dir: str | Path, checkpoint_dir: str | Path, location: str
    ) -> None:
        self.task = task
        safe_task = quote(task, safe="")
        self.local_path = (
            Path(local_store_dir) / quote(location, safe="") / safe_task / "state.json"
        )
        self.checkpoint_folder = Path(checkpoint_dir) / safe_task

    def checkpoint_path(self, batch: int) -> Path:
        return self.checkpoint_folder / f"{batch:08d}.json"

    def delta_path(self, batch: int) -> Path:
        return self.checkpoint_folder / f"{batch:08d}.delta.json"

    def _local_batch_and_state(self) -> tuple[int, dict[str, list[int]]] | None:
        try:
            document = json.loads(self.local_path.read_bytes())
        except (OSError, ValueError):
            return None
        if document.get("task") != self.task:
            return None
        return int(document["batch"]), document["state"]

    def local_batch(self) -> int | None:
        """The batch number of the local store, or None if there is none."""
        found = self._local_batch_and_state()
        return None if found is None else found[0]

    def load(self, base: int) -> LoadedState:
        """The state after batch ``base`` (-1: the empty state), warm or cold (see above)."""
        if base < 0:
            return LoadedState({}, "new", 0)
        local = self._local_batch_and_state()
        if local is not None and local[0] == base:
            return LoadedState(local[1], "warm", 0)
        state, size = self.read_checkpoint(base)  # a missing checkpoint is an error
        return LoadedState(state, "cold", size)

    def save(
        self, batch: int, state: dict[str, list[int]], before: dict[str, list[int]] | None = None
    ) -> int:
        """Checkpoint ``state`` as batch ``batch`` and, with ``before`` (the state after
        ``batch - 1``), its delta; then update the local store; returns the checkpoint's size in
        bytes."""
        data = _encode(self.task, batch, state)
        if before is not None:
            delta = make_delta(batch, before, state)
            document = {"task": self.task, "batch": batch, "changed": delta.changed}
            document["removed"] = list(delta.removed)
            encoded = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
            _atomic_write(self.delta_path(batch), encoded)
        _atomic_write(self.checkpoint_path(batch), data)
        _atomic_write(self.local_path, data)
        for old in self.checkpoint_folder.glob("*.json"):
            stem = old.name.split(".", 1)[0]
            if stem.isdigit() and int(stem) < batch - 1:
                old.unlink(missing_ok=True)
        return len(data)

    def read_delta(self, batch: int) -> tuple[Delta, int] | None:
        """The delta of ``batch`` and its size in bytes, or None when there is none."""
        try:
            data = self.delta_path(batch).read_bytes()
        except FileNotFoundError:
            return None
        document = json.loads(data)
        if document.get("task") != self.task or document.get("batch") != batch:
            raise ValueError(f"delta {self.delta_path(batch)} is not {self.task}@{batch}")
        return Delta(batch, document["changed"], tuple(document["removed"])), len(data)

    def read_checkpoint(self, batch: int) -> tuple[dict[str, list[int]], int]:
        """The checkpointed state of ``batch`` and its size in bytes (missing: an error)."""
        data = self.checkpoint_path(batch).read_bytes()
        document = json.loads(data)
        if document.get("task") != self.task or document.get("batch") != batch:
            raise ValueError(f"checkpoint {self.checkpoint_path(batch)} is not {self.task}@{batch}")
        return document["state"], len(data)

    def local_state(self) -> tuple[int, dict[str, list[int]]] | None:
        """The local store's (batch, state), or None when there is none."""
        return self._local_batch_and_state()

    def write_local(self, batch: int, state: dict[str, list[int]]) -> None:
        """Replace the local store with ``state`` as of ``batch`` (a standby copy's update)."""
        _atomic_write(self.local_path, _encode(self.task, batch, state))

    def latest_checkpoint(self) -> int | None:
        """The newest checkpointed batch of this task, or None."""
        names = (p.name.split(".", 1)[0] for p in self.checkpoint_folder.glob("*.json"))
        batches = [int(n) for n in names if n.isdigit()]
        return max(batches) if batches else None
