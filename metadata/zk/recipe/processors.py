"""Processor registrations: ephemeral sequential nodes ``processors/processor-<seq>``.

Each node holds JSON ``{"processor_id", "location_id", "host", "registration_id", ...extra}`` and
lives as long as the registering client's session. An optional ``"capacity"`` (an integer >= 1,
default 1: a Spark executor registers its cores) is how much work the processor takes; a
registration with another capacity is malformed (skipped, as below).

Two live registrations with one processor id (a restarted processor whose old session has not
expired yet, or a misconfiguration) are both reported by :meth:`ProcessorRegistry.read`: the
older one (lower sequence) wins, the newer ones are returned as duplicates. A member looks for an
older one right after registering (:meth:`ProcessorRegistry.older_than`) and, if one stays, gives
its registration up (the rule is the member machine's, :mod:`coordinator.protocol.member`).

Any client that may register can write a node there, so a registration that is not one
(``b'{not json'``, JSON without ``location_id``, a node name without a sequence) must not stop
the job, nor may a processor or location id that breaks :mod:`metadata.ids`' rule (control
characters, too long, too deep): :meth:`ProcessorRegistry.read` skips it, logs it once with its node
(``zk.bad_registration_skipped``) and lists it in :attr:`ProcessorRegistry.skipped` (the skipped
nodes of the last read: a gauge for the coordinator's metrics).

A registration whose answer was lost to a connection drop is looked up by its
``registration_id`` before trying again, so a retry never registers a processor twice.

A registration node is written once, when it is created, and never changed (a new session
registers a new node): a registry remembers the nodes it decoded and, on each read, lists the
children and reads only the new ones. So the coordinator's read after one processor's death is
one listing, not P node reads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from metadata.errors import CorruptDataError
from metadata.ids import (
    check_location_id,
    check_processor_id,
    location_id_problem,
    processor_id_problem,
)
from metadata.zk.errors import NotFound
from metadata.zk.layout import PROCESSOR_PREFIX, JobLayout, processor_sequence
from metadata.zk.ops import ZkOps
from metadata.zk.watch import Watch

__all__ = ["ProcessorRegistration", "ProcessorRegistry"]

_RESERVED = frozenset({"processor_id", "location_id", "host", "registration_id"})


@dataclass(frozen=True, slots=True)
class ProcessorRegistration:
    """One live processor registration (``node`` is its path, ``sequence`` its sequence number,
    ``owner`` the ZooKeeper session that holds it)."""

    processor_id: str
    location_id: str
    host: str
    node: str
    sequence: int
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    owner: int = field(default=0, compare=False)
    capacity: int = 1


def _capacity_problem(capacity: object) -> str | None:
    """Why ``capacity`` is not a capacity (an integer >= 1), or None."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        return f"capacity should be an integer >= 1, got {capacity!r:.60}"
    return None


class ProcessorRegistry:
    """Registers processors and reads who is alive, and where.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        node = store.processors.register("p-1", "zone-a/node-1", host="node-1")
        live, duplicates = store.processors.read()
        store.processors.locality()                  # {"p-1": "zone-a/node-1", ...}
        store.processors.register("p-2", "zone-b/node-2", capacity=4)
        store.processors.members()                   # ({"p-1": ..., "p-2": ...}, {"p-2": 4})
        store.processors.skipped                     # malformed nodes the last read skipped
        watch = store.processors.watch(lambda children: print(children))
        store.processors.unregister(node)

    """

    def __init__(self, ops: ZkOps, layout: JobLayout) -> None:
        self._ops = ops
        self._layout = layout
        #: The malformed registrations (node paths) the last read skipped.
        self.skipped: tuple[str, ...] = ()
        self._known: dict[str, ProcessorRegistration | None] = {}  # node -> decoded (None: bad)

    def register(self, processor_id: str, location_id: str, host: str = "", **extra: Any) -> str:
        """Register a processor for the life of this client's session; returns the node path."""
        check_processor_id(processor_id)
        check_location_id(location_id)
        reserved = _RESERVED.intersection(extra)
        if reserved:
            raise ValueError(f"extra fields may not override {sorted(reserved)}")
        problem = _capacity_problem(extra.get("capacity", 1))
        if problem is not None:
            raise ValueError(problem)
        registration_id = uuid.uuid4().hex
        document = {
            **extra,
            "processor_id": processor_id,
            "location_id": location_id,
            "host": host,
            "registration_id": registration_id,
        }
        data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        node = self._ops.create(
            self._layout.processor_prefix,
            data,
            what="register processor",
            ephemeral=True,
            sequence=True,
            recover=lambda: self._find(registration_id),
        )
        self._ops.log.info(
            "zk.processor_registered", processor_id=processor_id, location_id=location_id, node=node
        )
        return node

    def _find(self, registration_id: str) -> str | None:
        """The node of our own earlier attempt (same registration id, our session), if any.

        Runs inside the retry loop of :meth:`register` (kazoo errors are mapped there).
        """
        client = self._ops.client
        session = client.client_id
        for name in client.get_children(self._layout.processors):
            path = f"{self._layout.processors}/{name}"
            try:
                data, stat = client.get(path)
            except NoNodeError:
                continue  # another processor's node expired meanwhile
            if session and stat.ephemeralOwner == session[0] and registration_id.encode() in data:
                return path
        return None

    def unregister(self, node: str) -> None:
        """Remove a registration (no error if it is already gone)."""
        if not node.startswith(self._layout.processor_prefix):
            raise ValueError(f"{node!r} is not a processor registration of this job")
        self._ops.delete(node, what="unregister processor")
        self._ops.log.info("zk.processor_unregistered", node=node)

    def read(self) -> tuple[list[ProcessorRegistration], list[ProcessorRegistration]]:
        """(live registrations, one per processor id, sorted by sequence; losing duplicates)."""
        registrations = self._read_all()
        winners: dict[str, ProcessorRegistration] = {}
        duplicates = []
        for registration in registrations:
            if registration.processor_id in winners:
                duplicates.append(registration)
            else:
                winners[registration.processor_id] = registration
        if duplicates:
            self._ops.log.warning(
                "zk.duplicate_processors",
                duplicates=[(d.processor_id, d.node) for d in duplicates],
            )
        return list(winners.values()), duplicates

    def older_than(self, node: str, processor_id: str) -> ProcessorRegistration | None:
        """The oldest live registration of ``processor_id`` older than ``node`` (a lower
        sequence) held by another session than this client's, or None."""
        sequence = processor_sequence(node.rsplit("/", 1)[-1])
        session = self._ops.client.client_id
        own = session[0] if session else None
        for registration in self._read_all():
            if sequence is not None and registration.sequence >= sequence:
                break
            if registration.processor_id == processor_id and registration.owner != own:
                return registration
        return None

    def _read_all(self) -> list[ProcessorRegistration]:
        """Every live registration, sorted by sequence (only nodes new since the last read are
        read: a registration never changes)."""
        names = self._ops.children(self._layout.processors, "list processors") or []
        paths = [f"{self._layout.processors}/{name}" for name in names]
        known = {path: self._known[path] for path in paths if path in self._known}
        new = [(name, path) for name, path in zip(names, paths, strict=True) if path not in known]
        found = self._ops.get_many([p for _, p in new], "read processors", self._layout.processors)
        for name, path in new:
            entry = found.get(path)
            if entry is not None:  # (else it expired between listing and reading)
                known[path] = self._decoded(name, path, entry)
        self._known = known
        self.skipped = tuple(sorted(path for path, r in known.items() if r is None))
        registrations = [r for r in known.values() if r is not None]
        registrations.sort(key=lambda r: r.sequence)
        return registrations

    def _decoded(
        self, name: str, path: str, entry: tuple[bytes, Any]
    ) -> ProcessorRegistration | None:
        try:
            registration = self._decode(name, path, entry[0])
        except CorruptDataError as exc:  # logged once: the node is remembered as bad
            self._ops.log.error("zk.bad_registration_skipped", node=path, problem=exc.problem)
            return None
        return replace(registration, owner=entry[1].ephemeralOwner)

    def locality(self) -> dict[str, str]:
        """Live processor id -> location id."""
        winners, _ = self.read()
        return {r.processor_id: r.location_id for r in winners}

    def members(self) -> tuple[dict[str, str], dict[str, int]]:
        """(live processor id -> location id, live processor id -> capacity), one read."""
        winners, _ = self.read()
        return (
            {r.processor_id: r.location_id for r in winners},
            {r.processor_id: r.capacity for r in winners},
        )

    def _decode(self, name: str, path: str, data: bytes) -> ProcessorRegistration:
        sequence = processor_sequence(name)
        if sequence is None:
            raise CorruptDataError(path, f"not a {PROCESSOR_PREFIX}<sequence> node")
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptDataError(
                path, f"processor registration is not valid JSON: {exc}"
            ) from None
        if not isinstance(document, dict):
            raise CorruptDataError(path, "processor registration is not a JSON object")
        processor_id = document.get("processor_id")
        location_id = document.get("location_id")
        host = document.get("host", "")
        problem = processor_id_problem(processor_id) or location_id_problem(location_id)
        if problem is not None:
            raise CorruptDataError(path, problem)
        if not isinstance(host, str):
            raise CorruptDataError(path, f"host should be a string, got {host!r:.60}")
        capacity = document.get("capacity", 1)
        problem = _capacity_problem(capacity)
        if problem is not None:
            raise CorruptDataError(path, problem)
        assert isinstance(processor_id, str) and isinstance(location_id, str)
        return ProcessorRegistration(
            processor_id, location_id, host, path, sequence, document, capacity=capacity
        )

    def watch(self, callback: Callable[[list[str]], None]) -> Watch:
        """Call ``callback(children)`` now and on every change of ``processors/``."""
        if self._ops.exists(self._layout.processors, "watch processors") is None:
            raise NotFound(self._layout.processors, "the job folder is not set up (ensure_layout)")
        watch = Watch(self._ops.log, "processors", self._layout.processors)

        def on_children(children: list[str]) -> bool:
            return watch.deliver(callback, sorted(children))

        self._ops.call(
            "watch processors",
            self._layout.processors,
            lambda: ChildrenWatch(self._ops.client, self._layout.processors, on_children),
        )
        return watch
