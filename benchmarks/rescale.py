"""Rescaling a stateful job 8 -> 16 -> 8 tasks: state bytes moved, and checkpoint bytes per batch.

The state is the reference pipeline's (``examples/pipeline``: running counts and sums per key of
the generated events), kept per *slot*: the input has 8 partitions (a key's partition is
``crc32(key) mod 8``, the producer's partitioner) and each partition has ``M = 128`` key groups
(``groupers.keygroups.key_group``), so slot ``p * 128 + g`` is the unit of state and of
checkpoints. A slot's size is the JSON of its ``{key: [count, sum]}`` map after the warm-up
batches.

**Movement.** Tasks are placed on hosts, and a slot moves when the host of the task that owns it
changes. Three placements, each at 8 and at 16 tasks:

- **ours**: SEP-32 virtual tasks (``group-by-partition`` with elasticity factor 1, then 2, then
  1; task ``(p, b, f)`` owns the slots of partition ``p`` whose key group ``g`` has
  ``g mod f == b``) placed by the ``host-affinity`` grouper, which inherits locality across the
  split and the merge (``groupers/virtual.py``);
- **hash-mod**: instance ``slot mod n``, instance ``i`` on host ``i mod H`` (hash partitioning
  with index-order placement);
- **naive range**: Flink's contiguous key-group ranges over all 1,024 slots, instance ``i`` on
  host ``i mod H`` (Flink's default: index order).

Three cluster shapes: the hosts scale with the tasks (8 hosts, then 8 more, then the first 8),
and fixed pools of 4 and of 6 hosts. The **lower bound** (:func:`lower_bound`) is what any
balanced placement of our tasks must move: on a split, each host's children beyond its share of
the tasks (the smallest ones); on a merge, whatever of a merged task's parents is not on the one
live host holding most of it.

**Checkpoint bytes per batch.** The same state in one
:class:`affinity_pipeline.objectspace.ObjectSpace` (all 1,024 slots as key groups, in memory
storage), checkpointed after every batch: the bytes written (deltas, and bases when the
compaction policy rewrites a key group) against a full snapshot of the state (what a per-task
JSON checkpoint, like ``affinity_pipeline.store``, writes every batch), for batches that touch a
small and a large share of the keys.

Usage: ``python benchmarks/rescale.py [--quick] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
# benchmarks/groupers.py would shadow the groupers package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from affinity_pipeline.events import PipelineConfig, generate_batch  # noqa: E402
from affinity_pipeline.objectspace import MemoryStorage, ObjectSpace  # noqa: E402

from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from groupers import GrouperMetadata, get_grouper, get_ssp_grouper, validate  # noqa: E402
from groupers.keygroups import key_group, key_group_ranges  # noqa: E402
from groupers.measures import tasks_moved  # noqa: E402
from metadata.model import JobModel, StreamInput, TaskModel  # noqa: E402

PARTITIONS = 8
GROUPS_PER_PARTITION = 128
SLOTS = PARTITIONS * GROUPS_PER_PARTITION
STEPS = ((8, 16), (16, 8))  # tasks before -> after


def slot_of(key: str) -> int:
    partition = zlib.crc32(key.encode()) % PARTITIONS
    return partition * GROUPS_PER_PARTITION + key_group(key, GROUPS_PER_PARTITION)


def apply_batch(space: ObjectSpace, events: Sequence[tuple[str, int]]) -> None:
    for key, value in events:
        counts = space.group(slot_of(key)).get_map("counts", create=True)
        count, total = counts.get(key, [0, 0])  # type: ignore[misc]
        counts[key] = [count + 1, total + value]  # a new list: stored values are not mutated


def slot_sizes(space: ObjectSpace) -> list[int]:
    sizes = [0] * SLOTS
    for slot, objects in space.snapshot().items():
        sizes[slot] = len(json.dumps(objects, separators=(",", ":"), sort_keys=True))
    return sizes


# ---------------------------------------------------------------- placements


def virtual_tasks(tasks: int) -> list[TaskModel]:
    factor = tasks // PARTITIONS
    grouper = get_ssp_grouper("group-by-partition", elasticity_factor=factor)
    return sorted(
        grouper.group([StreamInput("generated", "events", PARTITIONS)]), key=lambda t: t.name
    )


def owner_slots(task: TaskModel, tasks: int) -> list[int]:
    factor = tasks // PARTITIONS
    (ssp,) = task.partitions
    bucket = max(ssp.key_bucket, 0)
    base = ssp.partition * GROUPS_PER_PARTITION
    return [base + g for g in range(GROUPS_PER_PARTITION) if g % factor == bucket]


@dataclass
class Ours:
    """Virtual tasks placed by host-affinity; remembers the last model (the job model in force)."""

    model: JobModel | None = None

    def place(self, tasks: int, hosts: Sequence[str]) -> list[str]:
        task_models = virtual_tasks(tasks)
        previous = self.model
        alive = set(hosts)
        metadata = GrouperMetadata(
            processor_locality={h: h for h in hosts},
            task_locality={} if previous is None else previous.task_to_processor(),
            previous_task_to_processor={}
            if previous is None
            else {t: p for t, p in previous.task_to_processor().items() if p in alive},
            previous_task_to_ssps={}
            if previous is None
            else {name: task.partitions for name, task in previous.tasks.items()},
        )
        containers = get_grouper("host-affinity").group(task_models, metadata)
        validate(task_models, metadata, containers)
        self.model = JobModel(
            0 if previous is None else previous.version + 1,
            {c.processor_id: c for c in containers},
        )
        where = [""] * SLOTS
        by_name = {t.name: t for t in task_models}
        for name, host in self.model.task_to_processor().items():
            for slot in owner_slots(by_name[name], tasks):
                where[slot] = host
        return where

    def task_states(self, sizes: Sequence[int], tasks: int) -> list[int]:
        return [sum(sizes[s] for s in owner_slots(t, tasks)) for t in virtual_tasks(tasks)]


def hash_mod(tasks: int, hosts: Sequence[str]) -> list[str]:
    return [hosts[(slot % tasks) % len(hosts)] for slot in range(SLOTS)]


def naive_range(tasks: int, hosts: Sequence[str]) -> list[str]:
    where = [""] * SLOTS
    for index, slots in enumerate(key_group_ranges(SLOTS, tasks)):
        for slot in slots:
            where[slot] = hosts[index % len(hosts)]
    return where


def lower_bound(
    sizes: Sequence[int], where: Sequence[str], before: int, after: int, hosts: Sequence[str]
) -> int:
    """Bytes any balanced placement of our ``after`` tasks must move, from ``where`` (slot ->
    host at ``before`` tasks) onto ``hosts`` (a relaxation, so a true lower bound).

    Split: a host keeps at most ``ceil(after / len(hosts))`` tasks, so a host holding more
    children than that (or leaving) moves at least its smallest surplus children. Merge: a merged
    task keeps at most what its parents hold on one live host; the rest moves.
    """
    alive = set(hosts)
    tasks = virtual_tasks(after)
    if after > before:
        cap = -(-after // len(hosts))
        children: dict[str, list[int]] = {}
        for task in tasks:
            slots = owner_slots(task, after)
            host = where[slots[0]]  # a child's slots all lie in its parent's, on one host
            children.setdefault(host, []).append(sum(sizes[s] for s in slots))
        total = 0
        for host, states in children.items():
            keep = cap if host in alive else 0
            total += sum(sorted(states)[: max(0, len(states) - keep)])
        return total
    total = 0
    for task in tasks:
        by_host: dict[str, int] = {}
        for slot in owner_slots(task, after):
            by_host[where[slot]] = by_host.get(where[slot], 0) + sizes[slot]
        kept = max((state for host, state in by_host.items() if host in alive), default=0)
        total += sum(by_host.values()) - kept
    return total


def moved(sizes: Sequence[int], before: Sequence[str], after: Sequence[str]) -> int:
    """Bytes of the slots whose host changed (slot ``i`` on ``before[i]``, then ``after[i]``)."""
    if not len(sizes) == len(before) == len(after):
        raise ValueError("sizes, before and after must cover the same slots")
    return tasks_moved(
        dict(enumerate(before)), dict(enumerate(after)), weights=dict(enumerate(sizes))
    )


@dataclass(frozen=True)
class MoveRow:
    shape: str
    step: str
    total: int
    lower_bound: int
    ours: int
    hash_mod: int
    naive: int


def movement(sizes: Sequence[int]) -> list[MoveRow]:
    rows = []
    total = sum(sizes)
    first = [f"host-{i:02d}" for i in range(8)]
    shapes: list[tuple[str, Callable[[int], list[str]]]] = [
        ("hosts scale with tasks (8 -> 16 -> 8)", lambda n: [f"host-{i:02d}" for i in range(n)]),
        ("fixed pool of 4 hosts", lambda n: first[:4]),
        ("fixed pool of 6 hosts", lambda n: first[:6]),
    ]
    for shape, hosts_for in shapes:
        ours = Ours()
        where = {"ours": ours.place(8, hosts_for(8))}
        where["hash"] = hash_mod(8, hosts_for(8))
        where["naive"] = naive_range(8, hosts_for(8))
        for before, after in STEPS:
            hosts = hosts_for(after)
            new = {
                "ours": ours.place(after, hosts),
                "hash": hash_mod(after, hosts),
                "naive": naive_range(after, hosts),
            }
            bound = lower_bound(sizes, where["ours"], before, after, hosts)
            rows.append(
                MoveRow(
                    shape,
                    f"{before} -> {after}",
                    total,
                    bound,
                    moved(sizes, where["ours"], new["ours"]),
                    moved(sizes, where["hash"], new["hash"]),
                    moved(sizes, where["naive"], new["naive"]),
                )
            )
            where = new
    return rows


# ---------------------------------------------------------------- checkpoint bytes


@dataclass(frozen=True)
class CheckpointRow:
    keys: int
    events: int
    state_bytes: int
    keys_touched: float
    differential: float
    full: float
    delta_only: float


def checkpoints(keys: int, events: int, warmup: int, batches: int) -> CheckpointRow:
    config = PipelineConfig(
        local_store_dir="/unused", checkpoint_dir="/unused", num_keys=keys, events_per_batch=events
    )
    storage = MemoryStorage()
    space = ObjectSpace(SLOTS, range(SLOTS), storage=storage)
    # Warm-up: every key once (the state at full size), then a few ordinary batches.
    width = len(str(keys - 1))
    space_events = [(f"key-{k:0{width}d}", 1) for k in range(keys)]
    apply_batch(space, space_events)
    space.checkpoint(0)
    for batch in range(1, warmup + 1):
        apply_batch(space, generate_batch(batch, config))
        space.checkpoint(batch)
    written, full, deltas, touched = [], [], [], []
    for batch in range(warmup + 1, warmup + 1 + batches):
        events_of_batch = generate_batch(batch, config)
        apply_batch(space, events_of_batch)
        report = space.checkpoint(batch)
        written.append(report.bytes_written)
        deltas.append(report.delta_bytes)
        full.append(sum(slot_sizes(space)))
        touched.append(len({k for k, _ in events_of_batch}) / keys)
    return CheckpointRow(
        keys,
        events,
        sum(slot_sizes(space)),
        statistics.median(touched),
        statistics.median(written),
        statistics.median(full),
        statistics.median(deltas),
    )


# ---------------------------------------------------------------- report


def kb(size: float) -> str:
    return f"{size / 1000:,.0f} KB"


def share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def report(
    move_rows: Sequence[MoveRow], ckpt_rows: Sequence[CheckpointRow], keys: int, seconds: float
) -> str:
    moves = table(
        [
            "hosts",
            "tasks",
            "state",
            "lower bound",
            "ours (virtual tasks, host-affinity)",
            "hash-mod",
            "naive range",
            "hash-mod / ours",
            "naive / ours",
        ],
        [
            [
                r.shape,
                r.step,
                kb(r.total),
                f"{kb(r.lower_bound)} ({share(r.lower_bound, r.total)})",
                f"{kb(r.ours)} ({share(r.ours, r.total)})",
                f"{kb(r.hash_mod)} ({share(r.hash_mod, r.total)})",
                f"{kb(r.naive)} ({share(r.naive, r.total)})",
                f"{r.hash_mod / r.ours:.1f}x" if r.ours else "ours moved nothing",
                f"{r.naive / r.ours:.1f}x" if r.ours else "ours moved nothing",
            ]
            for r in move_rows
        ],
    )
    ckpts = table(
        [
            "keys in state",
            "events per batch",
            "keys touched per batch",
            "state (full snapshot)",
            "differential written",
            "of which deltas alone",
            "differential / full",
        ],
        [
            [
                f"{r.keys:,}",
                f"{r.events:,}",
                f"{100 * r.keys_touched:.1f}%",
                kb(r.full),
                kb(r.differential),
                kb(r.delta_only),
                f"{r.differential / r.full:.3f}",
            ]
            for r in ckpt_rows
        ],
    )
    return (
        "## Rescaling state 8 -> 16 -> 8 (`benchmarks/rescale.py`)\n\n"
        f"{machine()}; total run {seconds:.0f} s. The reference pipeline's state (running count "
        f"and sum per key, {keys:,} keys) in 1,024 slots: 8 input partitions x 128 key groups. "
        "A slot moves when the host of the task owning it changes; bytes are the slots' JSON "
        "sizes. **ours**: SEP-32 virtual tasks (elasticity factor 1 -> 2 -> 1) placed by "
        "`host-affinity`, which sends split children to their parent's host and a merged task "
        "to the host holding most of its parents' state; **hash-mod**: instance `slot mod n`; "
        "**naive range**: Flink's contiguous ranges; both with instance `i` on host `i mod H`. "
        "**lower bound**: what any balanced placement of these tasks must move (on a split, "
        "each host's children beyond its share of the tasks; on a merge, what of a merged "
        "task's parents is not on the one live host holding most of it).\n\n"
        f"{moves}\n\n"
        "Checkpoint bytes per batch (medians over the measured batches), the state in one "
        "object space of 1,024 key groups (`affinity_pipeline.objectspace`, differential: only "
        "changed map entries, a key group's base rewritten when its deltas outgrow it) against "
        "a full snapshot of the state every batch:\n\n"
        f"{ckpts}\n\n"
        "The differential bytes follow what a batch changed, not the state's size: the same "
        "1,000 events write about as much against 4 times the state. Each touched key group "
        "costs one delta file with its envelope (about 90 bytes), so when a batch touches most "
        "keys, deltas plus the bases that compaction rewrites cost about a full snapshot.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    keys = 5_000 if args.quick else 100_000
    space = ObjectSpace(SLOTS, range(SLOTS))
    width = len(str(keys - 1))
    apply_batch(space, [(f"key-{k:0{width}d}", k % 1000 + 1) for k in range(keys)])
    move_rows = movement(slot_sizes(space))
    print("movement done", flush=True)
    loads = (
        [(keys, 100), (keys, 1_000)]
        if args.quick
        else [(keys, 1_000), (4 * keys, 1_000), (keys, 10_000), (keys, 100_000)]
    )
    ckpt_rows = []
    for n_keys, events in loads:
        ckpt_rows.append(checkpoints(n_keys, events, warmup=3, batches=3 if args.quick else 5))
        print(f"checkpoints: {events:,} events per batch done", flush=True)
    markdown = report(move_rows, ckpt_rows, keys, time.perf_counter() - started)
    print()
    print(markdown)
    if not args.no_write:
        write_section("rescale", markdown, doc=args.doc)
        print(f"wrote section 'rescale' of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
