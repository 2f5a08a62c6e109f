"""One coordinator replica: the kazoo adapter that drives the leader machine
(:class:`coordinator.protocol.leader.LeaderMachine`).

The replica runs kazoo's Election recipe. While it leads it

1. bumps the leader epoch (every later write is fenced by it),
2. reads the job's state (:mod:`coordinator.leader.job_state`) and gives it to the machine,
3. turns ZooKeeper watches and the clock into events on one queue, handled by one thread,
4. carries out the machine's actions: the grouper, publishes, barriers, metrics and logs.

Anything unexpected from ZooKeeper while leading (the epoch lost, the session lost, a store
error) makes the replica step down: it feeds ``LeadershipLost`` to the core, leaves the
election and joins it again, so a new leader (maybe this one) starts from what ZooKeeper holds.
An election that fails (``NoAuth``: no or wrong credentials) or a leadership that fails early
(corrupt latest job model: :mod:`coordinator.leader.job_state`) makes the replica back off
(exponential with jitter, up to ``BACKOFF_MAX_S``) before taking part again, logged with the
path and counted; meanwhile ``ready()`` is false. The grouper runs in a worker process
(:mod:`coordinator.leader.grouper_worker`) that is killed at ``grouper.timeout_ms``, given the
standby lag reports (:mod:`coordinator.leader.grouping`); the probing recheck of a model in
force runs beside the loop (:mod:`coordinator.leader.recheck`), ended by a grouper run.
Watch callbacks and connection-state listeners only put events on the queue: they never block
kazoo's threads.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from tenacity import RetryCallState

from coordinator.config import JobConfig
from coordinator.leader.backoff import (
    BACKOFF_MAX_S,
    HEALTHY_LEADERSHIP_S,
    LeadershipFailed,
    describe,
    failed,
    retrying,
)
from coordinator.leader.grouper_worker import GrouperWorker
from coordinator.leader.grouping import run_grouper, run_recheck
from coordinator.leader.job_state import read_job_state
from coordinator.leader.rebalances import RebalanceRecorder
from coordinator.leader.recheck import BackgroundRecheck
from coordinator.leader.reporting import report, report_barrier, report_published
from coordinator.leader.settings import job_tasks, settings_from_config
from coordinator.observability import CoordinatorMetrics, Heartbeat, job_logger
from coordinator.protocol.leader import LeaderMachine
from coordinator.protocol.leader_events import (
    Action,
    BarrierUpdated,
    Event,
    LeadershipGained,
    LeadershipLost,
    MarkBarrier,
    MembershipChanged,
    ModelInForce,
    Published,
    PublishJobModel,
    RemoveOldVersions,
    RunGrouper,
    RunRecheck,
    ScheduleWakeup,
    TimePassed,
)
from groupers import TaskNameGrouper
from metadata.errors import MetadataError
from metadata.model import BarrierState
from metadata.zk import FencedOut, UnsafeAcl, ZkMetadataStore

__all__ = ["CoordinatorService", "grouper_worker_for", "job_tasks", "settings_from_config"]


def grouper_worker_for(
    config: JobConfig, metrics: CoordinatorMetrics, instance: TaskNameGrouper | None = None
) -> GrouperWorker:
    """The worker process that builds and runs the job's grouper (``config.grouper``), or the
    ``instance`` given, counting its starts."""
    return GrouperWorker(
        config.grouper.name,
        config.grouper.options,
        instance=instance,
        on_start=metrics.grouper_worker_restarts.inc,
    )


@dataclass(frozen=True)
class _ProcessorsChanged:
    """A watch fired on processors/: the loop reads the registrations itself."""


@dataclass(frozen=True)
class _SessionLost:
    reason: str


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
        grouper_worker: GrouperWorker | None = None,
        identifier: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.client = client
        self.store = store
        self.metrics = metrics or CoordinatorMetrics()
        self.grouper_name = config.grouper.name
        # ``grouper_worker``: one started (and checked) already, by coordinator run.
        self.grouper = grouper_worker or grouper_worker_for(config, self.metrics, grouper)
        self.grouper_timeout_s = config.grouper.timeout_ms / 1000
        self.backoff_max_s = BACKOFF_MAX_S
        self.identifier = identifier or f"{socket.gethostname()}-{id(self):x}"
        self.clock = clock
        self.heartbeat = Heartbeat()
        self.tasks = job_tasks(config)
        self.log = job_logger("affinity.coordinator", config.logging.level).bind(
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
        self._failing: str | None = None  # why the last election or leadership failed

    # -------------------------------------------------------------------- lifecycle

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    def ready(self) -> bool:
        """Connected to ZooKeeper and taking part in the election, with a grouper it can build:
        false while the replica backs off after a failure, until it leads or its contender node
        exists again, and while its grouper's last worker could not load the grouper."""
        if not self._connected.is_set() or self.grouper.load_failure is not None:
            return False
        if self._failing is not None:
            election = self._election
            if election is None or getattr(election.lock, "node", None) is None:
                return False
            self._failing = None
        return True

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
        try:
            while not self._stop.is_set():
                attempts = retrying(self._stop, self.backoff_max_s, self._failed, self._back_off)
                with contextlib.suppress(LeadershipFailed):  # raised when stopped meanwhile
                    attempts(self._take_part)  # returns once a healthy term or election ended
        finally:
            self.client.remove_listener(self._on_state)
            self.grouper.close()

    def _take_part(self) -> None:
        self.heartbeat.beat()
        try:
            self.store.ensure_layout()  # refused credentials back off; UnsafeAcl is fatal
            self._election = self.client.Election(self.store.election_path, self.identifier)
            self._election.run(self._lead)
        except UnsafeAcl:
            raise
        except (KazooException, MetadataError) as exc:
            raise failed("election", exc) from exc
        finally:
            self._election = None

    def _failed(self, state: RetryCallState) -> None:
        """Before backing off: log the failure with the path, count it, become not ready."""
        assert state.outcome is not None and state.next_action is not None
        failure = state.outcome.exception()
        assert isinstance(failure, LeadershipFailed)
        delay = state.next_action.sleep
        self._failing = failure.error
        self.metrics.leadership_failures.labels(reason=failure.reason).inc()
        self.metrics.election_backoff.set(delay)
        election = failure.reason == "election"
        self.log.warning(
            "coordinator.election_interrupted" if election else "coordinator.leadership_failed",
            path=self.store.election_path if election else self.store.layout.folder,
            error=failure.error,
            attempt=state.attempt_number,
            retry_in_s=round(delay, 2),
        )

    def _back_off(self, seconds: float) -> None:
        self.heartbeat.beat()
        self._stop.wait(seconds)
        self.heartbeat.beat()
        self.metrics.election_backoff.set(0)

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
        self.grouper.start()  # warm the grouper's process while the state is read
        epoch = self.store.epochs.acquire()
        self._epoch = epoch
        log = self.log.bind(epoch=epoch.epoch)
        run = functools.partial(run_recheck, self.grouper, **self._grouping(log))
        self._recheck = BackgroundRecheck(self.grouper, run, deliver=self._events.put, log=log)
        log.info("coordinator.leading")
        started = self.clock()
        failure: LeadershipFailed | None = None
        try:
            gained = self._gain(log)
            self._loop(core, self._execute(core, core.handle(gained), log), log)
        except LeadershipFailed as exc:
            failure = exc
            log.warning("coordinator.step_down", reason=exc.error)
        except (StepDown, MetadataError, KazooException) as exc:
            reason = str(exc) if isinstance(exc, StepDown) else describe(exc)
            log.warning("coordinator.step_down", reason=reason)
            if not self._stop.is_set() and self.clock() - started < HEALTHY_LEADERSHIP_S:
                failure = LeadershipFailed("leading", reason)
        finally:
            self._recheck.cancel("leading ended")
            core.handle(LeadershipLost(self.clock()))
            for watch in self._watches:
                watch.stop()
            self._watches.clear()
            self._leading.clear()
            self.metrics.is_leader.set(0)
        if failure is not None:
            raise failure

    def _gain(self, log: Any) -> LeadershipGained:
        """Read the job's state and start watching it; a failure here is ``LeadershipFailed``."""
        try:
            names = frozenset(t.name for t in self.tasks)
            gained = read_job_state(self.store, self.clock(), log, names)
        except (MetadataError, KazooException) as exc:
            raise failed("reading_state", exc) from exc
        self._failing = None
        self._leading.set()
        self.metrics.is_leader.set(1)
        self.metrics.leadership_changes.inc()
        if gained.in_force is not None:
            self.metrics.job_model_version.set(gained.in_force.version)
        self.metrics.registrations_skipped.set(len(self.store.processors.skipped))
        self._watches.append(
            self.store.processors.watch(lambda _: self._events.put(_ProcessorsChanged()))
        )
        if gained.latest is not None and gained.latest_barrier == BarrierState.NEW:
            # A rebalance the previous leader left in flight: the machine sees it through, so
            # it must hear of the processors that join from now on (not only at the deadline).
            self._watch_barrier(gained.latest.version)
        return gained

    def _membership(self) -> MembershipChanged:
        """Live processor -> location and capacity (counting the malformed registrations)."""
        live, capacity = self.store.processors.members()
        self.metrics.registrations_skipped.set(len(self.store.processors.skipped))
        return MembershipChanged(self.clock(), live, capacity)

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
                item = self._membership()
            if wakeup is not None and self.clock() >= wakeup:
                wakeup = None
            next_wakeup = self._execute(core, core.handle(item), log)
            self.metrics.probing.set(1 if core.leader and core.probing else 0)
            if next_wakeup is not None:
                wakeup = next_wakeup if wakeup is None else min(wakeup, next_wakeup)

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
                self._recheck.cancel("a grouper run was asked")  # the worker is ours alone
                answer = run_grouper(self.grouper, self.store, action, **self._grouping(log))
                pending.extend(core.handle(answer))
            elif isinstance(action, RunRecheck):  # beside the loop: events go on meanwhile
                self._recheck.start(action)
            elif isinstance(action, PublishJobModel):
                self._publish(action, log)
                # The barrier deadline counts from now, not from before a slow publish.
                pending.extend(core.handle(Published(self.clock(), action.model.version)))
            elif isinstance(action, MarkBarrier):
                self.store.barriers.set_state(action.version, action.state, epoch=self._epoch)
                self.rebalances.decided(action, epoch=self._epoch, log=log)
                report_barrier(action, self.metrics, log)
            elif isinstance(action, RemoveOldVersions):
                self._apply_retention(action, log)
            elif isinstance(action, ModelInForce):
                self.metrics.job_model_version.set(action.model.version)
            else:
                report(action, core, self.metrics, log, self.clock())
        return wakeup

    def _grouping(self, log: Any) -> dict[str, Any]:
        """What every grouper run is given besides the worker and the action."""
        return dict(
            timeout_s=self.grouper_timeout_s, metrics=self.metrics, log=log, clock=self.clock
        )

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
            gaining=action.gaining,  # the others keep their container: they read none
            over_corrupt_pointer=action.repair,  # it replaces a model that could not be read
        )
        self.rebalances.published(action, time.perf_counter() - started)
        self._watch_barrier(version)
        report_published(action, self.metrics, log)

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
