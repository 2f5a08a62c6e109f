"""The member group's following actions (a mixin of
:class:`~coordinator.member.group.MemberGroup`): watch the version, read a version's manifest and
a member's container, join a barrier and watch its decision.

The group keeps one version watch and one barrier watch per version for all its members, and
reads each manifest once per version, decoding only its head unless a member reads its container
(:mod:`metadata.zk.recipe.manifests`). A member that joins a barrier the group does not watch yet
joins and reads the barrier's state in one round trip (:meth:`Barriers.join_and_watch`); the
watch ends once the barrier is decided, so neither the decision nor the barrier's later removal
by retention costs another read.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import KazooException

from coordinator.protocol.member_events import (
    BarrierDecided,
    ContainerRead,
    FetchLatestVersion,
    JoinBarrier,
    ManifestMissing,
    ManifestRead,
    MemberEvent,
    ReadContainer,
    ReadManifest,
    StoreFailed,
    VersionAnnounced,
    WatchBarrier,
    WatchVersions,
)
from metadata.errors import MetadataError
from metadata.model import BarrierState
from metadata.zk import NotFound, Watch, ZkMetadataStore
from metadata.zk.handler import inline
from metadata.zk.recipe.manifests import ManifestHead

__all__ = ["FollowActions", "JoinAndWatch", "Watches"]


@dataclass
class Watches:
    """The group's watches (one per version for all its members) and what they saw."""

    version: Watch | None = None
    barriers: dict[int, Watch] = field(default_factory=dict)
    barrier_states: dict[int, BarrierState | None] = field(default_factory=dict)  # last seen
    manifests: dict[int, ManifestHead] = field(default_factory=dict)  # (decoded on demand)
    announced: int | None = None  # the newest version the watch announced


@dataclass(frozen=True)
class JoinAndWatch:
    """A :class:`JoinBarrier` the machine asked for together with the :class:`WatchBarrier` of
    the same version (the adapter carries them out in one round trip; not a machine action)."""

    join: JoinBarrier
    watch: WatchBarrier


class FollowActions:
    """Carries out :class:`WatchVersions`, :class:`FetchLatestVersion`, :class:`ReadManifest`,
    :class:`ReadContainer`, :class:`JoinBarrier` and :class:`WatchBarrier`."""

    store: ZkMetadataStore
    log: Any
    _watches: Watches
    _events: queue.SimpleQueue[Any]
    _deliver: Callable[[str | None, MemberEvent], None]  # (MemberGroup's)

    def _watch_versions(self, member: Any, _action: WatchVersions) -> list[MemberEvent]:
        if self._watches.version is None:
            self.store.sync()  # the watch's first read must not come from a lagging server
            version = self._read_version_watched()
            self._events.put((None, VersionAnnounced(version)))  # for every member
            return []
        return self._fetch_latest_version(member, FetchLatestVersion())

    def _fetch_latest_version(self, _m: Any, _a: FetchLatestVersion) -> list[MemberEvent]:
        self.store.sync()  # not an old version from a lagging follower (SAMZA-2301)
        if self._watches.version is None:  # (lost with a failed re-read: watch again)
            return [VersionAnnounced(self._read_version_watched())]
        return [VersionAnnounced(self.store.job_models.latest_version())]

    def _read_version_watched(self) -> int | None:
        """The latest version, leaving a one-shot watch on the version pointer whose event goes
        from kazoo's connection thread straight to the group's queue; the group's thread then
        reads the pointer again (:meth:`_version_changed`), re-arming the watch."""
        watch = Watch(self.log, "jobModelVersion", "")
        self._watches.version = watch

        @inline
        def changed(_event: Any) -> None:
            if not watch.stopped:
                self._events.put(lambda: self._version_changed(watch))

        known = self._watches.announced
        guess = None if known is None else known + 1  # the next one: read its manifest too
        latest = self.store.job_models.latest_version(watch=changed, guess=guess)
        if latest is not None:
            self._watches.announced = max(latest, known or latest)
        return latest

    def _version_changed(self, watch: Watch) -> None:
        """(The group's thread) the version pointer changed: announce it to every member."""
        if watch.stopped or self._watches.version is not watch:
            return  # the session ended meanwhile (the watches were dropped)
        try:
            event: MemberEvent = VersionAnnounced(self._read_version_watched())
        except (MetadataError, KazooException) as exc:
            self.log.warning("member.version_reread_failed", error=repr(exc))
            self._watches.version = None  # the next FetchLatestVersion watches again
            event = StoreFailed(repr(exc))
        self._deliver(None, event)

    def _read_manifest(self, _member: Any, action: ReadManifest) -> list[MemberEvent]:
        version = action.version
        manifest = self._watches.manifests.get(version)
        if manifest is None:
            try:
                manifest = self.store.job_models.read_manifest_head(version)
            except NotFound:
                return [ManifestMissing(version)]
            self._watches.manifests = {version: manifest}  # only the newest is worth keeping
        gaining = None if manifest.gaining is None else frozenset(manifest.gaining)
        return [ManifestRead(version, manifest.base, frozenset(manifest.losing), gaining)]

    def _read_container(self, member: Any, action: ReadContainer) -> list[MemberEvent]:
        version = action.version
        head = self._watches.manifests.get(version)
        container = self.store.job_models.read_container(
            version, member.machine.processor_id, manifest=None if head is None else head.manifest()
        )
        if container is None:
            member.log.info("processor.not_in_model", version=version)
            return [ContainerRead(version, None)]
        return [ContainerRead(version, container.tasks, container.standby_tasks)]

    def _join_barrier(self, member: Any, action: JoinBarrier) -> list[MemberEvent]:
        self.store.barriers.join(action.version, member.machine.processor_id)
        member.log.info("processor.joined_barrier", version=action.version, early=action.early)
        return []

    def _join_and_watch(self, member: Any, action: JoinAndWatch) -> list[MemberEvent]:
        """Join and watch in one round trip, unless the group watches the barrier already."""
        version = action.join.version
        if self._watching(version):
            return self._join_barrier(member, action.join) + self._watch_barrier(
                member, action.watch
            )
        watch = self.store.barriers.join_and_watch(
            version,
            member.machine.processor_id,
            self._on_barrier_state(version),
            self._on_barrier_error(version),
            hand_off=self._events.put,
        )
        member.log.info("processor.joined_barrier", version=version, early=action.join.early)
        self._keep_barrier_watch(version, watch)
        return []

    def _watch_barrier(self, _member: Any, action: WatchBarrier) -> list[MemberEvent]:
        """Watch barrier ``v`` (one watch for the group). A member that asks again for a watch
        the group holds (it resynced in the same session) hears the state last seen at once:
        the watch fires only on changes, and a decision it already delivered would never come
        again."""
        version = action.version
        if self._watching(version):
            seen = self._watches.barrier_states.get(version)
            return [] if seen is None else [BarrierDecided(version, seen)]
        watch = self.store.barriers.watch_decision(
            version,
            self._on_barrier_state(version),
            self._on_barrier_error(version),
            hand_off=self._events.put,
        )
        self._keep_barrier_watch(version, watch)
        return []

    def _watching(self, version: int) -> bool:
        """The group holds a watch of barrier ``version`` that still says something: a live
        one, or one that ended with the decision (not one that ended on a failure or a gone
        barrier: then a member asking again reads again)."""
        watch = self._watches.barriers.get(version)
        if watch is None:
            return False
        return not watch.stopped or self._watches.barrier_states.get(version) is not None

    def _on_barrier_state(self, version: int) -> Any:
        states = self._watches.barrier_states

        def on_state(state: BarrierState | None) -> None:
            states[version] = state
            self._events.put((None, BarrierDecided(version, state)))

        return on_state

    def _on_barrier_error(self, version: int) -> Any:
        """A decision watch could not read the state again: every member resyncs (rule 6)."""
        states = self._watches.barrier_states

        def on_error(exc: Exception) -> None:
            states[version] = None  # (a member asking again reads again)
            self._events.put((None, StoreFailed(repr(exc))))

        return on_error

    def _keep_barrier_watch(self, version: int, watch: Watch) -> None:
        watches = self._watches
        previous = watches.barriers.pop(version, None)
        if previous is not None:
            previous.stop()
        watches.barriers[version] = watch
        for old in [v for v in watches.barriers if v < version]:
            watches.barriers.pop(old).stop()
            watches.barrier_states.pop(old, None)
