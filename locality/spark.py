"""Spark placement: executors as processors, stages pinned to executors, executor locations.

Driver side:

- :class:`SparkExecutors` lists the application's live executors (``executor_id``, ``host``)
  from ``sc._jsc.sc().statusStore().executorList(True)``, without the driver.
- :class:`ExecutorRegistrar` keeps one ZooKeeper processor registration per live executor:
  :meth:`ExecutorRegistrar.sync` registers new executors and unregisters lost ones. A replacement
  executor has a new Spark id, so it is a new processor (``<prefix>-exec-<id>``) at the same
  location. The location comes from ``location_of`` (the executor's host by default;
  :class:`ProbedLocations` asks each executor for its own location instead).
- :func:`run_pinned` runs one Spark task per affinity task, each with the preferred location
  ``executor_<host>_<executorId>`` of the executor the placement names (or ``<host>`` when the
  placement names a host), and reports where each task actually ran.

Executor side:

- :class:`SparkExecutorLocationIdProvider`: the executor's own location id, from an environment
  variable when set (``AFFINITY_LOCATION_ID``), else the executor's host.
- :func:`current_executor_id` / :func:`current_executor_host`: which executor runs this Python
  worker (from ``SPARK_LOG_URL_STDERR`` or the executor JVM's command line in ``/proc``).

The locality wait
-----------------
Spark keeps a pinned task waiting for its preferred executor for ``spark.locality.wait.process``
(default: ``spark.locality.wait``, 3 s), then for any executor on the preferred host for
``spark.locality.wait.node``, then runs it anywhere. Spark reads these when a stage is submitted
(``TaskSetManager``), from the SparkContext's live configuration, which is normally fixed at
session creation. ``run_pinned(locality_wait=...)`` sets both on the live configuration for the
duration of its job and restores them afterwards; with ``locality_wait=None`` the application's
own configuration applies. See ``docs/spark.md``.

May import ``metadata.model`` only (the registrar takes any :class:`ProcessorStore`, such as
``metadata.zk.ZkMetadataStore``); never ``groupers`` or ``coordinator``.
"""

from __future__ import annotations

import base64
import builtins
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from urllib.parse import parse_qs, urlparse

from locality.providers import LocationError

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.rdd import RDD

__all__ = [
    "DRIVER_ID",
    "EXECUTOR_LOCATION_ENV",
    "LOCALITY_WAIT_KEYS",
    "ExecutorRegistrar",
    "PinnedRun",
    "PinnedTask",
    "ProbedLocations",
    "ProcessorStore",
    "Registration",
    "SparkExecutor",
    "SparkExecutorLocationIdProvider",
    "SparkExecutors",
    "SyncResult",
    "current_executor_host",
    "current_executor_id",
    "executor_host_location",
    "pinned_rdd",
    "run_pinned",
]

P = TypeVar("P")
R = TypeVar("R")

log = logging.getLogger("locality.spark")

#: The executor id Spark gives the driver (excluded from :meth:`SparkExecutors.list`).
DRIVER_ID = "driver"
#: The environment variable :class:`SparkExecutorLocationIdProvider` reads first.
EXECUTOR_LOCATION_ENV = "AFFINITY_LOCATION_ID"
#: The configuration keys :func:`run_pinned` sets from its ``locality_wait`` argument.
LOCALITY_WAIT_KEYS = ("spark.locality.wait.process", "spark.locality.wait.node")


# --------------------------------------------------------------------------- executors


@dataclass(frozen=True, slots=True)
class SparkExecutor:
    """One live executor of the application, as the driver knows it."""

    executor_id: str
    host: str

    @property
    def task_location(self) -> str:
        """The preferred-location string that pins a task to this executor (process-local)."""
        return f"executor_{self.host}_{self.executor_id}"


def _host_of(host_port: str) -> str:
    """``host`` of ``host:port`` (an executor being registered may not have its port yet)."""
    if host_port.startswith("["):  # [v6::addr]:port
        return host_port[1:].split("]", 1)[0]
    host, sep, port = host_port.rpartition(":")
    if sep and port.isdigit() and host.count(":") == 0:
        return host
    return host_port


def _executor_sort_key(executor: SparkExecutor) -> tuple[int, int | str]:
    eid = executor.executor_id
    return (0, int(eid)) if eid.isdigit() else (1, eid)


class SparkExecutors:
    """The live executors of one SparkContext (from Spark's status store, driver excluded)."""

    def __init__(self, sc: SparkContext) -> None:
        self.sc = sc

    @property
    def application_id(self) -> str:
        return str(self.sc.applicationId)

    def list(self) -> builtins.list[SparkExecutor]:
        """The live executors, sorted by id (numerically)."""
        summaries = self.sc._jsc.sc().statusStore().executorList(True)
        executors = []
        for i in range(summaries.size()):
            summary = summaries.apply(i)
            executor_id = str(summary.id())
            if executor_id == DRIVER_ID or not summary.isActive():
                continue
            executors.append(SparkExecutor(executor_id, _host_of(str(summary.hostPort()))))
        return sorted(executors, key=_executor_sort_key)

    def __call__(self) -> builtins.list[SparkExecutor]:
        return self.list()

    def by_id(self) -> dict[str, SparkExecutor]:
        return {e.executor_id: e for e in self.list()}

    def wait_for(
        self,
        count: int,
        *,
        timeout_s: float = 120.0,
        poll_s: float = 0.25,
        hosts: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
    ) -> builtins.list[SparkExecutor]:
        """Wait until at least ``count`` executors are live (not counting the ids in
        ``exclude``; with ``hosts``, at least one on each of those hosts) and return them all.
        Raises ``TimeoutError`` naming what is live."""
        excluded = set(exclude)
        wanted_hosts = set(hosts or ())
        deadline = time.monotonic() + timeout_s
        while True:
            live = self.list()
            counted = [e for e in live if e.executor_id not in excluded]
            if len(counted) >= count and wanted_hosts <= {e.host for e in counted}:
                return live
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"waited {timeout_s}s for {count} executors"
                    + (f" on {sorted(wanted_hosts)}" if wanted_hosts else "")
                    + f"; live: {[(e.executor_id, e.host) for e in live]}"
                )
            time.sleep(poll_s)


# --------------------------------------------------------------------------- executor side

_PROC = Path("/proc")
_cache: dict[int, dict[str, str]] = {}


def _parent_pid(pid: int, proc: Path) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ..." - comm may contain spaces and parentheses.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if len(fields) > 1 else None


def _executor_jvm_args(proc: Path = _PROC, pid: int | None = None) -> dict[str, str]:
    """``--executor-id``, ``--hostname``, ``--app-id`` of the executor JVM this process descends
    from (walking up ``/proc``), or ``{}`` when there is none (the driver, local mode)."""
    start = os.getpid() if pid is None else pid
    if proc == _PROC and start in _cache:
        return _cache[start]
    found: dict[str, str] = {}
    current: int | None = start
    for _ in range(16):
        if current is None or current <= 1:
            break
        try:
            argv = (proc / str(current) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            break
        args = [a.decode(errors="replace") for a in argv]
        if "--executor-id" in args:
            for flag in ("--executor-id", "--hostname", "--app-id"):
                if flag in args and args.index(flag) + 1 < len(args):
                    found[flag[2:]] = args[args.index(flag) + 1]
            break
        current = _parent_pid(current, proc)
    if proc == _PROC:
        _cache[start] = found
    return found


def _log_url_query(environ: Mapping[str, str]) -> dict[str, list[str]]:
    url = environ.get("SPARK_LOG_URL_STDERR") or environ.get("SPARK_LOG_URL_STDOUT") or ""
    return parse_qs(urlparse(url).query) if url else {}


def current_executor_id(
    environ: Mapping[str, str] | None = None, *, proc: Path = _PROC
) -> str | None:
    """The id of the executor running this Python worker: ``executorId=`` of
    ``SPARK_LOG_URL_STDERR`` (set by standalone workers), else the executor JVM's
    ``--executor-id`` (found by walking up ``/proc``). None outside an executor (driver, local
    mode)."""
    env = os.environ if environ is None else environ
    ids = _log_url_query(env).get("executorId")
    if ids and ids[0]:
        return ids[0]
    return _executor_jvm_args(proc).get("executor-id")


def current_executor_host(
    environ: Mapping[str, str] | None = None, *, proc: Path = _PROC
) -> str | None:
    """The host the executor running this Python worker registered with the driver: the executor
    JVM's ``--hostname`` (``/proc``), else ``SPARK_LOCAL_IP``, else the host of
    ``SPARK_LOG_URL_STDERR``. None outside an executor."""
    env = os.environ if environ is None else environ
    host = _executor_jvm_args(proc).get("hostname")
    if host:
        return host
    if env.get("SPARK_LOCAL_IP"):
        return env["SPARK_LOCAL_IP"]
    url = env.get("SPARK_LOG_URL_STDERR", "")
    return urlparse(url).hostname if url else None


class SparkExecutorLocationIdProvider:
    """The location id of the executor this code runs in (a ``LocationIdProvider``).

    The environment variable ``var`` (``AFFINITY_LOCATION_ID``) wins when it is set and not empty
    (set it per machine, e.g. in the worker's environment or from the Kubernetes Downward API, to
    give hierarchical ids like ``zone-a/node-1``); otherwise the executor's host
    (:func:`current_executor_host`); with ``fallback_hostname`` (the default), the machine's host
    name when the code does not run in an executor at all (the driver in local mode).
    """

    def __init__(
        self,
        var: str = EXECUTOR_LOCATION_ENV,
        *,
        environ: Mapping[str, str] | None = None,
        fallback_hostname: bool = True,
        proc: Path = _PROC,
    ) -> None:
        self.var = var
        self._environ = environ
        self.fallback_hostname = fallback_hostname
        self._proc = proc

    def location_id(self) -> str:
        env = os.environ if self._environ is None else self._environ
        value = env.get(self.var, "").strip() if self.var else ""
        if value:
            return value
        host = current_executor_host(env, proc=self._proc)
        if host:
            return host
        if self.fallback_hostname:
            name = socket.gethostname().strip()
            if name:
                return name
        raise LocationError(
            f"no executor location: {self.var or 'no variable'} is not set, no executor JVM "
            "(--hostname) above this process, and SPARK_LOCAL_IP/SPARK_LOG_URL_STDERR are unset"
        )

    def __repr__(self) -> str:
        return f"SparkExecutorLocationIdProvider(var={self.var!r})"


# --------------------------------------------------------------------------- pinned stages


@dataclass(frozen=True, slots=True)
class PinnedTask(Generic[R]):
    """Where one task was asked to run, where it ran, and what it returned."""

    task: str
    result: R
    wanted: str | None  # the executor id or host the placement named (None: no preference)
    executor_id: str | None  # the executor it ran on (None: not found, e.g. local mode)
    host: str | None
    pinned: bool | None  # ran where wanted (None: no preference was given)
    attempt: int
    seconds: float


@dataclass(frozen=True)
class PinnedRun(Generic[R]):
    """The outcome of :func:`run_pinned`: per task, and how many ran where they were placed."""

    tasks: Mapping[str, PinnedTask[R]]
    total: int  # tasks that had a placement
    pinned_ok: int  # of those, tasks that ran on the executor (or host) the placement named
    unplaceable: tuple[str, ...]  # tasks whose placement named no live executor or host
    seconds: float

    @property
    def ratio(self) -> float:
        """``pinned_ok / total`` (1.0 when no task had a placement)."""
        return self.pinned_ok / self.total if self.total else 1.0

    @property
    def results(self) -> dict[str, R]:
        return {name: t.result for name, t in self.tasks.items()}

    @property
    def ran_on(self) -> dict[str, str | None]:
        """Task -> executor id it ran on."""
        return {name: t.executor_id for name, t in self.tasks.items()}

    def report(self) -> str:
        text = f"{self.pinned_ok}/{self.total} tasks ran where placed"
        if self.unplaceable:
            text += f" ({len(self.unplaceable)} placed on no live executor)"
        return text


def _scala_seq(jvm: Any, items: Iterable[Any]) -> Any:
    java_list = jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()


def _string_class_tag(jvm: Any) -> Any:
    return jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))


def _encode(value: object) -> str:
    from pyspark import cloudpickle

    dumps: Callable[[object], bytes] = cloudpickle.dumps  # untyped in pyspark
    return base64.b64encode(dumps(value)).decode("ascii")


def _decode(text: str) -> Any:
    import pickle

    return pickle.loads(base64.b64decode(text))


def _resolve(
    placement: Mapping[str, str], tasks: Iterable[str], executors: Sequence[SparkExecutor]
) -> tuple[dict[str, list[str]], list[str]]:
    """Task -> preferred-location strings, and the tasks whose placement names nothing live."""
    by_id = {e.executor_id: e for e in executors}
    hosts = {e.host for e in executors}
    locations: dict[str, list[str]] = {}
    unplaceable = []
    for task in tasks:
        wanted = placement.get(task)
        if wanted is None:
            locations[task] = []
        elif wanted in by_id:
            locations[task] = [by_id[wanted].task_location]
        elif wanted in hosts:
            locations[task] = [wanted]
        else:
            locations[task] = []
            unplaceable.append(task)
    return locations, unplaceable


def pinned_rdd(
    sc: SparkContext,
    items_by_task: Mapping[str, P],
    placement: Mapping[str, str],
    *,
    executors: Sequence[SparkExecutor] | None = None,
) -> tuple[RDD[tuple[str, P]], list[str]]:
    """An RDD with one partition per task (sorted by name), holding ``(task, payload)``, whose
    partitions prefer the executor (``executor_<host>_<id>``) or host the placement names.

    Narrow transformations (``mapPartitions``, ``map``, ...) keep the preference; a shuffle or a
    ``coalesce`` does not. Returns the RDD and the tasks whose placement names no live executor
    or host (they get no preference). Built with Scala's ``SparkContext.makeRDD(Seq[(T,
    Seq[String])])`` through py4j: PySpark has no public API for preferred locations.
    """
    from pyspark.rdd import RDD
    from pyspark.serializers import UTF8Deserializer

    live = SparkExecutors(sc).list() if executors is None else list(executors)
    tasks = sorted(items_by_task)
    locations, unplaceable = _resolve(placement, tasks, live)
    jvm = sc._jvm
    assert jvm is not None, "SparkContext is stopped"
    elements = [
        jvm.scala.Tuple2(_encode((task, items_by_task[task])), _scala_seq(jvm, locations[task]))
        for task in tasks
    ]
    jrdd = sc._jsc.sc().makeRDD(_scala_seq(jvm, elements), _string_class_tag(jvm)).toJavaRDD()
    utf8: Any = UTF8Deserializer  # untyped in pyspark
    encoded: RDD[str] = RDD(jrdd, sc, utf8())
    return encoded.map(_decode), unplaceable


class _PartitionRunner:
    """Runs ``fn(task, payload)`` on each element of a pinned partition (on the executor)."""

    def __init__(self, fn: Callable[[str, Any], Any]) -> None:
        self.fn = fn

    def __call__(
        self, items: Iterator[tuple[str, Any]]
    ) -> Iterator[tuple[str, Any, str | None, str | None, int, float]]:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        executor_id = current_executor_id()
        host = current_executor_host()
        for task, payload in items:
            start = time.perf_counter()
            result = self.fn(task, payload)
            yield task, result, executor_id, host, attempt, time.perf_counter() - start


class _LocalityWait:
    """Sets the locality-wait keys on the live SparkConf, and restores them."""

    def __init__(self, sc: SparkContext, wait: str | None) -> None:
        self._conf = sc._jsc.sc().conf()
        self._wait = wait
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        if self._wait is None:
            return
        for key in LOCALITY_WAIT_KEYS:
            self._saved[key] = str(self._conf.get(key)) if self._conf.contains(key) else None
            self._conf.set(key, self._wait)

    def __exit__(self, *exc: object) -> None:
        for key, value in self._saved.items():
            if value is None:
                self._conf.remove(key)
            else:
                self._conf.set(key, value)


def run_pinned(
    sc: SparkContext,
    items_by_task: Mapping[str, P],
    placement: Mapping[str, str],
    fn: Callable[[str, P], R],
    *,
    locality_wait: str | None = "30s",
    executors: Sequence[SparkExecutor] | None = None,
    description: str | None = None,
) -> PinnedRun[R]:
    """Run ``fn(task, payload)`` once per task, one Spark task each, pinned by ``placement``.

    ``placement`` maps a task to an executor id (the task prefers ``executor_<host>_<id>``,
    process-local) or to a host (it prefers ``<host>``, node-local); a task it leaves out has no
    preference, so an empty placement is Spark's default placement. A placement naming no live
    executor or host gives no preference and counts as not pinned (``unplaceable``).

    ``locality_wait`` (a Spark duration like ``"30s"``) is how long Spark keeps a task waiting
    for its executor (``spark.locality.wait.process``) and then its host
    (``spark.locality.wait.node``) before running it elsewhere; it is set on the live
    configuration for this job only. Make it longer than the busiest executor's backlog. ``None``
    keeps the application's configuration.

    Returns per task the result, the executor id it actually ran on, and ``pinned_ok/total``.
    """
    start = time.perf_counter()
    live = SparkExecutors(sc).list() if executors is None else list(executors)
    rdd, unplaceable = pinned_rdd(sc, items_by_task, placement, executors=live)
    hosts_of = {e.executor_id: e.host for e in live}
    previous_description = sc.getLocalProperty("spark.job.description")
    if description:
        sc.setJobDescription(description)
    try:
        with _LocalityWait(sc, locality_wait):
            rows = rdd.mapPartitions(_PartitionRunner(fn)).collect()
    finally:
        if description:
            sc.setLocalProperty("spark.job.description", previous_description)  # type: ignore[arg-type]
    live_hosts = set(hosts_of.values())
    tasks: dict[str, PinnedTask[R]] = {}
    ok = total = 0
    for task, result, executor_id, host, attempt, seconds in rows:
        wanted = placement.get(task)
        pinned: bool | None = None
        if wanted is not None:
            total += 1
            if wanted in hosts_of or wanted not in live_hosts:  # an executor id (maybe dead)
                pinned = executor_id == wanted
            else:  # a host
                pinned = host == wanted or hosts_of.get(executor_id or "") == wanted
            ok += int(pinned)
        tasks[task] = PinnedTask(task, result, wanted, executor_id, host, pinned, attempt, seconds)
    if unplaceable:
        shown = unplaceable[:10]
        log.warning("placement names no live executor for %d task(s): %s", len(unplaceable), shown)
    return PinnedRun(
        tasks=dict(sorted(tasks.items())),
        total=total,
        pinned_ok=ok,
        unplaceable=tuple(unplaceable),
        seconds=time.perf_counter() - start,
    )


# --------------------------------------------------------------------------- registrations


def executor_host_location(executor: SparkExecutor) -> str:
    """The default location of an executor: its host."""
    return executor.host


def _probe(_task: str, var: str) -> tuple[str | None, str]:
    return current_executor_id(), SparkExecutorLocationIdProvider(var).location_id()


class ProbedLocations:
    """``location_of`` for :class:`ExecutorRegistrar` that asks each executor for its own
    location (:class:`SparkExecutorLocationIdProvider` with ``var``), with one pinned probe task.

    A probe that ran on another executor (it can, after ``locality_wait``) is retried up to
    ``attempts`` times; then the executor's host is used and a warning logged.
    """

    def __init__(
        self,
        sc: SparkContext,
        *,
        var: str = EXECUTOR_LOCATION_ENV,
        locality_wait: str = "10s",
        attempts: int = 3,
    ) -> None:
        self.sc = sc
        self.var = var
        self.locality_wait = locality_wait
        self.attempts = attempts

    def __call__(self, executor: SparkExecutor) -> str:
        var = self.var
        for _ in range(self.attempts):
            run = run_pinned(
                self.sc,
                {"probe": var},
                {"probe": executor.executor_id},
                _probe,
                locality_wait=self.locality_wait,
                description=f"affinity: location of executor {executor.executor_id}",
            )
            ran_on, location = run.results["probe"]
            if ran_on == executor.executor_id:
                return location
        log.warning("could not probe executor %s; using its host", executor.executor_id)
        return executor.host


class ProcessorStore(Protocol):
    """Where processors register: the part of ``metadata.zk.ZkMetadataStore`` the registrar
    uses (``read_processors()[0]`` are the live registrations, each with its ``node`` path)."""

    def register_processor(
        self, processor_id: str, location_id: str, host: str = "", **extra: Any
    ) -> str: ...

    def unregister_processor(self, node: str) -> None: ...

    def read_processors(self) -> tuple[Sequence[Any], Sequence[Any]]: ...


@dataclass(frozen=True, slots=True)
class Registration:
    """One executor registered as a processor."""

    processor_id: str
    executor: SparkExecutor
    location_id: str
    node: str


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one :meth:`ExecutorRegistrar.sync` changed (processor ids)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()  # registered again: their node had vanished (session expiry)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.restored)


_PROCESSOR_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class ExecutorRegistrar:
    """Keeps one processor registration per live executor in a :class:`ProcessorStore` (a
    ``metadata.zk.ZkMetadataStore``).

    ``executors`` is a callable returning the live executors (a :class:`SparkExecutors`);
    ``prefix`` names the processors ``<prefix>-exec-<executor id>`` (use the application id, so a
    restarted application's executors, whose ids start again at 0, are new processors);
    ``location_of`` gives an executor's location id (default: its host). ``extra`` is stored in
    every registration (``executor_id`` and ``spark_app`` are added).

    Call :meth:`sync` whenever the executors may have changed (before each batch, or every
    ``interval_s`` with :meth:`start`), and :meth:`close` at the end.
    """

    store: ProcessorStore
    executors: Callable[[], Sequence[SparkExecutor]]
    prefix: str
    location_of: Callable[[SparkExecutor], str] = executor_host_location
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prefix = _PROCESSOR_ID_UNSAFE.sub("-", self.prefix).strip("-") or "spark"
        self._registered: dict[str, Registration] = {}
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    def for_context(
        cls,
        sc: SparkContext,
        store: ProcessorStore,
        *,
        prefix: str | None = None,
        location_of: Callable[[SparkExecutor], str] = executor_host_location,
        extra: Mapping[str, Any] | None = None,
    ) -> ExecutorRegistrar:
        """A registrar for ``sc``'s executors, processors named ``<app id>-exec-<id>``."""
        return cls(
            store,
            SparkExecutors(sc),
            prefix or str(sc.applicationId),
            location_of,
            {"spark_app": str(sc.applicationId), **(extra or {})},
        )

    def processor_id(self, executor_id: str) -> str:
        return f"{self.prefix}-exec-{executor_id}"

    @property
    def registrations(self) -> dict[str, Registration]:
        """Processor id -> registration, as of the last :meth:`sync`."""
        with self._lock:
            return dict(self._registered)

    def processor_locality(self) -> dict[str, str]:
        """Processor id -> location id of the registered executors."""
        return {pid: r.location_id for pid, r in self.registrations.items()}

    def executor_of(self, processor_id: str) -> SparkExecutor | None:
        registration = self.registrations.get(processor_id)
        return None if registration is None else registration.executor

    def placement(self, task_to_processor: Mapping[str, str]) -> dict[str, str]:
        """Task -> executor id, from a job model's task -> processor id (for :func:`run_pinned`).
        Tasks of processors that are not registered executors are left out (no preference)."""
        registered = self.registrations
        return {
            task: registered[pid].executor.executor_id
            for task, pid in task_to_processor.items()
            if pid in registered
        }

    def sync(self) -> SyncResult:
        """Register new executors, unregister lost ones, re-register vanished nodes."""
        with self._lock:
            live = {e.executor_id: e for e in self.executors()}
            removed = []
            for pid, registration in list(self._registered.items()):
                current = live.get(registration.executor.executor_id)
                if current is None or current != registration.executor:
                    self.store.unregister_processor(registration.node)
                    del self._registered[pid]
                    removed.append(pid)
            restored = []
            if self._registered:
                alive_nodes = {r.node for r in self.store.read_processors()[0]}
                for pid, registration in list(self._registered.items()):
                    if registration.node not in alive_nodes:
                        self._registered[pid] = self._register(registration.executor)
                        restored.append(pid)
            added = []
            known = {r.executor.executor_id for r in self._registered.values()}
            for executor_id, executor in live.items():
                if executor_id not in known:
                    registration = self._register(executor)
                    self._registered[registration.processor_id] = registration
                    added.append(registration.processor_id)
            result = SyncResult(tuple(added), tuple(removed), tuple(restored))
        if result.changed:
            log.info("executors synced: +%s -%s restored %s", added, removed, restored)
        return result

    def _register(self, executor: SparkExecutor) -> Registration:
        pid = self.processor_id(executor.executor_id)
        location = self.location_of(executor)
        extra = {**self.extra, "executor_id": executor.executor_id}
        node = self.store.register_processor(pid, location, host=executor.host, **extra)
        return Registration(pid, executor, location, node)

    def start(self, interval_s: float = 1.0) -> None:
        """Call :meth:`sync` every ``interval_s`` on a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.sync()
                except Exception:  # keep syncing; the next round retries
                    log.exception("executor sync failed")

        self._thread = threading.Thread(target=loop, name="affinity-executor-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def close(self) -> None:
        """Stop syncing and unregister every executor this registrar registered."""
        self.stop()
        with self._lock:
            for registration in self._registered.values():
                self.store.unregister_processor(registration.node)
            self._registered.clear()

    def __enter__(self) -> ExecutorRegistrar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
