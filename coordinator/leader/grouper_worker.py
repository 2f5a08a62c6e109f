"""The grouper in a worker process the coordinator can stop (invariant I5).

A grouper is pure Python: in a thread, one that holds the GIL (``sum(range(10**10))``) cannot be
stopped, starves ``/metrics`` and the ZooKeeper session, and its late answer would still be
published. :class:`GrouperWorker` therefore runs it in a separate process:

- the process is started once (``forkserver`` context, :mod:`groupers` preloaded, so a restart
  is a fork) and stays warm: a rebalance pays pickling its inputs and its answer, not a process
  start. It loads the grouper by name (``groupers.get_grouper(name, **options)``, plugins
  included) or unpickles the instance it was given. :meth:`GrouperWorker.check` starts it and
  waits until the grouper is built: ``coordinator run`` calls it before it connects, so a
  grouper that cannot be built (unknown name, options it does not take, a plugin missing or whose
  constructor raises) is a bad configuration, reported as a :class:`LoadFailure` naming the
  argument to blame; ``load_failure`` says why the last worker could not load it (the replica is
  not ready meanwhile);
- the job's tasks cross to the worker once (again only when they change) and the worker says
  when it holds them; that hand-over is ours, not the grouper's, and is not counted in the time
  limit (at 1,000,000 tasks it takes about 4 s here: :mod:`coordinator.leader.grouper_wire`);
- the grouper runs with the cyclic garbage collector paused (:mod:`metadata.bulk`), in a process
  that does nothing else, for at most its time limit: at 1,000,000 tasks ``host-affinity`` took
  4.1-5.2 s with it and 2.7 s without. Whatever cyclic garbage a grouper leaves is collected
  after its run;
- :meth:`GrouperWorker.run` sends the metadata and waits at most the time limit.
  At the deadline the process is killed (SIGKILL) and reaped, and the run is a timeout: no
  answer can arrive after its deadline, and no thread is left behind. The next run starts a
  fresh process;
- :meth:`GrouperWorker.interrupt` (from any thread) kills the process at once: a run waiting on
  it in another thread ends as for a dead worker (:mod:`coordinator.leader.recheck` ends a
  recheck so when a grouper run is asked);
- whatever the grouper raises, ``SystemExit`` and ``KeyboardInterrupt`` included, comes back as
  ``"<type>: <message>"``; a worker that dies (``os._exit``, a crash) is reported with its exit
  code and replaced.

The answer comes back as the grouper returned it (pickled); checking it is the leader machine's
job (:func:`coordinator.protocol.leader_policy.check_answer`).

The worker does not import the parent's ``__main__``: multiprocessing's ``forkserver`` (and
``spawn``) children run the main script again as ``__mp_main__`` before their target, which in a
Spark driver embedding a coordinator (``stateful_foreach_batch``) re-ran a user's whole script
(a second SparkSession, a second query) when it had no ``if __name__ == "__main__":`` guard, and
failed outright for ``python -`` (``<stdin>``). The target lives in this module, so the worker
needs nothing from ``__main__``; only a grouper *instance* whose class is defined there does, and
then the main script is imported as before (:func:`_preparation_data`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.spawn
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from coordinator.leader.grouper_wire import (
    decode_answer,
    decode_metadata,
    decode_tasks,
    encode_answer,
    encode_metadata,
    encode_tasks,
)
from groupers import GrouperError, GrouperMetadata, TaskNameGrouper, get_grouper
from metadata.bulk import collector_paused
from metadata.model import TaskModel

__all__ = ["GrouperOutcome", "GrouperWorker", "LoadFailure"]

#: Worker processes whose name starts so are started without the parent's ``__main__``.
NO_MAIN_PREFIX = "affinity-grouper-"
_get_preparation_data = multiprocessing.spawn.get_preparation_data


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's preparation data for a new process, without the instruction to import
    the parent's ``__main__`` for our grouper workers (module docstring). Every other process
    gets the data unchanged."""
    data: dict[str, Any] = _get_preparation_data(name)
    if name.startswith(NO_MAIN_PREFIX):
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
    return data


# Looked up at each process start by multiprocessing's forkserver and spawn launchers.
multiprocessing.spawn.get_preparation_data = _preparation_data

#: How long a new worker may take to start and load its grouper (not counted in the limit).
START_TIMEOUT_S = 60.0
#: How long the job's tasks may take to reach a worker, decoded (not counted in the limit).
TASKS_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class GrouperOutcome:
    containers: object  # the grouper's answer (None with ``error``)
    error: str | None
    seconds: float  # time the grouper took (up to the limit), start-up and task hand-over excluded


@dataclass(frozen=True)
class LoadFailure:
    """Why a worker could not load its grouper, and which argument of ``get_grouper`` is to
    blame (``"name"`` or ``"options"``: :attr:`groupers.GrouperError.argument`)."""

    message: str
    argument: str = "name"

    def __str__(self) -> str:
        return self.message


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _load_failure(name: str, options: Mapping[str, Any], exc: BaseException) -> LoadFailure:
    argument = getattr(exc, "argument", None) or ("options" if options else "name")
    if isinstance(exc, GrouperError):  # its message names the grouper already
        return LoadFailure(str(exc), argument)
    return LoadFailure(f"loading grouper {name!r}: {_describe(exc)}", argument)


def _process_name(name: str, instance: object) -> str:
    """``affinity-grouper-<name>`` (started without ``__main__``), or ``grouper-<name>`` when the
    grouper instance's class lives in ``__main__`` (the worker must import it to unpickle it)."""
    if instance is not None and type(instance).__module__ in ("__main__", "__mp_main__"):
        return f"grouper-{name}"
    return f"{NO_MAIN_PREFIX}{name}"


def _serve(conn: Connection, name: str, options: Mapping[str, Any], instance: object) -> None:
    """The worker process: load the grouper, say ready, then answer requests until None."""
    try:
        grouper: Any = instance if instance is not None else get_grouper(name, **options)
    except BaseException as exc:  # reported to the coordinator (at start-up: exit 2)
        conn.send(("failed", _load_failure(name, options, exc)))
        return
    conn.send(("ready", None))
    tasks: tuple[TaskModel, ...] = ()
    known: dict[str, TaskModel] = {}
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the coordinator is gone
        if request is None:
            return
        kind, body = request
        if kind == "tasks":  # the job's tasks, sent once per worker (and when they change)
            tasks = decode_tasks(body)
            known = {task.name: task for task in tasks}
            conn.send(("tasks", len(tasks)))  # held: the grouper's time starts now
            continue
        try:
            with collector_paused():  # (the module docstring says why)
                answer = grouper.group(tasks, decode_metadata(body, known))
                reply: tuple[str, object] = encode_answer(answer, known)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: reported as what they are
            reply = ("error", _describe(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # the answer cannot be pickled
            conn.send(("error", f"the answer cannot be sent back: {_describe(exc)}"))


class GrouperWorker:
    """A warm grouper process, killed at the time limit (see the module docstring)."""

    def __init__(
        self,
        name: str,
        options: Mapping[str, Any],
        *,
        instance: TaskNameGrouper | None = None,
        context: str = "forkserver",
        on_start: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.options = dict(options)
        self.instance = instance
        self._context: Any = multiprocessing.get_context(context)  # a concrete context
        if context == "forkserver":
            self._context.set_forkserver_preload(["groupers", "metadata.model"])
        self._on_start = on_start
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._ready = False
        self._tasks_sent: tuple[TaskModel, ...] | None = None  # what this worker holds
        self._known: dict[str, TaskModel] = {}
        #: why the last worker could not load its grouper (None: it could, or none started yet)
        self.load_failure: LoadFailure | None = None

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    def start(self) -> None:
        """Start the worker process if none runs (returns at once; :meth:`run` waits for it)."""
        if self._process is not None and self._process.is_alive():
            return
        self.close()
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_serve,
            args=(child, self.name, self.options, self.instance),
            name=_process_name(self.name, self.instance),
            daemon=True,
        )
        process.start()
        child.close()
        self._process, self._conn, self._ready = process, parent, False
        if self._on_start is not None:
            self._on_start()

    def check(self) -> LoadFailure | None:
        """Start the worker (if none runs) and wait until it has built its grouper, as every
        run does: the coordinator's start-up check (a grouper that cannot be built is a bad
        configuration). None when it is ready (and stays warm); else why not, the worker gone."""
        self.start()
        failed = self._await_ready()
        if failed is None:
            return None
        return self.load_failure or LoadFailure(failed)

    def _await_ready(self) -> str | None:
        """Wait for a started worker to load its grouper; an error string if it failed."""
        if self._ready:
            return None
        failed = self._exchange(None, "ready", START_TIMEOUT_S, "start")
        self._ready = failed is None
        if failed is None:
            self.load_failure = None
        elif self.load_failure is None or self.load_failure.message != failed:
            self.load_failure = LoadFailure(failed)  # did not start, or died while loading
        return failed

    def run(
        self, tasks: tuple[TaskModel, ...], metadata: GrouperMetadata, timeout_s: float
    ) -> GrouperOutcome:
        """The grouper's answer, or an error: a timeout (the process is killed), an exception,
        or a worker that died. Never an answer that came after ``timeout_s``."""
        self.start()
        failed = self._await_ready() or self._hand_over(tasks)
        if failed is not None:
            return GrouperOutcome(None, failed, 0.0)
        conn = self._conn
        assert conn is not None
        started = time.perf_counter()
        try:
            conn.send(("group", encode_metadata(metadata, self._known)))
            answered = conn.poll(max(0.0, timeout_s - (time.perf_counter() - started)))
            elapsed = time.perf_counter() - started
            if not answered or elapsed > timeout_s:
                self.close()  # kill it: its answer, if any, is too late
                timeout = f"timed out after {timeout_s:g} s (the grouper process was stopped)"
                return GrouperOutcome(None, timeout, elapsed)
            kind, payload = conn.recv()
            elapsed = time.perf_counter() - started
            if kind == "error":
                return GrouperOutcome(None, str(payload), elapsed)
            return GrouperOutcome(decode_answer(kind, payload, self._known), None, elapsed)
        except (EOFError, OSError):
            return GrouperOutcome(None, self._died(), time.perf_counter() - started)
        except Exception as exc:  # the answer cannot be unpickled or rebuilt here
            self.close()
            error = f"the grouper's answer cannot be read: {_describe(exc)}"
            return GrouperOutcome(None, error, time.perf_counter() - started)

    def interrupt(self) -> None:
        """(Any thread) Kill the worker's process now: a :meth:`run` waiting on it in another
        thread returns at once, as for a worker that died, and reaps it there; the next run
        starts a fresh process."""
        process = self._process
        if process is not None:
            with contextlib.suppress(ValueError):  # closed meanwhile by the running thread
                process.kill()

    def _hand_over(self, tasks: tuple[TaskModel, ...]) -> str | None:
        """Send the job's tasks unless the worker holds them, and wait until it has decoded
        them; an error string if it could not take them."""
        if self._tasks_sent is tasks:
            return None
        self._known = {task.name: task for task in tasks}
        message = ("tasks", encode_tasks(tasks))
        failed = self._exchange(message, "tasks", TASKS_TIMEOUT_S, "take the job's tasks")
        if failed is None:
            self._tasks_sent = tasks
        return failed

    def _exchange(
        self, message: tuple[str, object] | None, expected: str, within_s: float, doing: str
    ) -> str | None:
        """Send ``message`` (if any) and wait for the worker's ``expected`` reply; an error
        string if it fails, or does not ``doing`` within ``within_s`` (it is then stopped)."""
        conn = self._conn
        assert conn is not None
        try:
            if message is not None:
                conn.send(message)
            if not conn.poll(within_s):
                self.close()
                return f"the grouper process did not {doing} within {within_s:g} s"
            kind, detail = conn.recv()
        except (EOFError, OSError):
            return self._died()
        if kind != expected:
            self.close()
            if isinstance(detail, LoadFailure):
                self.load_failure = detail
            return str(detail)
        return None

    def _died(self) -> str:
        process = self._process
        code = None
        if process is not None:
            process.join(5)
            code = process.exitcode
        self.close()
        return f"the grouper process died (exit code {code})"

    def close(self) -> None:
        """Stop the worker now (SIGKILL) and reap it."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._ready = False
        self._tasks_sent = None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(5)
            process.close()
