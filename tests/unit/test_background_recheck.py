"""The probing recheck runs beside the service's loop (coordinator.leader.recheck): its answer is
handed to the loop's queue; a grouper run asked meanwhile cancels it (the worker's process
killed, nothing handed over); a recheck that crashes is logged and handed over as failed.

The worker here is a stand-in whose ``interrupt`` ends the run waiting on it, as killing the
grouper's process ends a real one (that, for real: tests/integration/test_recheck_beside_loop.py).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import structlog
from structlog.testing import capture_logs

from coordinator.leader.recheck import BackgroundRecheck
from coordinator.protocol.leader_events import RecheckFinished, RunRecheck
from groupers import GrouperMetadata
from metadata.model import FrozenMap, JobModel


class Worker:
    """A grouper worker whose run waits until it is released or interrupted."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.interrupted = 0

    def interrupt(self) -> None:
        self.interrupted += 1
        self.release.set()

    def run(self, action: RunRecheck, *, cancelled: Callable[[], bool]) -> RecheckFinished:
        self.release.wait(10)
        answer = None if cancelled() else {"answer": action.version}
        return RecheckFinished(1.0, action.version, answer)


def recheck_of(version: int) -> RunRecheck:
    model = JobModel(version, FrozenMap({}))
    metadata = GrouperMetadata(
        processor_locality={}, task_locality={}, previous_task_to_processor={}
    )
    return RunRecheck((), model, metadata)


def runner(worker: Any, run: Any = None) -> tuple[BackgroundRecheck, queue.SimpleQueue[Any]]:
    delivered: queue.SimpleQueue[Any] = queue.SimpleQueue()
    log = structlog.get_logger("test")
    return BackgroundRecheck(worker, run or worker.run, deliver=delivered.put, log=log), delivered


def test_the_answer_is_handed_to_the_queue_and_the_caller_goes_on() -> None:
    worker = Worker()
    recheck, delivered = runner(worker)
    recheck.start(recheck_of(3))
    assert recheck.running and delivered.empty()  # start returned while the grouper runs
    worker.release.set()
    finished = delivered.get(timeout=10)
    assert finished.version == 3 and finished.answer == {"answer": 3}
    recheck.cancel("leading ended")  # done already: nothing to end
    assert worker.interrupted == 0 and not recheck.running


def test_a_grouper_run_asked_meanwhile_ends_the_recheck_and_nothing_is_handed_over() -> None:
    worker = Worker()
    recheck, delivered = runner(worker)
    recheck.start(recheck_of(4))
    with capture_logs() as logs:
        recheck.cancel("a grouper run was asked")
    assert worker.interrupted == 1 and not recheck.running  # its thread has ended
    assert delivered.empty()
    assert [e["event"] for e in logs] == ["coordinator.recheck_cancelled"]
    assert logs[0]["reason"] == "a grouper run was asked"


def test_a_newer_recheck_ends_the_older_one() -> None:
    worker = Worker()
    recheck, delivered = runner(worker)
    recheck.start(recheck_of(5))
    recheck.start(recheck_of(6))  # the first one is ended (its worker released), not handed over
    assert worker.interrupted == 1
    worker.release.set()
    assert delivered.get(timeout=10).version == 6
    assert delivered.empty()


def test_a_recheck_that_crashes_is_logged_and_handed_over_as_failed() -> None:
    worker = Worker()

    def crashing(action: RunRecheck, *, cancelled: Callable[[], bool]) -> RecheckFinished:
        raise KeyError("a bug")

    recheck, delivered = runner(worker, crashing)
    with capture_logs() as logs:
        recheck.start(recheck_of(7))
        finished = delivered.get(timeout=10)
    assert finished.version == 7 and finished.answer is None
    crashed = [e for e in logs if e["event"] == "coordinator.recheck_crashed"]
    assert crashed and crashed[0]["version"] == 7 and crashed[0]["log_level"] == "error"


def test_a_worker_process_started_after_the_first_interrupt_is_killed_too() -> None:
    """The recheck may be between two worker processes when it is cancelled (none to kill):
    the cancel kills again until the recheck's thread has ended."""

    class LateWorker(Worker):
        def interrupt(self) -> None:
            self.interrupted += 1
            if self.interrupted >= 3:  # no process for the first two
                self.release.set()

    worker = LateWorker()
    recheck, delivered = runner(worker)
    recheck.start(recheck_of(8))
    recheck.cancel("a grouper run was asked")
    assert worker.interrupted == 3 and not recheck.running and delivered.empty()
