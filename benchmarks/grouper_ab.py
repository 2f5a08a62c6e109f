"""Interleaved A/B timing of ``host-affinity``: this tree against another (e.g. main), and
``standby_replicas=1`` against none, on one-leaves at T tasks and P processors.

Each run is a fresh interpreter with the tree first on its path: it builds the scenario, makes
one warm-up call, then times ``--repeat`` calls (CPU time of the process: on a shared machine
wall time mostly measures the wait for a core) and prints their median. Runs alternate
(A, B, B+standby, A, B, ...) so load on a shared machine hits all sides alike; the answer is the
median over ``--rounds`` runs of each, and the ratios of those medians.

``--case copies-one-leaves`` and ``--case copies-scale`` time the phases that read
``task_state`` (failover to caught-up copies, warm-up; issue 26) instead: the tasks read four
streams (task ``i`` of stream ``s{i % 4}``), every task has a caught-up copy on its processor and
on the next one (by id), and on scale-out every tenth task one on a new processor too; both
sides run with ``acceptable_recovery_lag=0, max_warmup_replicas=2``.

Usage: ``python benchmarks/grouper_ab.py --against /work/main [--tasks 100000]
[--processors 1000] [--rounds 5] [--repeat 3] [--case one-leaves|copies-one-leaves|copies-scale]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = """
import dataclasses, json, statistics, sys, time
from groupers import get_grouper
from groupers.testing import scenarios as sc
from metadata.model import SystemStreamPartition, TaskModel
tasks, processors, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
options, case = json.loads(sys.argv[4]), sys.argv[5]
item = sc.scale(tasks, processors) if case == "copies-scale" else sc.one_leaves(tasks, processors)
work, metadata = item.tasks, item.metadata
if case.startswith("copies"):
    work = [TaskModel(t.name, frozenset({SystemStreamPartition("kafka", f"s{i % 4}", i)}), i)
            for i, t in enumerate(item.tasks)]
    before = sorted(item.before.processor_locality)
    after = {p: i for i, p in enumerate(before)}
    new = sorted(set(metadata.processor_locality) - set(before))
    state = {}
    for i, t in enumerate(work):
        owner = metadata.previous_task_to_processor[t.name]
        copies = {owner: 0, before[(after[owner] + 1) % len(before)]: 0}
        if new and i % 10 == 0:
            copies[new[(i // 10) % len(new)]] = 0
        state[t.name] = copies
    metadata = dataclasses.replace(metadata, task_state=state)
grouper = get_grouper("host-affinity", **options)
grouper.group(work, metadata)
times = []
for _ in range(repeat):
    start = time.process_time()
    grouper.group(work, metadata)
    times.append(time.process_time() - start)
print(json.dumps(statistics.median(times)))
"""

WARM_UP = {"acceptable_recovery_lag": 0, "max_warmup_replicas": 2}

HERE = Path(__file__).resolve().parent.parent


def timed(
    tree: Path, tasks: int, processors: int, repeat: int, options: dict[str, int], case: str
) -> float:
    """The median time of ``repeat`` calls in a fresh interpreter running ``tree``'s code."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tasks), str(processors), str(repeat),
         json.dumps(options), case],
        capture_output=True, text=True, env=env, cwd=tree, timeout=1800, check=True,
    )  # fmt: skip
    seconds: float = json.loads(proc.stdout.strip().splitlines()[-1])
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--against", type=Path, required=True, help="the other tree (A)")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--processors", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--case", choices=("one-leaves", "copies-one-leaves", "copies-scale"), default="one-leaves"
    )
    args = parser.parse_args(argv)
    base = WARM_UP if args.case.startswith("copies") else {}
    sides = {
        "A (other tree)": (args.against.resolve(), base),
        "B (this tree)": (HERE, base),
        "B standby_replicas=1": (HERE, {**base, "standby_replicas": 1}),
    }
    runs: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name, (tree, options) in sides.items():
            runs[name].append(
                timed(tree, args.tasks, args.processors, args.repeat, options, args.case)
            )
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {t[-1]:.2f} s" for n, t in runs.items()),
              flush=True)  # fmt: skip
    medians = {name: statistics.median(times) for name, times in runs.items()}
    a, b, s = medians.values()
    print(f"{args.case} T={args.tasks} P={args.processors}, medians of {args.rounds} "
          "interleaved runs: "
          + ", ".join(f"{n} {m:.2f} s" for n, m in medians.items()))  # fmt: skip
    print(f"this tree / other tree: {b / a:.2f}x; standby_replicas=1 / none: {s / b:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
