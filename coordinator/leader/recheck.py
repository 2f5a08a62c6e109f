"""The probing recheck beside the service's loop: :class:`BackgroundRecheck`.

Once a model is DONE the leader machine asks the grouper again (:class:`RunRecheck`,
:mod:`coordinator.protocol.leader_probing`). At 1,000,000 tasks that takes about 7 s here (the
question about 3 s, the grouper about 3.5 s); carried out in the service's loop, every event
waited behind it, a processor's death included. :class:`BackgroundRecheck` carries it out in a
thread of its own and puts its :class:`RecheckFinished` on the loop's queue; the loop goes on.

One grouper worker serves both: before the worker runs anything else, :meth:`cancel` ends the
recheck in flight. Its worker process is killed, as at a time limit, and the next run starts a
fresh one (at 1,000,000 tasks the tasks' hand-over, about 4 s, comes again). The answer would
be moot: a new rebalance is on its way, and its model is rechecked once DONE. A cancelled
recheck hands nothing over. A recheck that fails in a way the grouper worker does not report
(a bug here) is logged with its traceback and handed over as failed (no answer), as a failed
grouper run is: the model counts as settled.

Usage::

    run = functools.partial(run_recheck, worker, timeout_s=30, metrics=metrics, log=log)
    recheck = BackgroundRecheck(worker, run, deliver=events.put, log=log)
    recheck.start(action)  # returns at once; its RecheckFinished goes to events
    ...
    recheck.cancel("a grouper run was asked")  # before the worker runs anything else
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from coordinator.leader.grouper_worker import GrouperWorker
from coordinator.protocol.leader_events import RecheckFinished, RunRecheck

__all__ = ["INTERRUPT_EVERY_S", "BackgroundRecheck"]

#: How often :meth:`BackgroundRecheck.cancel` kills the worker's process until the recheck's
#: thread has ended (a recheck between two processes, a dead one and the next, has none to kill).
INTERRUPT_EVERY_S = 0.1

#: ``run(action, cancelled=...)``: carry the recheck out (``cancelled()``: whether it was);
#: :func:`coordinator.leader.grouping.run_recheck` with its worker and settings.
RunFn = Callable[..., RecheckFinished]


class BackgroundRecheck:
    """At most one recheck at a time, in a thread beside the loop (see the module docstring)."""

    def __init__(
        self,
        worker: GrouperWorker,
        run: RunFn,
        *,
        deliver: Callable[[RecheckFinished], None],
        log: Any,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._worker = worker
        self._run = run
        self._deliver = deliver
        self._log = log
        self._clock = clock
        self._thread: threading.Thread | None = None
        self._cancelled = threading.Event()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, action: RunRecheck) -> None:
        """Carry ``action`` out in a new thread (a recheck still running is cancelled first:
        the machine asks one at a time, for the newest model)."""
        self.cancel("a newer recheck was asked")
        cancelled = threading.Event()
        self._cancelled = cancelled
        thread = threading.Thread(
            target=self._carry_out,
            args=(action, cancelled),
            name=f"recheck-v{action.version}",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    def cancel(self, reason: str) -> None:
        """End the recheck in flight, if any (its worker process is killed), and wait for its
        thread: afterwards the worker is the caller's alone."""
        thread = self._thread
        if thread is None:
            return
        if thread.is_alive():
            self._cancelled.set()
            while thread.is_alive():  # (again: a worker process it started meanwhile goes too)
                self._worker.interrupt()
                thread.join(INTERRUPT_EVERY_S)
            self._log.info("coordinator.recheck_cancelled", reason=reason)
        self._thread = None

    def _carry_out(self, action: RunRecheck, cancelled: threading.Event) -> None:
        try:
            finished = self._run(action, cancelled=cancelled.is_set)
        except Exception:
            self._log.exception("coordinator.recheck_crashed", version=action.version)
            finished = RecheckFinished(self._clock(), action.version, None)
        if not cancelled.is_set():
            self._deliver(finished)
