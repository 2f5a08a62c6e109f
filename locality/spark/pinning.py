"""Driver side: Spark stages pinned to the executors (or hosts) a placement names.

:func:`run_pinned` runs one Spark task per affinity task, each with the preferred location
``executor_<host>_<executorId>`` of the executor the placement names (or ``<host>`` when the
placement names a host), and reports where each task actually ran (:class:`PinnedRun`, one
:class:`PinnedTask` per task). :func:`pinned_rdd` builds the pinned RDD alone.

The locality wait
-----------------
Spark keeps a pinned task waiting for its preferred executor for ``spark.locality.wait.process``
(default: ``spark.locality.wait``, 3 s), then for any executor on the preferred host for
``spark.locality.wait.node``, then runs it anywhere. Spark reads these when a stage is submitted
(``TaskSetManager``), from the SparkContext's live configuration, which is normally fixed at
session creation. ``run_pinned(locality_wait=...)`` sets both on the live configuration for the
duration of its job and restores them afterwards; with ``locality_wait=None`` the application's
own configuration applies. See ``docs/spark.md``.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from locality.spark.executors import SparkExecutor, SparkExecutors
from locality.spark.provider import current_executor_host, current_executor_id

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.rdd import RDD

__all__ = [
    "LOCALITY_WAIT_KEYS",
    "LocalityWait",
    "PinnedRun",
    "PinnedTask",
    "RanRow",
    "job_description",
    "pinned_rdd",
    "pinned_run",
    "resolve_locations",
    "run_pinned",
]

P = TypeVar("P")
R = TypeVar("R")

log = logging.getLogger(__name__)

#: The configuration keys :func:`run_pinned` sets from its ``locality_wait`` argument.
LOCALITY_WAIT_KEYS = ("spark.locality.wait.process", "spark.locality.wait.node")

#: Where one pinned task ran: task, result, executor id, host, attempt, seconds.
RanRow = tuple[str, Any, str | None, str | None, int, float]


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
    # JavaConverters: in Scala 2.12 (Spark 3.5) and 2.13 (Spark 4); an immutable List is a Seq
    # for both makeRDD signatures
    return jvm.scala.collection.JavaConverters.asScalaBuffer(java_list).toList()


def _string_class_tag(jvm: Any) -> Any:
    return jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))


def _encode(value: object) -> str:
    from pyspark import cloudpickle

    dumps: Callable[[object], bytes] = cloudpickle.dumps  # untyped in pyspark
    return base64.b64encode(dumps(value)).decode("ascii")


def _decode(text: str) -> Any:
    import pickle

    return pickle.loads(base64.b64decode(text))


def resolve_locations(
    placement: Mapping[str, str], tasks: Iterable[str], executors: Sequence[SparkExecutor]
) -> tuple[dict[str, list[str]], list[str]]:
    """Task -> preferred-location strings (``executor_<host>_<id>`` for an executor id, the host
    for a host, none for a task the placement leaves out), and the tasks whose placement names
    no live executor or host (no preference either)."""
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
    locations, unplaceable = resolve_locations(placement, tasks, live)
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

    def __call__(self, items: Iterator[tuple[str, Any]]) -> Iterator[RanRow]:
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        executor_id = current_executor_id()
        host = current_executor_host()
        for task, payload in items:
            start = time.perf_counter()
            result = self.fn(task, payload)
            yield task, result, executor_id, host, attempt, time.perf_counter() - start


class LocalityWait:
    """Sets the locality-wait keys on the live SparkConf for a job, and restores them (``with
    LocalityWait(sc, "30s"): ...``; ``None`` leaves the configuration alone)."""

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


@contextlib.contextmanager
def job_description(sc: SparkContext, description: str | None) -> Iterator[None]:
    """Sets the Spark job description (when given), and restores the previous one."""
    previous = sc.getLocalProperty("spark.job.description")
    if description:
        sc.setJobDescription(description)
    try:
        yield
    finally:
        if description:
            sc.setLocalProperty("spark.job.description", previous)  # type: ignore[arg-type]


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
    with job_description(sc, description), LocalityWait(sc, locality_wait):
        rows: list[RanRow] = rdd.mapPartitions(_PartitionRunner(fn)).collect()
    return pinned_run(rows, placement, live, unplaceable, time.perf_counter() - start)


def pinned_run(
    rows: Iterable[RanRow],
    placement: Mapping[str, str],
    live: Sequence[SparkExecutor],
    unplaceable: Sequence[str],
    seconds: float,
) -> PinnedRun[Any]:
    """The :class:`PinnedRun` of tasks that ran where ``rows`` say (one home for "ran where
    placed", whatever ran them: :func:`run_pinned` or a pinned shuffle)."""
    tasks = _pinned_tasks(rows, placement, live)
    if unplaceable:
        shown = list(unplaceable)[:10]
        log.warning("placement names no live executor for %d task(s): %s", len(unplaceable), shown)
    placed = [t for t in tasks.values() if t.pinned is not None]
    return PinnedRun(
        tasks=dict(sorted(tasks.items())),
        total=len(placed),
        pinned_ok=sum(1 for t in placed if t.pinned),
        unplaceable=tuple(unplaceable),
        seconds=seconds,
    )


def _pinned_tasks(
    rows: Iterable[RanRow], placement: Mapping[str, str], live: Sequence[SparkExecutor]
) -> dict[str, PinnedTask[Any]]:
    """One :class:`PinnedTask` per row, with whether it ran where ``placement`` wanted it."""
    hosts_of = {e.executor_id: e.host for e in live}
    live_hosts = set(hosts_of.values())
    tasks: dict[str, PinnedTask[Any]] = {}
    for task, result, executor_id, host, attempt, seconds in rows:
        wanted = placement.get(task)
        pinned: bool | None = None
        if wanted is not None:
            if wanted in hosts_of or wanted not in live_hosts:  # an executor id (maybe dead)
                pinned = executor_id == wanted
            else:  # a host
                pinned = host == wanted or hosts_of.get(executor_id or "") == wanted
        tasks[task] = PinnedTask(task, result, wanted, executor_id, host, pinned, attempt, seconds)
    return tasks
