"""Version barriers: ``barriers/barrier_<v>`` (ZkBarrierForVersionUpgrade of the source design).

The leader creates barrier v in the same transaction that publishes job model v
(:meth:`Barriers.create_ops`): the barrier node holds ``{"version", "expected": [processor ids]}``,
``state`` holds ``NEW`` and ``participants/`` is empty. Each processor of v joins with an ephemeral
``participants/<processor id, url-encoded>`` (so a processor that dies leaves the barrier). The
leader watches the participants and marks the barrier ``DONE`` when every expected processor has
joined, or ``TIMED_OUT``; a decided barrier stays decided. Marking is a leader write, fenced by
the leader epoch.

States are :class:`~metadata.model.BarrierState` members; a state node holding anything else is
:class:`~metadata.errors.CorruptDataError` naming it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import DataWatch

from metadata.errors import CorruptDataError
from metadata.model import BarrierState
from metadata.zk.errors import (
    NodeExists,
    NotFound,
    TransactionRejected,
    WriteConflict,
)
from metadata.zk.layout import BARRIER_PREFIX, JobLayout, decode_name, encode_name, parse_int_name
from metadata.zk.ops import Op, ZkOps
from metadata.zk.recipe.decision import DecisionWatch, HandOff
from metadata.zk.recipe.epoch import LeaderEpoch, LeaderEpochs
from metadata.zk.watch import CoalescedChildrenWatch, Watch

__all__ = ["Barriers"]

_DECIDED = (BarrierState.DONE, BarrierState.TIMED_OUT)


@dataclass
class _Seen:
    """What a barrier watch has seen so far (both kazoo watches update it)."""

    state: BarrierState | None = None
    existed: bool = False
    participants: frozenset[str] = frozenset()
    lock: threading.Lock = field(default_factory=threading.Lock)


class Barriers:
    """Creates, joins, watches and decides the version barriers of one job.

    Example, with a :class:`~metadata.zk.ZkMetadataStore` ``store``::

        # a processor named in job model 7
        store.barriers.join(7, "p-1")
        watch = store.barriers.watch_state(7, lambda state: print(state))  # NEW, then DONE

        # the leader, once every expected processor joined
        if store.barriers.participants(7) >= store.barriers.expected(7):
            store.barriers.set_state(7, BarrierState.DONE, epoch=epoch)

    """

    def __init__(
        self, ops: ZkOps, layout: JobLayout, epochs: LeaderEpochs, *, coalesce_s: float = 0.005
    ) -> None:
        self._ops = ops
        self._layout = layout
        self._epochs = epochs
        self._coalesce_s = coalesce_s

    def create_ops(self, version: int, participants: Collection[str]) -> list[Op]:
        """The operations creating barrier ``version``: state NEW, expecting ``participants``."""
        expected = sorted(set(participants))
        for pid in expected:
            encode_name(pid)  # raises on an empty id
        document = {"version": version, "expected": expected}
        data = json.dumps(document, separators=(",", ":")).encode()
        return [
            Op("create", self._layout.barrier(version), data),
            Op("create", self._layout.barrier_state(version), BarrierState.NEW.encode()),
            Op("create", self._layout.barrier_participants(version), b""),
        ]

    def join(self, version: int, processor_id: str) -> None:
        """Join barrier ``version`` as ``processor_id`` (ephemeral: leaving = the session ending).

        Joining twice from one session is a no-op; a processor id already joined by another live
        session raises :class:`WriteConflict`; a missing barrier raises :class:`NotFound`.
        """
        path = self._layout.barrier_participant(version, processor_id)
        try:
            self._ops.create(path, b"", what="join barrier", ephemeral=True)
        except NotFound:
            raise NotFound(
                self._layout.barrier(version), f"barrier {version} does not exist"
            ) from None
        except NodeExists:
            self._joined_before(path, version, processor_id)
            return
        self._ops.log.info("zk.barrier_joined", version=version, processor_id=processor_id)

    def _joined_before(self, path: str, version: int, processor_id: str) -> None:
        """``path`` (the participant node) existed when joining: fine if it is this session's,
        :class:`WriteConflict` if another live session's."""
        stat = self._ops.exists(path, "check barrier participant")
        session = self._ops.client.client_id
        if stat is not None and session and stat.ephemeralOwner == session[0]:
            return
        if stat is None:  # the other session just ended: try once more
            self._ops.create(path, b"", what="join barrier", ephemeral=True)
            return
        raise WriteConflict(
            path, f"{processor_id!r} already joined barrier {version} from another session"
        )

    def state(self, version: int) -> BarrierState | None:
        """NEW, DONE or TIMED_OUT; None if barrier ``version`` does not exist."""
        found = self._ops.get(self._layout.barrier_state(version), "read barrier state")
        return None if found is None else self._decode_state(version, found[0])

    def _decode_state(self, version: int, data: bytes) -> BarrierState:
        text = data.decode("utf-8", errors="replace")
        try:
            return BarrierState(text)
        except ValueError:
            raise CorruptDataError(
                self._layout.barrier_state(version),
                f"barrier state should be one of {sorted(s.value for s in BarrierState)}, "
                f"got {text[:40]!r}",
            ) from None

    def participants(self, version: int) -> set[str]:
        """The processor ids that joined barrier ``version`` (NotFound if it does not exist)."""
        path = self._layout.barrier_participants(version)
        names = self._ops.children(path, "read barrier participants")
        if names is None:
            raise NotFound(self._layout.barrier(version), f"barrier {version} does not exist")
        return {decode_name(name, f"{path}/{name}") for name in names}

    def expected(self, version: int) -> set[str]:
        """The processor ids barrier ``version`` waits for (NotFound if it does not exist)."""
        path = self._layout.barrier(version)
        found = self._ops.get(path, "read barrier")
        if found is None:
            raise NotFound(path, f"barrier {version} does not exist")
        try:
            document = json.loads(found[0])
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptDataError(path, f"barrier is not valid JSON: {exc}") from None
        expected = document.get("expected") if isinstance(document, dict) else None
        if not isinstance(expected, list) or not all(isinstance(p, str) for p in expected):
            raise CorruptDataError(path, "barrier has no list of expected processor ids")
        return set(expected)

    def set_state(self, version: int, state: BarrierState, *, epoch: LeaderEpoch) -> None:
        """Decide barrier ``version`` (DONE or TIMED_OUT), fenced by ``epoch``.

        Setting the state it already has is a no-op; changing a decided barrier raises
        :class:`WriteConflict`; a deposed leader gets :class:`FencedOut` and changes nothing.
        """
        if state not in _DECIDED:
            raise ValueError(f"a barrier can only be marked DONE or TIMED_OUT, not {str(state)!r}")
        state = BarrierState(state)
        what = f"mark barrier {version} {state}"
        path = self._layout.barrier_state(version)
        found = self._ops.get(path, "read barrier state")
        if found is None:
            raise NotFound(self._layout.barrier(version), f"barrier {version} does not exist")
        current = self._decode_state(version, found[0])
        if current == state:
            return
        if current != BarrierState.NEW:
            raise WriteConflict(
                path, f"barrier {version} is already {current}; cannot mark it {state}"
            )
        try:
            self._epochs.fence(epoch).commit(
                [Op("set", path, state.encode(), version=found[1].version)], what
            )
        except TransactionRejected:
            if self.state(version) == state:  # our own earlier attempt, its answer lost
                return
            raise WriteConflict(
                path, f"barrier {version} changed while marking it {state}"
            ) from None
        self._ops.log.info("zk.barrier_decided", version=version, state=state, epoch=epoch.epoch)

    def watch(
        self, version: int, callback: Callable[[BarrierState | None, set[str]], None]
    ) -> Watch:
        """Call ``callback(state, participants)`` now and whenever either changes.

        ``state`` is None once the barrier is gone (removed by retention); the watch then ends.
        Joins that come close together are reported together: after a change the participant
        list is read again ``coalesce_s`` later (5 ms), so P joins in a burst cost a few reads of
        the list rather than P (each of up to P names).
        """
        watch = Watch(self._ops.log, "barrier", self._layout.barrier(version))
        seen = _Seen()
        participants_path = self._layout.barrier_participants(version)

        def emit() -> bool:
            with seen.lock:
                state, joined = seen.state, set(seen.participants)
            return watch.deliver(callback, state, joined)

        def on_state(data: bytes | None, stat: ZnodeStat | None) -> bool:
            if data is None and stat is None:
                with seen.lock:
                    existed, seen.state = seen.existed, None
                keep = emit()
                return keep and not existed  # the barrier was removed: nothing more to see
            try:
                state = self._decode_state(version, data or b"")
            except CorruptDataError:
                self._ops.log.exception("zk.barrier_state_corrupt", version=version)
                return not watch.stopped
            with seen.lock:
                seen.state, seen.existed = state, True
            return emit()

        def on_participants(names: list[str]) -> bool:
            try:
                joined = {decode_name(n, f"{participants_path}/{n}") for n in names}
            except CorruptDataError:
                self._ops.log.exception("zk.barrier_participants_corrupt", version=version)
                return not watch.stopped
            with seen.lock:
                seen.participants = frozenset(joined)
            return emit()

        def start() -> None:
            DataWatch(self._ops.client, self._layout.barrier_state(version), on_state)
            CoalescedChildrenWatch(
                self._ops, participants_path, on_participants, self._coalesce_s
            ).fetch()

        self._ops.call("watch barrier", self._layout.barrier(version), start)
        return watch

    def watch_state(self, version: int, callback: Callable[[BarrierState | None], None]) -> Watch:
        """Call ``callback(state)`` now and whenever barrier ``version``'s state changes; None
        while it does not exist (or once removed by retention, which ends the watch).

        Processors use this rather than :meth:`watch`: it never reads the participant list, so
        one barrier costs each processor one read per state change instead of one per join.
        """
        path = self._layout.barrier_state(version)
        watch = Watch(self._ops.log, "barrier state", path)
        existed = False

        def on_state(data: bytes | None, stat: ZnodeStat | None) -> bool:
            nonlocal existed
            if data is None and stat is None:
                keep = watch.deliver(callback, None)
                return keep and not existed
            try:
                state = self._decode_state(version, data or b"")
            except CorruptDataError:
                self._ops.log.exception("zk.barrier_state_corrupt", version=version)
                return not watch.stopped
            existed = True
            return watch.deliver(callback, state)

        self._ops.call(
            "watch barrier state", path, lambda: DataWatch(self._ops.client, path, on_state)
        )
        return watch

    def join_and_watch(
        self,
        version: int,
        processor_id: str,
        callback: Callable[[BarrierState | None], None],
        on_error: Callable[[Exception], None],
        *,
        hand_off: HandOff | None = None,
    ) -> Watch:
        """:meth:`join` barrier ``version`` and :meth:`watch_decision` it in one round trip (the
        join and the first read of the state are sent together); raises as :meth:`join`."""
        path = self._layout.barrier_participant(version, processor_id)
        decision = self._decision(version, callback, on_error, hand_off)
        try:
            fresh, found = self._ops.create_and_get(
                path, decision.path, what="join barrier", watch=decision.on_event
            )
        except NotFound:
            decision.watch.stop()
            raise NotFound(
                self._layout.barrier(version), f"barrier {version} does not exist"
            ) from None
        if not fresh:
            try:
                self._joined_before(path, version, processor_id)
            except Exception:
                decision.watch.stop()
                raise
        decision.settle(found)
        return decision.watch

    def watch_decision(
        self,
        version: int,
        callback: Callable[[BarrierState | None], None],
        on_error: Callable[[Exception], None],
        *,
        hand_off: HandOff | None = None,
    ) -> Watch:
        """Call ``callback(state)`` now and at each change of barrier ``version``'s state, until
        it is decided (DONE or TIMED_OUT) or gone (None: it does not exist, or retention removed
        it); then the watch ends. A failed re-read after a change (the store unavailable) calls
        ``on_error(exc)`` and ends the watch. ``hand_off(reread)``: run the re-read there (the
        caller's own thread) rather than on kazoo's event thread (:mod:`.decision`).

        Cheaper than :meth:`watch_state` for a processor: one request per change and none
        after the decision (a decided barrier stays decided), so neither the decision nor the
        barrier's later removal costs another read.
        """
        decision = self._decision(version, callback, on_error, hand_off)
        decision.settle(
            self._ops.get_watched(decision.path, "read barrier state", decision.on_event)
        )
        return decision.watch

    def _decision(
        self,
        version: int,
        callback: Callable[[BarrierState | None], None],
        on_error: Callable[[Exception], None],
        hand_off: HandOff | None,
    ) -> DecisionWatch:
        return DecisionWatch(
            self._ops,
            self._layout.barrier_state(version),
            lambda data: self._decode_state(version, data),
            callback,
            on_error,
            hand_off=hand_off,
        )

    def versions(self) -> list[int]:
        """The versions of the barriers stored, sorted (whatever their state)."""
        versions = []
        for name in self._ops.children(self._layout.barriers, "list barriers") or []:
            if name.startswith(BARRIER_PREFIX):
                version = parse_int_name(name.removeprefix(BARRIER_PREFIX))
                if version is not None:
                    versions.append(version)
        return sorted(versions)

    def delete_ops(self, version: int) -> list[Op]:
        """Operations removing barrier ``version`` and everything under it (children first)."""
        barrier = self._layout.barrier(version)
        participants = self._layout.barrier_participants(version)
        joined = self._ops.children(participants, "list barrier participants") or []
        ops = [Op("delete", f"{participants}/{name}") for name in joined]
        for child in self._ops.children(barrier, "list barrier") or []:
            ops.append(Op("delete", f"{barrier}/{child}"))
        ops.append(Op("delete", barrier))
        return ops
