"""Groupers against the lower bounds and against peers: movement, locality, balance, speed.

Scenarios (``groupers/testing/scenarios.py``): one processor leaves, one joins, scale 10 -> 13,
rolling restart (each processor replaced by a new id at the same location, one rebalance per
replacement), each with 1 and 10 processors per location, at T=10k/100k tasks and P=100/1,000
processors. For every scenario and grouper: tasks moved against the lower bound, tasks kept at
their recorded location against the best a balanced, movement-minimal answer can keep (exact
min-cost flow), max - min tasks per processor, and the median wall time of one rebalance.

Groupers, all in the same run:

- ``host-affinity`` (ours), also with ``standby_replicas=1`` (its actives are the same; the
  time includes placing a standby per task), and ``round-robin`` through
  ``groupers.get_grouper``;
- kafka-python's sticky assignor (``StickyAssignmentExecutor``, driven without a broker: tasks
  are the partitions of one topic, processors the members, each member's previous partitions
  its user data). It is slow (seconds at T=10k, minutes at T=100k), so it runs every
  single-rebalance scenario at T=10k, a rolling restart only where it fits a time budget, and
  at T=100k only if a probe call finishes within a timeout (the table says what was skipped);
- a consistent-hash ring (``uhashring.HashRing`` over the processor ids, task -> ring node).

host-affinity and sticky are stateful and start from the scenario's steady state. The ring and
round-robin ignore history, so each starts from its own steady state (its answer on the
processors before the change), which is how they would run in practice; their lower bound is
computed against that state. The three peers are locality-blind: with 10 processors per location
they give the same assignment as with 1, so it is computed once and measured against both.

A separate check builds T=1,000,000 tasks, P=10,000 processors and runs host-affinity on
one-leaves in a fresh process, reporting its peak RSS.

Usage: ``python benchmarks/groupers.py [--quick] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# This file is called groupers.py: keep its folder off sys.path so `import groupers` is the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Collection, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks._report import DOC, machine, median_time, table, write_section  # noqa: E402
from groupers import GrouperMetadata, TaskNameGrouper, get_grouper, validate  # noqa: E402
from groupers.measures import movement_lower_bound, owners, tasks_moved  # noqa: E402
from groupers.testing import oracles  # noqa: E402
from groupers.testing import scenarios as sc  # noqa: E402
from metadata.model import ContainerModel, FrozenMap, TaskModel  # noqa: E402

# ----------------------------------------------------------------------------- peers


class _OneTopicCluster:
    """Just enough of kafka-python's ClusterMetadata for the sticky executor: one topic."""

    TOPIC = "tasks"

    def __init__(self, partitions: int) -> None:
        self._partitions = set(range(partitions))

    def topics(self) -> set[str]:
        return {self.TOPIC}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._partitions if topic == self.TOPIC else None


class KafkaStickyGrouper:
    """kafka-python's sticky assignor as a TaskNameGrouper (task i in name order = partition i)."""

    name = "kafka sticky"

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        from kafka.coordinator.assignors.sticky.sticky_assignor import (
            StickyAssignmentExecutor,
            StickyAssignorMemberMetadataV1,
        )
        from kafka.structs import TopicPartition

        by_name = {task.name: task for task in tasks}
        names = sorted(by_name)
        index = {name: i for i, name in enumerate(names)}
        live = metadata.processor_locality
        owned: dict[str, list[Any]] = {pid: [] for pid in sorted(live)}
        for name in names:
            owner = metadata.previous_task_to_processor.get(name)
            if owner in owned:
                owned[owner].append(TopicPartition(_OneTopicCluster.TOPIC, index[name]))
        members = {
            pid: StickyAssignorMemberMetadataV1(
                subscription=[_OneTopicCluster.TOPIC],
                partitions=parts,
                generation=1 if parts else -1,
            )
            for pid, parts in owned.items()
        }
        executor = StickyAssignmentExecutor(_OneTopicCluster(len(names)), members)
        executor.perform_initial_assignment()
        executor.balance()
        return {
            ContainerModel(
                pid,
                live[pid],
                FrozenMap(
                    (names[tp.partition], by_name[names[tp.partition]])
                    for tp in sorted(executor.current_assignment.get(pid, []))
                ),
            )
            for pid in owned
        }


class HashRingGrouper:
    """A consistent-hash ring (uhashring, 160 virtual nodes each) over the live processor ids."""

    name = "hash ring"

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        from uhashring import HashRing

        live = metadata.processor_locality
        ring = HashRing(nodes=sorted(live))
        owned: dict[str, dict[str, TaskModel]] = {pid: {} for pid in live}
        for task in tasks:
            owned[ring.get_node(task.name)][task.name] = task
        return {
            ContainerModel(pid, live[pid], FrozenMap(sorted(mine.items())))
            for pid, mine in owned.items()
        }


@dataclass(frozen=True)
class Contender:
    name: str
    grouper: TaskNameGrouper
    stateful: bool  # starts from the scenario's steady state (else from its own layout)
    locality_blind: bool  # same answer whatever the locations
    repeat: int


# ----------------------------------------------------------------------------- running


@dataclass
class Row:
    kind: str
    per_location: int
    tasks: int
    processors: int
    grouper: str
    metrics: oracles.Metrics | None
    seconds: float | None
    note: str = ""

    def cells(self) -> list[object]:
        layout = f"{self.per_location}/location"
        head: list[object] = [self.kind, layout, self.tasks, self.processors, self.grouper]
        m = self.metrics
        if m is None:
            return [*head, "-", "-", "-", "-", "-", self.note]
        best = f"{m.locality_best}" if m.locality_exact else f"<= {m.locality_best}"
        time_cell = _fmt_seconds(self.seconds)
        if self.note:
            time_cell += f" ({self.note})"
        return [*head, m.moved, m.lower_bound, m.locality_kept, best, m.max_minus_min, time_cell]


HEADERS = [
    "scenario",
    "layout",
    "T",
    "P",
    "grouper",
    "moved",
    "lower bound",
    "kept local",
    "best local",
    "max-min",
    "median time",
]


def _fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.1f} ms"


def _own_layout(contender: Contender, item: sc.Scenario | sc.RollingRestart) -> Any:
    if contender.stateful:
        return item
    start = GrouperMetadata(item.before.processor_locality, {}, {})
    return sc.rebased(item, contender.grouper.group(item.tasks, start))


@dataclass
class _Answer:
    """A locality-blind peer's answer, reused for the other per-location layout."""

    seconds: float
    owners: list[dict[str, str]]  # per step: task -> processor


def run_one(
    contender: Contender, item: sc.Scenario, cached: _Answer | None
) -> tuple[oracles.Metrics, float, _Answer]:
    """Run (or re-measure) one contender on one scenario; returns metrics, median time, answer."""
    item = _own_layout(contender, item)
    if cached is None:
        seconds, containers = median_time(
            lambda: contender.grouper.group(item.tasks, item.metadata), contender.repeat
        )
        answer = _Answer(seconds, [owners(containers)])
    else:
        answer = cached
        containers = _from_owners(item.tasks, item.metadata, cached.owners[0])
    validate(item.tasks, item.metadata, containers)
    return oracles.measure(item.tasks, item.metadata, containers), answer.seconds, answer


def _from_owners(
    tasks: Sequence[TaskModel], metadata: GrouperMetadata, owners: dict[str, str]
) -> set[ContainerModel]:
    live = metadata.processor_locality
    mine: dict[str, dict[str, TaskModel]] = {pid: {} for pid in live}
    for task in tasks:
        mine[owners[task.name]][task.name] = task
    return {ContainerModel(pid, live[pid], FrozenMap(sorted(t.items()))) for pid, t in mine.items()}


class _Recording:
    """Wraps a grouper and records each answer (task -> processor) for replay."""

    def __init__(self, grouper: TaskNameGrouper) -> None:
        self.grouper = grouper
        self.answers: list[dict[str, str]] = []

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        out: set[ContainerModel] = self.grouper.group(tasks, metadata)
        self.answers.append(owners(out))
        return out


class _Replay:
    """Plays back recorded answers, one per call (a locality-blind peer on another layout)."""

    def __init__(self, answers: list[dict[str, str]]) -> None:
        self.answers = answers
        self._next = 0

    def group(self, tasks: Collection[TaskModel], metadata: GrouperMetadata) -> set[ContainerModel]:
        owners = self.answers[self._next]
        self._next += 1
        return _from_owners(list(tasks), metadata, owners)


def run_rolling(
    contender: Contender, item: sc.RollingRestart, cached: _Answer | None
) -> tuple[oracles.Metrics, float, _Answer]:
    item = _own_layout(contender, item)
    if cached is not None:
        result = sc.run_rolling_restart(_Replay(cached.owners), item)
        return result.total, cached.seconds, cached
    recording = _Recording(contender.grouper)
    result = sc.run_rolling_restart(recording, item)
    seconds = statistics.median(result.seconds)
    return result.total, seconds, _Answer(seconds, recording.answers)


@dataclass(frozen=True)
class Plan:
    sizes: list[tuple[int, int]]
    per_location: list[int]
    rolling_sample: int
    memory: tuple[int, int]
    quick: bool
    sticky_max_tasks: int = 10_000  # kafka sticky always runs up to this many tasks
    sticky_limit: float = 45.0  # beyond: timeout of the probe call (seconds)
    sticky_rolling_limit: float = 60.0  # budget of a sticky rolling restart (seconds)


FULL = Plan(
    [(10_000, 100), (10_000, 1_000), (100_000, 100), (100_000, 1_000)],
    [1, 10],
    rolling_sample=10,
    memory=(1_000_000, 10_000),
    quick=False,
)
QUICK = Plan([(1_000, 20)], [1, 10], rolling_sample=3, memory=(20_000, 200), quick=True)


def contenders(plan: Plan) -> list[Contender]:
    return [
        Contender("host-affinity", get_grouper("host-affinity"), True, False, 5),
        Contender(
            "host-affinity standby_replicas=1",
            get_grouper("host-affinity", standby_replicas=1),
            True,
            False,
            3,
        ),
        Contender("kafka sticky", KafkaStickyGrouper(), True, True, 1),
        Contender("hash ring", HashRingGrouper(), False, True, 3),
        Contender("round-robin", get_grouper("round-robin"), False, True, 3),
    ]


def sticky_probe(tasks: int, processors: int, limit: float) -> float | None:
    """Seconds of one sticky call (one-leaves at T, P) in a child process; None past ``limit``."""
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--sticky-child", str(tasks),
             str(processors)],
            capture_output=True, text=True, timeout=limit, check=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    return float(proc.stdout.strip().splitlines()[-1])


def sticky_child(tasks: int, processors: int) -> None:
    item = sc.one_leaves(tasks, processors)
    start = time.perf_counter()
    KafkaStickyGrouper().group(item.tasks, item.metadata)
    print(time.perf_counter() - start)


def _sticky_skip(
    plan: Plan,
    seen: dict[tuple[int, int], float],
    probes: dict[tuple[int, int], float | None],
    tasks: int,
    processors: int,
    steps: int,
) -> str:
    """Why kafka sticky is skipped here ("" to run it).

    Up to ``plan.sticky_max_tasks`` it always runs one rebalance. Beyond, one call is first
    probed in a child process with ``plan.sticky_limit`` as timeout; a timed-out probe skips
    that size and every larger one. A rolling restart runs only when ``steps`` times the
    one-leaves call at this size (a step is much like it) fits in ``plan.sticky_rolling_limit``.
    """
    size = (tasks, processors)
    if tasks > plan.sticky_max_tasks and size not in seen:
        limit = plan.sticky_limit
        for (t, p), probed in sorted(probes.items()):
            if probed is None and t <= tasks and p <= processors:
                return f"skipped: > {limit:.0f} s (one call at T={t} P={p} did not finish in time)"
        probes[size] = probed = sticky_probe(tasks, processors, limit)
        if probed is None:
            return f"skipped: > {limit:.0f} s (one call at T={tasks} P={processors} timed out)"
        seen[size] = probed
    if steps > 1 and size in seen and steps * seen[size] > plan.sticky_rolling_limit:
        return (
            f"skipped: ~{steps * seen[size]:.0f} s ({steps} steps x {seen[size]:.0f} s per call, "
            f"limit {plan.sticky_rolling_limit:.0f} s)"
        )
    return ""


def run(plan: Plan, log: Any = print) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    sticky_seen: dict[tuple[int, int], float] = {}
    probes: dict[tuple[int, int], float | None] = {}
    facts: dict[str, Any] = {}
    for tasks, processors in plan.sizes:
        for kind in sc.SCENARIO_KINDS:
            cache: dict[str, _Answer] = {}
            for per_location in plan.per_location:
                item = sc.build(
                    kind,
                    tasks,
                    processors,
                    per_location=per_location,
                    sample=plan.rolling_sample,
                )
                for contender in contenders(plan):
                    cached = cache.get(contender.name) if contender.locality_blind else None
                    steps = len(item.replacements) if isinstance(item, sc.RollingRestart) else 1
                    if contender.name == "kafka sticky" and cached is None:
                        skip = _sticky_skip(plan, sticky_seen, probes, tasks, processors, steps)
                        if skip:
                            rows.append(Row(kind, per_location, tasks, processors,
                                            contender.name, None, None, skip))  # fmt: skip
                            log(" | ".join(str(c) for c in rows[-1].cells()))
                            continue
                    start = time.perf_counter()
                    if isinstance(item, sc.RollingRestart):
                        metrics, seconds, answer = run_rolling(contender, item, cached)
                    else:
                        metrics, seconds, answer = run_one(contender, item, cached)
                    wall = time.perf_counter() - start
                    if contender.locality_blind:
                        cache[contender.name] = answer
                    if contender.name == "kafka sticky" and kind == "one-leaves" and not cached:
                        sticky_seen[(tasks, processors)] = seconds  # a rolling step's cost
                    note = ""
                    if isinstance(item, sc.RollingRestart):
                        note = f"per step, {steps} of {processors} restarted"
                    if cached is not None:
                        note = (note + "; " if note else "") + "same answer as 1/location"
                    row = Row(kind, per_location, tasks, processors, contender.name, metrics,
                              seconds, note)  # fmt: skip
                    rows.append(row)
                    log(" | ".join(str(c) for c in row.cells()) + f"   [{wall:.1f} s]")
    facts["sticky_seen"] = {f"T={t} P={p}": s for (t, p), s in sticky_seen.items()}
    return rows, facts


def ratios(rows: list[Row], tasks: int, processors: int) -> list[str]:
    """Kafka sticky's median time over ours, per scenario, at one size."""
    out = []
    for kind in sc.SCENARIO_KINDS:
        for per_location in (1, 10):
            ours = _find(rows, kind, per_location, tasks, processors, "host-affinity")
            peer = _find(rows, kind, per_location, tasks, processors, "kafka sticky")
            if ours is None or peer is None or ours.seconds is None or peer.seconds is None:
                continue
            if "same answer" in peer.note:
                continue
            out.append(
                f"{kind} ({per_location}/location): sticky {_fmt_seconds(peer.seconds)}, "
                f"host-affinity {_fmt_seconds(ours.seconds)}: {peer.seconds / ours.seconds:,.0f}x"
            )
    return out


def _find(
    rows: list[Row], kind: str, per_location: int, tasks: int, processors: int, grouper: str
) -> Row | None:
    for row in rows:
        if (row.kind, row.per_location, row.tasks, row.processors, row.grouper) == (
            kind,
            per_location,
            tasks,
            processors,
            grouper,
        ):
            return row
    return None


# ----------------------------------------------------------------------------- memory


def memory_child(tasks: int, processors: int) -> None:
    """In a fresh process: build one-leaves at (T, P), run host-affinity, print JSON facts."""
    start = time.perf_counter()
    item = sc.one_leaves(tasks, processors)
    built = time.perf_counter() - start
    grouper = get_grouper("host-affinity")
    start = time.perf_counter()
    containers = grouper.group(item.tasks, item.metadata)
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    hwm_kb = _vm_hwm_kb()
    moved = tasks_moved(item.metadata.previous_task_to_processor, owners(containers))
    sizes = [len(c.tasks) for c in containers]
    facts = {
        "tasks": tasks,
        "processors": processors,
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "vm_hwm_mb": round(hwm_kb / 1024, 1) if hwm_kb is not None else None,
        "build_s": round(built, 2),
        "group_s": round(seconds, 2),
        "moved": moved,
        "lower_bound": movement_lower_bound(item.tasks, item.metadata),
        "max_minus_min": max(sizes) - min(sizes),
    }
    print(json.dumps(facts))


def _vm_hwm_kb() -> int | None:
    """This process's own peak RSS (Linux ``VmHWM``), or None where there is no /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def memory_check(tasks: int, processors: int) -> dict[str, Any]:
    """Run :func:`memory_child` in a fresh interpreter.

    Run it before anything big: on Linux ``ru_maxrss`` survives fork + exec, so a child of a
    large parent would report the parent's size (``VmHWM`` is the child's own and cross-checks).
    """
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--memory-child", str(tasks),
         str(processors)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-500:]}
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return facts


# ----------------------------------------------------------------------------- report


def report(plan: Plan, rows: list[Row], memory: dict[str, Any], elapsed: float) -> str:
    lines = [
        "## Groupers: movement, locality, balance, speed",
        "",
        f"`python benchmarks/groupers.py{' --quick' if plan.quick else ''}` on {machine()}; "
        f"whole run {elapsed:.0f} s.",
        "",
        "- **moved**: tasks whose processor changed; **lower bound**: the fewest any balanced "
        "answer can move (`groupers.measures.movement_lower_bound`).",
        "- **kept local**: tasks on a processor at their recorded location; **best local**: the "
        "most a balanced answer that moves only the lower bound can keep (`best_locality`, exact: "
        "in closed form here, a min-cost flow in general; `<=` would mark the cheap upper bound).",
        "- **max-min**: tasks on the fullest minus the emptiest processor (rolling restart: the "
        "worst step). **median time**: one rebalance (rolling restart: median step).",
        f"- Rolling restart replaces {plan.rolling_sample} processors (a sample), one rebalance "
        "each; figures are sums over the steps.",
        "- host-affinity and kafka sticky start from the scenario's balanced steady state; the "
        "hash ring and round-robin keep no history and start from their own steady state (their "
        "answer before the change). The peers ignore locations, so with 10/location they give "
        "the same answer as with 1/location (reused, same time).",
        "- The hash ring is not balanced, so it can move fewer tasks than the lower bound and keep "
        "more local than the best balanced answer: both yardsticks assume balance (max-min <= 1).",
        "",
        table(HEADERS, [row.cells() for row in rows]),
        "",
    ]
    if not plan.quick:
        lines.append("Kafka sticky vs host-affinity, median time at T=10,000, P=1,000:")
        lines.append("")
        lines.extend(f"- {line}" for line in ratios(rows, 10_000, 1_000) or ["(not measured)"])
        lines.append("")
    ours = [r for r in rows if r.grouper == "host-affinity" and r.metrics is not None]
    misses = [
        r
        for r in ours
        if r.metrics is not None
        and (
            r.metrics.moved != r.metrics.lower_bound
            or r.metrics.locality_kept != r.metrics.locality_best
            or r.metrics.max_minus_min > 1
        )
    ]
    missed = ", ".join(f"{r.kind} {r.per_location}/location T={r.tasks} P={r.processors}"
                       for r in misses)  # fmt: skip
    lines.append(
        f"host-affinity: moved exactly the lower bound, kept the best locality and max-min <= 1 "
        f"in {len(ours) - len(misses)} of {len(ours)} scenarios"
        + (f"; misses in: {missed}." if misses else ".")
    )
    for size in plan.sizes:
        times = [
            r.seconds for r in ours if (r.tasks, r.processors) == size and r.seconds is not None
        ]
        if times:
            lines.append(
                f"- host-affinity median over scenarios at T={size[0]:,} P={size[1]:,}: "
                f"{_fmt_seconds(statistics.median(times))} (max {_fmt_seconds(max(times))})"
            )
    lines.append("")
    if "error" in memory:
        lines.append(f"Memory check failed: `{memory['error']}`")
    else:
        lines.append(
            f"Memory: one-leaves at T={memory['tasks']:,}, P={memory['processors']:,} with "
            f"host-affinity in a fresh process (building the inputs included): peak RSS "
            f"**{memory['peak_rss_mb']:,} MB** (`ru_maxrss`; the process's own `VmHWM`: "
            f"{memory.get('vm_hwm_mb')} MB); building {memory['build_s']} s, grouping "
            f"{memory['group_s']} s; moved {memory['moved']:,} (lower bound "
            f"{memory['lower_bound']:,}), max-min {memory['max_minus_min']}."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--memory-child", nargs=2, type=int, metavar=("T", "P"), help="internal")
    parser.add_argument("--sticky-child", nargs=2, type=int, metavar=("T", "P"), help="internal")
    args = parser.parse_args(argv)
    if args.memory_child:
        memory_child(*args.memory_child)
        return 0
    if args.sticky_child:
        sticky_child(*args.sticky_child)
        return 0
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    memory = memory_check(*plan.memory)  # first, while this process is still small
    print(f"memory check: {memory}", flush=True)
    rows, _ = run(plan, log=lambda line: print(line, flush=True))
    markdown = report(plan, rows, memory, time.perf_counter() - started)
    print()
    print(markdown)
    if not args.no_write:
        write_section("groupers", markdown, doc=args.doc)
        print(f"wrote section 'groupers' of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
