"""The member machine's rules for following job models (steps 2 to 5b of the theory of operation
in :mod:`coordinator.protocol.member`): a mixin of
:class:`~coordinator.protocol.member.MemberMachine`, pure like it. A version announced, its
manifest (an early join, or nothing to read), its container (stop what it loses, join), its
barrier's decision (start the new tasks and standbys on DONE, write their locality)."""

from __future__ import annotations

from coordinator.protocol.member_events import (
    BarrierDecided,
    ContainerRead,
    JoinBarrier,
    ManifestMissing,
    ManifestRead,
    MemberAction,
    MemberState,
    ReadContainer,
    ReadManifest,
    StartStandbys,
    StartTasks,
    StopStandbys,
    StopTasks,
    VersionAnnounced,
    WatchBarrier,
    WriteLocality,
)
from coordinator.protocol.rules import container_unchanged, keeps_everything, tasks_changed
from metadata.model import BarrierState, TaskModel

__all__ = ["UNEXPECTED_LOSS", "MemberFollowing"]

#: The reason of a stop the manifest said would not happen (an early join that loses a task).
UNEXPECTED_LOSS = "moved, though the manifest said it keeps every task"

S = MemberState


class MemberFollowing:
    """How a member follows the job models (its fields are the machine's)."""

    processor_id: str
    state: MemberState
    running: dict[str, TaskModel]
    running_version: int | None
    seen_version: int
    reading: int | None
    joined_early: bool
    target: dict[str, TaskModel]
    target_version: int | None
    standbys: dict[str, TaskModel]
    standby_version: int | None
    target_standbys: dict[str, TaskModel]
    whole: bool
    locate_all: bool

    def _version(self, event: VersionAnnounced) -> list[MemberAction]:
        version = event.version
        if version is None or version <= self.seen_version:
            return []
        self.seen_version = version
        self.reading, self.joined_early = version, False
        self.target, self.target_version, self.target_standbys = {}, None, {}
        self.state = S.READING
        return [ReadManifest(version)]

    def _manifest(self, event: ManifestRead) -> list[MemberAction]:
        if event.version != self.reading:
            return []
        early = bool(self.running) and keeps_everything(
            self.processor_id, self.running_version, event.base, event.losing
        )
        self.joined_early = early
        join: list[MemberAction] = [JoinBarrier(event.version, early=True)] if early else []
        if (
            early
            and self.whole
            and container_unchanged(
                self.processor_id, self.running_version, event.base, event.losing, event.gaining
            )
        ):  # 3b: the container of ``v`` is the one it runs
            self.reading = None
            self.target, self.target_version = dict(self.running), event.version
            self.target_standbys = dict(self.standbys)  # (gaining names standby changes too)
            self.state = S.JOINED
            return [*join, WatchBarrier(event.version)]
        return [*join, ReadContainer(event.version)]

    def _manifest_missing(self, event: ManifestMissing) -> list[MemberAction]:
        if event.version == self.reading:
            self.reading = None
            self.state = S.FOLLOWING  # superseded and removed: a newer announcement follows
        return []

    def _container(self, event: ContainerRead) -> list[MemberAction]:
        if event.version != self.reading:
            return []
        version, early = event.version, self.joined_early
        self.reading = None
        mine = dict(event.tasks) if event.tasks is not None else {}
        leaving = tasks_changed(self.running, mine)
        actions: list[MemberAction] = []
        if leaving:
            reason = UNEXPECTED_LOSS if early else "moved"
            actions.append(StopTasks(self.running_version, leaving, reason))
            for name in leaving:
                del self.running[name]
            self.whole = False
        if event.tasks is None:
            self.state = S.FOLLOWING
            return actions + self._stop_standbys(self.standbys, "not in the model")
        self.target, self.target_version = mine, version
        self.target_standbys = dict(event.standbys)
        if not early:
            actions.append(JoinBarrier(version, early=False))
        self.state = S.JOINED
        return [*actions, WatchBarrier(version)]

    def _barrier(self, event: BarrierDecided) -> list[MemberAction]:
        if event.version != self.target_version or event.state not in (
            BarrierState.DONE,
            BarrierState.TIMED_OUT,
        ):
            return []
        mine, version, standbys = self.target, event.version, self.target_standbys
        self.target, self.target_version, self.target_standbys = {}, None, {}
        self.state = S.FOLLOWING
        if event.state != BarrierState.DONE:
            return []  # TIMED_OUT: start nothing, the leader generates again at once
        arriving = tasks_changed(mine, self.running)  # in ``mine``, new or changed
        self.running, self.running_version, self.whole = dict(mine), version, True
        located = tuple(mine) if self.locate_all else tuple(arriving)
        self.locate_all = False
        actions = self._stop_standbys(tasks_changed(self.standbys, standbys), "dropped")
        new_standbys = tasks_changed(standbys, self.standbys)
        self.standbys, self.standby_version = dict(standbys), version
        actions.append(StartTasks(version, arriving, dict(mine)))
        if located:
            actions.append(WriteLocality(version, located))
        return actions + ([StartStandbys(version, new_standbys)] if new_standbys else [])

    def _stop_standbys(self, tasks: dict[str, TaskModel], reason: str) -> list[MemberAction]:
        """Stop keeping ``tasks`` (some of :attr:`standbys`) warm."""
        if not tasks:
            return []
        stopping = StopStandbys(self.standby_version, dict(tasks), reason)
        self.standbys = {n: t for n, t in self.standbys.items() if n not in tasks}
        return [stopping]
