"""One coordinator replica: the kazoo adapter that drives the leader machine
(:class:`coordinator.protocol.leader.LeaderMachine`).

The replica runs kazoo's Election recipe. While it leads it

1. bumps the leader epoch (every later write is fenced by it),
2. reads the job's state (live processors, task locality, the latest job model and its
   barrier, the newest model whose barrier is DONE) and gives it to the core,
3. turns ZooKeeper watches and the clock into core events on one queue, handled by one thread,
4. carries out the core's actions: runs the grouper under a time limit, publishes job models,
   marks barriers, records metrics and logs.

Anything unexpected from ZooKeeper while leading (the epoch lost, the session lost, a store
error) makes the replica step down: it feeds ``LeadershipLost`` to the core, leaves the
election and joins it again, so a new leader (maybe this one) starts from what ZooKeeper holds.
Watch callbacks and connection-state listeners only put events on the queue: they never block
kazoo's threads.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from coordinator.config import JobConfig
from coordinator.leader.rebalances import RebalanceRecorder
from coordinator.observability import CoordinatorMetrics, Heartbeat
from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    Action,
    BarrierUpdated,
    CoordinatorSettings,
    Event,
    GrouperFailed,
    GrouperFinished,
    LeadershipGained,
    LeadershipLost,
    MarkBarrier,
    MembershipChanged,
    ModelInForce,
    Published,
    PublishJobModel,
    RebalanceSkipped,
    RemoveOldVersions,
    RunGrouper,
    ScheduleWakeup,
    TimePassed,
)
from coordinator.protocol.rules import IN_FORCE_SCAN, model_in_force
from groupers import TaskNameGrouper, get_grouper, get_ssp_grouper
from metadata.errors import MetadataError
from metadata.model import BarrierState, TaskModel
from metadata.zk import FencedOut, ZkMetadataStore

__all__ = ["CoordinatorService", "job_tasks", "settings_from_config"]


def job_tasks(config: JobConfig) -> tuple[TaskModel, ...]:
    """The job's tasks: its inputs through the configured SSP grouper, sorted by name."""
    ssp = get_ssp_grouper(config.ssp_grouper.name, **config.ssp_grouper.options)
    return tuple(sorted(ssp.group(config.stream_inputs()), key=lambda t: t.name))


def settings_from_config(config: JobConfig) -> CoordinatorSettings:
    c = config.coordinator
    return CoordinatorSettings(
        debounce_s=c.debounce_ms / 1000,
        debounce_max_s=c.debounce_max_ms / 1000,
        barrier_timeout_s=c.barrier_timeout_ms / 1000,
        processor_grace_s=c.processor_grace_ms / 1000,
        retention=c.retention,
    )


@dataclass(frozen=True)
class _ProcessorsChanged:
    """A watch fired on processors/: the loop reads the registrations itself."""


@dataclass(frozen=True)
class _SessionLost:
    reason: str


def _barrier_state(stored: str | None) -> BarrierState | None:
    """A stored barrier state; None when missing or not one the protocol knows."""
    return BarrierState(stored) if stored in set(BarrierState) else None


class StepDown(Exception):
    """Leave the leader loop (and the election) and start over."""


class CoordinatorService:
    """A coordinator replica: ``run(stop)`` until ``stop`` is set (see the module docstring)."""

    def __init__(
        self,
        config: JobConfig,
        client: KazooClient,
        store: ZkMetadataStore,
        *,
        metrics: CoordinatorMetrics | None = None,
        grouper: TaskNameGrouper | None = None,
        identifier: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.client = client
        self.store = store
        self.metrics = metrics or CoordinatorMetrics()
        self.grouper_name = config.grouper.name
        self.grouper = grouper or get_grouper(config.grouper.name, **config.grouper.options)
        self.grouper_timeout_s = config.grouper.timeout_ms / 1000
        self.identifier = identifier or f"{socket.gethostname()}-{id(self):x}"
        self.clock = clock
        self.heartbeat = Heartbeat()
        self.tasks = job_tasks(config)
        self.log = structlog.get_logger("affinity.coordinator").bind(
            job=f"{config.job.name}-{config.job.id}", replica=self.identifier
        )
        self._events: queue.Queue[Event | _ProcessorsChanged | _SessionLost] = queue.Queue()
        self._connected = threading.Event()
        self._leading = threading.Event()
        self._election: Any = None
        self._stop = threading.Event()
        self._watches: list[Any] = []
        self.rebalances = RebalanceRecorder(
            store.history, keep=config.coordinator.history, leader=self.identifier
        )

    # -------------------------------------------------------------------- lifecycle

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def ready(self) -> bool:
        return self._connected.is_set()

    def _stop_when(self, stop: threading.Event) -> None:
        stop.wait()
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._events.put(_SessionLost("stopping"))
        election = self._election
        if election is not None:
            election.cancel()

    def run(self, stop: threading.Event | None = None) -> None:
        """Take part in the election until stopped; lead whenever elected."""
        if stop is not None:
            threading.Thread(
                target=self._stop_when, args=(stop,), name="stop-watcher", daemon=True
            ).start()
        self.client.add_listener(self._on_state)
        if self.client.connected:
            self._connected.set()
        self.store.ensure_layout()
        while not self._stop.is_set():
            self.heartbeat.beat()
            try:
                self._election = self.client.Election(self.store.election_path, self.identifier)
                self._election.run(self._lead)
            except (KazooException, MetadataError) as exc:
                self.log.warning("coordinator.election_interrupted", error=repr(exc))
                self._stop.wait(0.5)
            finally:
                self._election = None
        self.client.remove_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._connected.clear()
            self.metrics.zk_session_expirations.inc()
            self._events.put(_SessionLost("session lost"))
        elif state == KazooState.SUSPENDED:
            self._connected.clear()
            self.metrics.zk_disconnects.inc()
        else:
            self._connected.set()

    # -------------------------------------------------------------------- leading

    def _lead(self) -> None:
        if self._stop.is_set():
            return
        core = LeaderMachine(
            self.tasks,
            settings_from_config(self.config),
            config={
                "job.name": self.config.job.name,
                "job.id": self.config.job.id,
                "run.id": self.config.job.run_id,
            },
        )
        self._events = queue.Queue()
        epoch = self.store.epochs.acquire()
        self._epoch = epoch
        log = self.log.bind(epoch=epoch.epoch)
        self._leading.set()
        self.metrics.is_leader.set(1)
        self.metrics.leadership_changes.inc()
        log.info("coordinator.leading")
        try:
            gained = self._read_state(self.clock())
            if gained.in_force is not None:
                self.metrics.job_model_version.set(gained.in_force.version)
            self._watches.append(
                self.store.processors.watch(lambda _: self._events.put(_ProcessorsChanged()))
            )
            if gained.latest is not None and gained.latest_barrier == BarrierState.NEW:
                # A rebalance the previous leader left in flight: the machine sees it through, so
                # it must hear of the processors that join from now on (not only at the deadline).
                self._watch_barrier(gained.latest.version)
            self._loop(core, self._execute(core, core.handle(gained), log), log)
        except StepDown as exc:
            log.warning("coordinator.step_down", reason=str(exc))
        except (MetadataError, KazooException) as exc:
            log.warning("coordinator.step_down", reason=repr(exc))
        finally:
            core.handle(LeadershipLost(self.clock()))
            for watch in self._watches:
                watch.stop()
            self._watches.clear()
            self._leading.clear()
            self.metrics.is_leader.set(0)

    def _loop(self, core: LeaderMachine, wakeup: float | None, log: Any) -> None:
        """Feed the machine the queued events (and the time) until stopped or stepping down."""
        while not self._stop.is_set():
            self.heartbeat.beat()
            now = self.clock()
            timeout = 1.0 if wakeup is None else min(1.0, max(0.0, wakeup - now))
            try:
                item = self._events.get(timeout=timeout)
            except queue.Empty:
                item = TimePassed(self.clock())
            if isinstance(item, _SessionLost):
                raise StepDown(item.reason)
            if isinstance(item, _ProcessorsChanged):
                item = MembershipChanged(self.clock(), self.store.processors.locality())
            if wakeup is not None and self.clock() >= wakeup:
                wakeup = None
            next_wakeup = self._execute(core, core.handle(item), log)
            if next_wakeup is not None:
                wakeup = next_wakeup if wakeup is None else min(wakeup, next_wakeup)

    def _read_state(self, now: float) -> LeadershipGained:
        """What ZooKeeper holds, for the machine: processors, locality, the latest model and its
        barrier, and the model in force (:func:`~coordinator.protocol.rules.model_in_force`)."""
        store = self.store
        store.sync()  # the state as the ZooKeeper leader has it, not a lagging follower's
        processors = store.processors.locality()
        locality = store.locality.read()
        latest_version = store.job_models.latest_version()
        if latest_version is None:
            return LeadershipGained(now, processors, locality)
        latest = store.job_models.read(latest_version)
        scanned = range(latest_version, max(0, latest_version - IN_FORCE_SCAN), -1)
        states = {version: _barrier_state(store.barriers.state(version)) for version in scanned}
        in_force_version = model_in_force(states)
        in_force = None
        if in_force_version is not None:
            in_force = (
                latest
                if in_force_version == latest_version
                else store.job_models.read(in_force_version)
            )
        return LeadershipGained(
            now,
            processors,
            locality,
            latest=latest,
            latest_barrier=states[latest_version],
            latest_participants=frozenset(store.barriers.participants(latest_version)),
            in_force=in_force,
        )

    # -------------------------------------------------------------------- actions

    def _execute(self, core: LeaderMachine, actions: list[Action], log: Any) -> float | None:
        """Carry out the core's actions; returns the earliest wake-up asked for."""
        wakeup: float | None = None
        pending = list(actions)
        while pending:
            action = pending.pop(0)
            if isinstance(action, ScheduleWakeup):
                wakeup = action.at if wakeup is None else min(wakeup, action.at)
            elif isinstance(action, RunGrouper):
                pending.extend(core.handle(self._run_grouper(action, log)))
            elif isinstance(action, PublishJobModel):
                self._publish(action, log)
                # The barrier deadline counts from now, not from before a slow publish.
                pending.extend(core.handle(Published(self.clock(), action.model.version)))
            elif isinstance(action, MarkBarrier):
                self.store.barriers.set_state(action.version, action.state, epoch=self._epoch)
                outcome = "done" if action.state == BarrierState.DONE else "timed_out"
                self.metrics.barrier_outcomes.labels(outcome=outcome).inc()
                self.metrics.rebalance_duration.observe(action.duration_s)
                self.rebalances.decided(action, epoch=self._epoch, log=log)
                log.info(
                    "coordinator.barrier",
                    version=action.version,
                    state=action.state,
                    seconds=round(action.duration_s, 3),
                )
            elif isinstance(action, RemoveOldVersions):
                self._apply_retention(action, log)
            elif isinstance(action, ModelInForce):
                self.metrics.job_model_version.set(action.model.version)
            elif isinstance(action, GrouperFailed):
                self.metrics.grouper_errors.inc()
                log.error("coordinator.grouper_failed", request=action.request, error=action.reason)
            elif isinstance(action, RebalanceSkipped):
                self.metrics.rebalances_skipped.labels(reason=action.reason).inc()
                log.info("coordinator.rebalance_skipped", reason=action.reason)
        return wakeup

    def _run_grouper(self, action: RunGrouper, log: Any) -> GrouperFinished:
        """Run the grouper in a daemon thread, waiting at most the configured time limit."""
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["containers"] = self.grouper.group(action.tasks, action.metadata)
            except Exception as exc:  # reported to the core as the grouper's error
                outcome["error"] = f"{type(exc).__name__}: {exc}"

        started = time.perf_counter()
        worker = threading.Thread(target=work, name=f"grouper-{action.request}", daemon=True)
        worker.start()
        worker.join(self.grouper_timeout_s)
        elapsed = time.perf_counter() - started
        self.metrics.grouper_duration.observe(elapsed)
        if worker.is_alive():
            error: str | None = f"timed out after {self.grouper_timeout_s:g} s"
            return GrouperFinished(self.clock(), action.request, None, error)
        error = outcome.get("error")
        log.info(
            "coordinator.grouper_ran",
            request=action.request,
            processors=len(action.metadata.processor_locality),
            seconds=round(elapsed, 3),
            ok=error is None,
        )
        return GrouperFinished(self.clock(), action.request, outcome.get("containers"), error)

    def _publish(self, action: PublishJobModel, log: Any) -> None:
        version = action.model.version
        started = time.perf_counter()
        self.store.job_models.publish(
            action.model,
            epoch=self._epoch,
            participants=action.participants,
            grouper=self.grouper_name,
            retention=False,  # the machine asks for it once the barrier is decided
            base=action.base,  # who loses a task against it: the others may join at once
            losing=action.losing,
        )
        self.rebalances.published(action, time.perf_counter() - started)
        self._watch_barrier(version)
        self.metrics.rebalances.inc()
        self.metrics.tasks_moved.inc(action.moved)
        if action.with_locality:
            self.metrics.locality_kept_ratio.set(action.locality_kept / action.with_locality)
        log.info(
            "coordinator.published",
            version=version,
            processors=len(action.participants),
            moved=action.moved,
            locality_kept=action.locality_kept,
            with_locality=action.with_locality,
        )

    def _apply_retention(self, action: RemoveOldVersions, log: Any) -> None:
        """Remove job models and barriers below the machine's floor. Best effort: a failure is
        logged and retried after the next decision; losing the leadership meanwhile steps down
        as any other fenced write does."""
        try:
            self.store.job_models.remove_below(action.below, epoch=self._epoch)
        except FencedOut:
            raise
        except MetadataError as exc:
            log.warning("coordinator.retention_failed", error=str(exc))

    def _watch_barrier(self, version: int) -> None:
        """Turn the participants of barrier ``version`` into ``BarrierUpdated`` events."""

        def on_barrier(state: str | None, participants: set[str]) -> None:
            self._events.put(BarrierUpdated(self.clock(), version, frozenset(participants)))

        self._watches.append(self.store.barriers.watch(version, on_barrier))
