"""The leader's side of the rebalance history: assembles one entry per decided version from what
the leader machine said (the trigger and phase times on ``PublishJobModel``, the outcome on
``MarkBarrier``) and what the adapter measured (the publish), and writes it, fenced by the
leader's epoch, into ``store.history`` (:mod:`metadata.zk.recipe.history`).

The history is a record, not a decision: a failed write is logged and the rebalance goes on; only
:class:`~metadata.zk.FencedOut` (this leader was deposed) propagates, as for every leader write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.protocol.leader_events import MarkBarrier, PublishJobModel
from coordinator.protocol.leader_trigger import Trigger
from metadata.errors import MetadataError
from metadata.zk import FencedOut, LeaderEpoch
from metadata.zk.recipe.history import RebalanceEntry, RebalanceHistory

__all__ = ["RebalanceRecorder"]


@dataclass(frozen=True)
class _Published:
    action: PublishJobModel
    at: float  # wall clock, UNIX seconds
    publish_s: float


class RebalanceRecorder:
    """Remembers each published version until its barrier is decided, then records it.

    Usage (in the adapter)::

        recorder = RebalanceRecorder(store.history, keep=50, leader="replica-a")
        recorder.published(publish_action, publish_s=0.02)     # after the fenced publish
        recorder.decided(mark_action, epoch=epoch, log=log)    # after the fenced MarkBarrier
    """

    def __init__(
        self,
        history: RebalanceHistory,
        *,
        keep: int,
        leader: str,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.history = history
        self.keep = keep
        self.leader = leader
        self.wall = wall
        self._published: dict[int, _Published] = {}

    def published(self, action: PublishJobModel, publish_s: float) -> None:
        self._published[action.model.version] = _Published(action, self.wall(), publish_s)

    def entry(self, action: MarkBarrier, epoch: int) -> RebalanceEntry:
        """The entry of the version ``action`` decides (a version published by an earlier leader
        and seen through by this one is ``inherited``: no trigger or phase known)."""
        now = self.wall()
        seen = self._published.pop(action.version, None)
        for version in [v for v in self._published if v < action.version]:
            del self._published[version]  # superseded, never decided by this leader
        phases: dict[str, float | None] = dict.fromkeys(("debounce", "grouper", "publish"))
        phases["barrier"] = round(action.duration_s, 4)
        if seen is None:
            return RebalanceEntry(
                action.version,
                str(action.state),
                str(Trigger.INHERITED),
                published_at=now - action.duration_s,
                decided_at=now,
                phases=phases,
                leader=self.leader,
                epoch=epoch,
            )
        published, cause = seen.action, seen.action.cause
        phases["publish"] = round(seen.publish_s, 4)
        if cause is not None:
            phases["debounce"] = round(cause.debounce_s, 4)
            phases["grouper"] = None if cause.grouper_s is None else round(cause.grouper_s, 4)
        return RebalanceEntry(
            action.version,
            str(action.state),
            str(cause.trigger if cause else Trigger.ASSIGNMENT_CHANGED),
            published_at=seen.at,
            decided_at=now,
            processors=len(published.participants),
            tasks=sum(len(c.tasks) for c in published.model.containers.values()),
            moved=published.moved,
            kept_local=published.locality_kept,
            with_locality=published.with_locality,
            phases=phases,
            leader=self.leader,
            epoch=epoch,
            note=cause.note if cause is not None else "",
        )

    def decided(self, action: MarkBarrier, *, epoch: LeaderEpoch, log: Any) -> None:
        """Record the decided version (best effort; FencedOut propagates)."""
        entry = self.entry(action, epoch.epoch)
        try:
            self.history.record(entry, epoch=epoch, keep=self.keep)
        except FencedOut:
            raise
        except MetadataError as exc:
            log.warning("coordinator.history_failed", version=action.version, error=str(exc))
