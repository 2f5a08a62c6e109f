"""The Markdown section ``benchmarks/rebalance.py`` writes: what one death measured
(:class:`Death`) and one size (:class:`Row`), the measures per size, and the goals of issue 16
at P=1,000 with the figures measured before the work on them ("today")."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks._report import machine, table

__all__ = ["Death", "Row", "report"]

#: Issue 16's goals (at P=1,000).
GOAL_COORDINATOR_MS = 300  # death -> published, beyond the debounce
GOAL_SURVIVOR_CPU_MS = 2.0  # one survivor's CPU per rebalance
GOAL_BOUND_RATIO = 1.5  # beyond-debounce wall time over this machine's bound

#: Measured before this work (issue 16: beyond debounce, processors' CPU to DONE, CPU per
#: survivor per rebalance); at P=1,000 the old benchmark did not settle on this machine.
TODAY: dict[int, tuple[str, str, str]] = {
    100: ("530 ms", "560 ms", "about 8 ms"),
    300: ("1,678 ms", "2,480 ms", "about 8 ms"),
    1000: ("did not settle (sessions expired)", "-", "-"),
}


@dataclass
class Death:
    gone_to_published: float
    published_to_done: float
    gone_to_done: float
    coordinator_writes: int
    coordinator_reads: int
    processor_writes: int
    processor_reads: int
    moved: int
    survivors: int
    cpu_processors: float = 0.0  # death -> DONE, all worker processes
    cpu_coordinator: float = 0.0  # death -> DONE, this process and the grouper's
    cpu_coordinator_published: float = 0.0  # death -> published, the same
    cpu_zookeeper: float = 0.0
    cpu_rebalance: float = 0.0  # death -> every survivor settled (locality written), workers
    idle_rebalance: float = 0.0  # what the workers use idle over that time (subtracted)
    coordinator_requests: int = 0
    processor_requests: int = 0
    first_join: float = 0.0
    last_join: float = 0.0
    last_join_to_done: float = 0.0
    load: float = 0.0  # 1-minute load average at the death
    grouper: float = 0.0  # the leader's grouper run (its rebalance history)
    returned_late: float = 0.0  # after the commit: the leader's publish call returned
    observed_late: float = 0.0  # after the commit: an observer's watch saw it
    observed_to_done: float = 0.0  # death -> DONE as the observer saw it (when it samples CPU)

    @property
    def cpu_to_done(self) -> float:
        return self.cpu_processors + self.cpu_coordinator + self.cpu_zookeeper

    @property
    def survivor_cpu(self) -> float:
        """One survivor's CPU for the whole rebalance (idle CPU subtracted)."""
        return max(0.0, self.cpu_rebalance - self.idle_rebalance) / max(1, self.survivors)


@dataclass
class Row:
    processors: int
    tasks: int
    debounce_s: float
    workers: int
    deaths: list[Death] = field(default_factory=list)
    decode_s: float = 0.0
    view_s: float = 0.0
    #: the CPU of one plain get round trip (benchmarks/_reference.py) before and after the deaths
    reference_s: tuple[float, float] = (0.0, 0.0)

    def median(self, pick: Callable[[Death], float]) -> float:
        return statistics.median(pick(d) for d in self.deaths)

    @property
    def reference(self) -> float:
        """The machine's moment: the mean of the two reference measures."""
        return sum(self.reference_s) / 2


def ms(seconds: float, digits: int = 0) -> str:
    return f"{seconds * 1000:,.{digits}f} ms"


def _measures(row: Any) -> list[object]:
    cores = os.cpu_count() or 1
    beyond = row.median(lambda d: d.gone_to_done) - row.debounce_s
    observed = row.median(lambda d: d.observed_to_done) - row.debounce_s
    bound = row.median(lambda d: d.cpu_to_done) / cores
    per_survivor = row.median(lambda d: d.processor_requests / max(1, d.survivors))
    return [
        row.processors,
        f"{row.tasks:,}",
        f"{len(row.deaths)} ({row.workers})",
        f"{row.median(lambda d: d.load):.1f}",
        ms(row.median(lambda d: d.gone_to_done)),
        ms(beyond),
        f"{ms(row.median(lambda d: d.gone_to_published) - row.debounce_s)} "
        f"({ms(row.median(lambda d: d.cpu_coordinator_published))} CPU)",
        ms(row.median(lambda d: d.grouper)),
        f"+{ms(row.median(lambda d: d.returned_late))} / "
        f"+{ms(row.median(lambda d: d.observed_late))}",
        ms(row.median(lambda d: d.published_to_done)),
        f"+{row.median(lambda d: d.first_join) * 1000:,.0f} .. "
        f"+{row.median(lambda d: d.last_join) * 1000:,.0f} ms",
        f"{row.median(lambda d: d.cpu_processors) * 1000:,.0f} / "
        f"{row.median(lambda d: d.cpu_coordinator) * 1000:,.0f} / "
        f"{row.median(lambda d: d.cpu_zookeeper) * 1000:,.0f} ms",
        ms(bound),
        f"{observed / bound:.2f}x" if bound > 0 else "-",
        f"{ms(row.median(lambda d: d.survivor_cpu), 2)} "
        f"({min(d.survivor_cpu for d in row.deaths) * 1000:.2f}-"
        f"{max(d.survivor_cpu for d in row.deaths) * 1000:.2f}) = {_in_gets(row)}",
        f"{row.median(lambda d: d.coordinator_requests):,.0f} + "
        f"{row.median(lambda d: d.processor_requests):,.0f} ({per_survivor:.1f} each)",
        f"{row.median(lambda d: d.coordinator_writes):,.0f} / "
        f"{row.median(lambda d: d.coordinator_reads):,.0f}, "
        f"{row.median(lambda d: d.processor_writes):,.0f} / "
        f"{row.median(lambda d: d.processor_reads):,.0f}",
        f"{row.median(lambda d: d.moved):,.0f}",
        ms(row.view_s),
        ms(row.decode_s),
    ]


def _in_gets(row: Any) -> str:
    """The survivor's CPU in plain get round trips measured in the same run (the machine's
    moment divided out), and what one cost before and after."""
    if row.reference <= 0:
        return "-"
    gets = row.median(lambda d: d.survivor_cpu) / row.reference
    before, after = (s * 1e6 for s in row.reference_s)
    return f"{gets:.1f} gets of {before:.0f}/{after:.0f} us"


HEADERS = [
    "P",
    "T",
    "deaths (worker processes)",
    "load (1 min)",
    "death -> DONE",
    "beyond debounce",
    "coordinator's part beyond debounce (its CPU)",
    "of which the grouper run",
    "after the commit: the leader's publish returned / an observer saw it",
    "published -> DONE",
    "joins after publish",
    "CPU to DONE: processors / coordinator / ZooKeeper",
    "bound: CPU to DONE / cores",
    "beyond debounce / bound",
    "survivor CPU per rebalance",
    "ZooKeeper requests per rebalance: coordinator + survivors",
    "store writes / reads: coordinator, survivors",
    "moved",
    "one view read",
    "whole model read",
]


def _goals(rows: list[Any]) -> str:
    cores = os.cpu_count() or 1
    lines = []
    for row in rows:
        beyond = row.median(lambda d: d.gone_to_done) - row.debounce_s
        observed = row.median(lambda d: d.observed_to_done) - row.debounce_s
        bound = row.median(lambda d: d.cpu_to_done) / cores
        coordinator = row.median(lambda d: d.gone_to_published) - row.debounce_s
        survivor = row.median(lambda d: d.survivor_cpu)
        cpu = row.median(lambda d: d.cpu_coordinator_published)
        today = TODAY.get(row.processors, ("-", "-", "-"))
        requests = row.median(lambda d: d.processor_requests / max(1, d.survivors))
        lines.append(
            [
                row.processors,
                f"{ms(beyond)} (today {today[0]})",
                f"{ms(coordinator)}, CPU {ms(cpu)} (goal {GOAL_COORDINATOR_MS} ms)",
                f"{ms(survivor, 2)} = {_in_gets(row)} (goal {GOAL_SURVIVOR_CPU_MS:g} ms; "
                f"today {today[2]})",
                f"{ms(row.median(lambda d: d.cpu_processors))} (today {today[1]})",
                f"{observed / bound:.2f}x of {ms(bound)} (goal {GOAL_BOUND_RATIO:g}x)"
                if bound > 0
                else "-",
                f"{requests:.1f} + {row.median(lambda d: d.coordinator_requests):,.0f}",
            ]
        )
    return table(
        [
            "P",
            "beyond debounce",
            "coordinator's part",
            "survivor CPU per rebalance",
            "processors' CPU to DONE",
            "beyond debounce vs bound",
            "requests per survivor + coordinator's",
        ],
        lines,
    )


def report(rows: list[Any], deaths: int, seconds: float, command: str) -> str:
    return (
        "## Rebalance after a processor's death (`benchmarks/rebalance.py`)\n\n"
        f"A private ZooKeeper (Debian package) on loopback; {machine()}; total run "
        f"{seconds:.0f} s; re-run with `{command}`. One real coordinator (election, fenced "
        "publishes, `host-affinity` in its grouper process) in the benchmark's process, and P "
        "processor clients, each with its own ZooKeeper session and thread, spread over a few "
        "worker processes (as on separate hosts, but all on this machine's cores, with "
        "ZooKeeper); one location per processor. A death closes a processor's session without "
        "unregistering; times run from the moment its registration node is gone. Medians over "
        f"{deaths} deaths per size (P shrinks by one per death). **The machine is shared**: "
        "wall-clock figures move with the load (the 1-minute load average at each death is "
        "given); the CPU figures do not, and the goals are judged on them.\n\n"
        "- **beyond debounce**: death -> DONE minus the debounce. **coordinator's part**: death "
        "-> published minus the debounce: notice the death, read the processors, run the "
        "grouper, publish in one fenced transaction; its CPU: the coordinator's side (this "
        "process, observer included, and the grouper's process) from the death to the publish. "
        "**of which the grouper run**: the leader's own figure (its rebalance history). "
        "Published (the commit) and DONE are taken by ZooKeeper's clock, the mtimes of the "
        "version pointer and of the barrier state (the death by this machine's clock, when its "
        "node is seen gone). At large P the commit wakes every survivor at once: the leader's "
        "publish call returns later, and an observer's watch sees the new version later still "
        "(its event and its read queue behind a thousand survivors'); both lags are given "
        "(**after the commit**). **published -> DONE**: the survivors' part; "
        "**joins after publish**: the first and the last join.\n"
        "- **CPU to DONE**: CPU used from the death to DONE by the worker processes (all "
        "survivors), the coordinator's side (this process and the grouper's) and the ZooKeeper "
        "server. **bound**: their sum over the cores, the least wall time this machine needs "
        "for that work; **beyond debounce / bound** compares the two, over the span the CPU "
        "is sampled in: death -> DONE as the observer sees it (its CPU samples are taken "
        "then, after the survivors have begun to act on DONE).\n"
        "- **survivor CPU per rebalance**: the worker processes' CPU from the death until every "
        "survivor runs v+1 and has written its locality, minus what they use idle over that "
        "time (pings), over the survivors; the median over the deaths, and in brackets the "
        "least and the most of them. After one death most survivors neither lose nor gain "
        "a task: the manifest says so (`gaining`), and they read no container and write no "
        "locality, only join and watch the barrier. **= gets**: the same figure over the CPU "
        "of one plain `get` round trip (`benchmarks/_reference.py`: the caller's and kazoo's "
        "threads in a process doing nothing else, with kazoo as it ships), measured "
        "before and after the deaths of the size: this VM's speed moves by about 30% from "
        "hour to hour, and the ratio lets runs at different moments be compared.\n"
        "- **ZooKeeper requests**: every request the clients sent (`KazooClient` calls: the "
        "stores' reads and writes and the re-reads of kazoo's watch recipes; one `multi` is "
        "one request; pings not counted), the coordinator's and the survivors' (with the "
        "number per survivor: it should not grow with P). **store writes / reads**: the "
        "stores' own counters (`ZkMetadataStore.ops` / `.reads`, a read being one node).\n"
        "- **one view read** / **whole model read**: reading one processor's container (its "
        "container view) and, for comparison, the whole T-task model.\n\n"
        f"{table(HEADERS, [_measures(r) for r in rows])}\n\n"
        "Against issue 16's goals (at P=1,000) and the figures measured before this work "
        "(today):\n\n"
        f"{_goals(rows)}\n"
    )
