"""``affinity demo --simulate``: the life of a stateful job, rebalance by rebalance. It replays a
job's membership changes through the groupers alone, with no ZooKeeper and no Spark: 240 tasks
on 12 processors, 3 per host; then a processor is killed, it comes back under a new id, every
processor is restarted in turn (a rolling upgrade), and 3 processors are added. After each
rebalance it counts, for ``host-affinity`` and for the locality-blind ``round-robin``:

- moved: tasks that changed processor (the lower bound is what balance forces);
- warm: tasks that run where their state is (the host they last ran on);
- restored: tasks that must restore their state elsewhere (moved off their host).

``--json`` prints the totals as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from groupers import GrouperMetadata, get_grouper, validate
from groupers.measures import (
    movement_lower_bound,
    owners,
    tasks_kept_local,
    tasks_moved,
    tasks_with_locality,
)
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

__all__ = ["Step", "run_simulation", "simulate"]

TASKS = 240
HOSTS = 4
PER_HOST = 3


@dataclass
class Totals:
    moved: int = 0
    lower_bound: int = 0
    warm: int = 0
    restored: int = 0
    rebalances: int = 0


@dataclass
class Step:
    label: str
    processors: dict[str, str]
    per_grouper: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)


def simulate() -> tuple[list[Step], dict[str, Totals]]:
    tasks = [
        TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
        for n in range(TASKS)
    ]
    processors = {
        f"p-{h}{i}": f"zone-{'ab'[h % 2]}/host-{h}" for h in range(HOSTS) for i in range(PER_HOST)
    }
    plan: list[tuple[str, dict[str, str]]] = [("start", dict(processors))]
    killed = dict(processors)
    del killed["p-10"]
    plan.append(("kill p-10", killed))
    back = {**killed, "p-10-b": processors["p-10"]}
    plan.append(("p-10 back as p-10-b", back))
    current = dict(back)
    for n, pid in enumerate(sorted(back)):
        # A restarted processor comes back under an unrelated id (as a new pod or executor does).
        new_id = f"p-{(n + 1) * 7919 % 1000:03d}"
        current = {(new_id if k == pid else k): v for k, v in current.items()}
        plan.append((f"rolling restart {pid}", dict(current)))
    grown = {**current, "p-40": "zone-a/host-4", "p-41": "zone-a/host-4", "p-42": "zone-a/host-4"}
    plan.append(("scale out +3 (new host)", grown))

    totals = {name: Totals() for name in ("host-affinity", "round-robin")}
    state: dict[str, tuple[dict[str, str], dict[str, str]]] = {name: ({}, {}) for name in totals}
    steps: list[Step] = []
    for label, live in plan:
        step = Step(label, live)
        for name, grouper in ((n, get_grouper(n)) for n in totals):
            previous, locality = state[name]
            md = GrouperMetadata(live, locality, previous)
            containers: set[ContainerModel] = grouper.group(tasks, md)
            validate(tasks, md, containers)
            owner = owners(containers)
            moved = tasks_moved(previous, owner)
            warm = tasks_kept_local(owner, live, locality)
            restored = tasks_with_locality(owner, locality) - warm
            bound = movement_lower_bound(tasks, md)
            step.per_grouper[name] = (moved, bound, warm, restored)
            if previous:
                total = totals[name]
                total.moved += moved
                total.lower_bound += bound
                total.warm += warm
                total.restored += restored
                total.rebalances += 1
            state[name] = (owner, {t: live[pid] for t, pid in owner.items()})
        steps.append(step)
    return steps, totals


def run_simulation(args: argparse.Namespace) -> int:
    steps, totals = simulate()
    print("affinity demo --simulate: grouper simulation (no ZooKeeper or Spark)")
    print(f"{TASKS} tasks, {HOSTS} hosts x {PER_HOST} processors\n")
    header = f"{'rebalance':<28}{'host-affinity moved/bound warm restored':>42}"
    header += f"{'round-robin moved warm restored':>36}"
    print(header)
    for step in steps[1:]:
        ha = step.per_grouper["host-affinity"]
        rr = step.per_grouper["round-robin"]
        print(
            f"{step.label:<28}{ha[0]:>22}/{ha[1]:<5}{ha[2]:>6}{ha[3]:>9}"
            f"{rr[0]:>24}{rr[2]:>6}{rr[3]:>6}"
        )
    ha_total, rr_total = totals["host-affinity"], totals["round-robin"]
    runs = ha_total.rebalances * TASKS
    print(
        f"\ntotal over {ha_total.rebalances} rebalances: host-affinity moved {ha_total.moved} "
        f"(lower bound {ha_total.lower_bound}), warm {ha_total.warm / runs:.1%}, "
        f"restored {ha_total.restored}; round-robin moved {rr_total.moved}, "
        f"warm {rr_total.warm / runs:.1%}, restored {rr_total.restored}"
    )
    if args.json:
        figures: dict[str, Any] = {
            "mode": "grouper-simulation",
            "affinity": {
                "warm_ratio": round(ha_total.warm / runs, 4),
                "tasks_moved": ha_total.moved,
                "tasks_moved_lower_bound": ha_total.lower_bound,
                "tasks_restored": ha_total.restored,
                "versions": len(steps),
            },
            "round_robin": {
                "warm_ratio": round(rr_total.warm / runs, 4),
                "tasks_moved": rr_total.moved,
                "tasks_restored": rr_total.restored,
            },
        }
        sys.stdout.write(json.dumps(figures) + "\n")
    return 0
