"""Rebalance history: ``history/rebalance-<version>``, the last N rebalances of a job.

One node per published version whose barrier was decided, holding JSON (format 1) of a
:class:`RebalanceEntry`: when, the trigger, the version, tasks moved and kept local, the time of
each phase, the outcome. The leader writes an entry once the version's barrier is decided, in a
transaction fenced by its epoch (a deposed leader's write fails whole with
:class:`~metadata.zk.errors.FencedOut`) that also deletes the oldest entries beyond ``keep``.
Readers accept unknown fields and missing optional ones.

The recipe stores and reads what it is given: the trigger, phases and outcome are decided by the
leader (``coordinator.protocol``); ``keep`` is the caller's (``coordinator.history``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from kazoo.exceptions import NodeExistsError

from metadata.errors import CorruptDataError
from metadata.zk.errors import TransactionRejected
from metadata.zk.layout import JobLayout
from metadata.zk.ops import Op, ZkOps
from metadata.zk.recipe.epoch import LeaderEpoch, LeaderEpochs

__all__ = ["ENTRY_PREFIX", "HISTORY_FORMAT", "PHASES", "RebalanceEntry", "RebalanceHistory"]

ENTRY_PREFIX = "rebalance-"
HISTORY_FORMAT = 1
#: The phases of a rebalance, in order; an entry maps each to seconds (None: not measured).
PHASES = ("debounce", "grouper", "publish", "barrier")


@dataclass(frozen=True, slots=True)
class RebalanceEntry:
    """One rebalance: ``version`` published at ``published_at`` and decided (``outcome``: DONE or
    TIMED_OUT) at ``decided_at`` (UNIX seconds), because of ``trigger``; ``moved`` tasks changed
    processor, ``kept_local`` of the ``with_locality`` tasks with a recorded location were placed
    there; ``phases`` maps each of :data:`PHASES` to seconds; ``leader`` and ``epoch`` wrote it;
    ``note`` says more about the trigger (empty: nothing to say)."""

    version: int
    outcome: str
    trigger: str
    published_at: float
    decided_at: float
    processors: int = 0
    tasks: int = 0
    moved: int = 0
    kept_local: int = 0
    with_locality: int = 0
    phases: Mapping[str, float | None] = field(default_factory=dict)
    leader: str = ""
    epoch: int = 0
    note: str = ""  # more about the trigger, in one line (e.g. what could not be read)

    def to_json(self) -> bytes:
        document = {"format": HISTORY_FORMAT, **asdict(self), "phases": dict(self.phases)}
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str) -> RebalanceEntry:
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                raise TypeError("not an object")
            known = {k: v for k, v in document.items() if k in cls.__dataclass_fields__}
            entry = cls(**known)
            if not isinstance(entry.version, int) or not isinstance(entry.phases, dict):
                raise TypeError("version or phases of the wrong type")
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
            raise CorruptDataError(path, f"rebalance history entry is unusable: {exc}") from None
        return entry


def _version_of(name: str) -> int | None:
    number = name.removeprefix(ENTRY_PREFIX)
    return int(number) if name.startswith(ENTRY_PREFIX) and number.isdigit() else None


class RebalanceHistory:
    """Writes (the leader, fenced) and reads the job's last rebalances.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        # the leader, once barrier 7 is decided
        entry = RebalanceEntry(7, "DONE", "processors gone", published_at=t0, decided_at=t1,
                               moved=3, phases={"debounce": 2.0, "barrier": 0.4})
        store.history.record(entry, epoch=epoch, keep=50)   # FencedOut if deposed
        store.history.read(limit=10)                        # the newest 10, oldest first

    """

    def __init__(self, ops: ZkOps, layout: JobLayout, epochs: LeaderEpochs) -> None:
        self._ops = ops
        self._layout = layout
        self._epochs = epochs

    @property
    def path(self) -> str:
        return self._layout.history

    def versions(self) -> list[int]:
        """The versions with an entry, sorted."""
        names = self._ops.children(self.path, "list rebalance history") or []
        return sorted(v for v in map(_version_of, names) if v is not None)

    def record(self, entry: RebalanceEntry, *, epoch: LeaderEpoch, keep: int) -> bool:
        """Write ``entry`` and delete the oldest entries so that ``keep`` remain, in one
        transaction fenced by ``epoch``. Returns False if the version already had an entry (an
        earlier attempt whose answer was lost): it is left as it is."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        what = f"record rebalance {entry.version}"
        older = [v for v in self.versions() if v != entry.version]
        ops = [Op("create", self._layout.history_entry(entry.version), entry.to_json())]
        excess = max(0, len(older) + 1 - keep)
        ops += [Op("delete", self._layout.history_entry(v)) for v in older[:excess]]
        try:
            self._epochs.fence(epoch).commit(ops, what)
        except TransactionRejected as exc:
            if isinstance(exc.error, NodeExistsError):
                return False
            raise
        self._ops.log.info("zk.rebalance_recorded", version=entry.version, pruned=excess)
        return True

    def read(self, limit: int | None = None) -> list[RebalanceEntry]:
        """The entries, oldest first (the newest ``limit`` of them if given)."""
        versions = self.versions()
        if limit is not None:
            versions = versions[-limit:] if limit > 0 else []
        paths = [self._layout.history_entry(v) for v in versions]
        found = self._ops.get_many(paths, "read rebalance history", self.path)
        entries = []
        for path in paths:
            got = found.get(path)
            if got is not None:  # pruned meanwhile
                entries.append(RebalanceEntry.from_json(got[0], path))
        return entries
