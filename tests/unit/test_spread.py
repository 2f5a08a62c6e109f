"""Spread (issue 13 item 7): among equally good choices ``host-affinity`` deals tasks
round-robin across streams, so every processor gets a share of every stream, fresh or after a
rebalance; the moves and the locality stay those of the min-cost-flow optimum."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from test_host_affinity import compact, optimum, our_cost

from groupers import GrouperMetadata, get_grouper, validate
from groupers.assignment import Assignment
from groupers.measures import movement_lower_bound, owners, tasks_moved
from groupers.ssp import ssp_task_name
from groupers.testing import GrouperInput, grouper_inputs
from groupers.testing.oracles import stream_skew
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

GROUPER = get_grouper("host-affinity")


def ssp_tasks(streams: int, partitions: int) -> list[TaskModel]:
    """``group-by-ssp`` tasks: one per partition of each stream."""
    ssps = [
        SystemStreamPartition("kafka", name, n)
        for name in ("clicks", "orders", "views", "carts")[:streams]
        for n in range(partitions)
    ]
    return [TaskModel(ssp_task_name(s), frozenset({s}), i) for i, s in enumerate(ssps)]


def per_stream(containers: set[ContainerModel]) -> dict[str, Counter[str]]:
    return {
        c.processor_id: Counter(next(iter(t.partitions)).stream for t in c.tasks.values())
        for c in containers
    }


def hosts(count: int) -> dict[str, str]:
    return {f"p-{i:02d}": f"host-{i:02d}" for i in range(count)}


def test_clicks_and_orders_on_two_processors_two_of_each() -> None:
    answer = GROUPER.group(ssp_tasks(2, 4), GrouperMetadata(hosts(2), {}, {}))
    assert all(counts == {"clicks": 2, "orders": 2} for counts in per_stream(answer).values())


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3))
def test_fresh_and_scaled_out_assignments_share_every_stream(
    streams: int, before: int, extra: int, per: int
) -> None:
    """P | partitions: each processor gets exactly partitions / P of every stream, fresh; after
    a scale-out (moves exactly the lower bound) each stream is within one of an even share."""
    partitions = before * (before + extra) * per
    tasks = ssp_tasks(streams, partitions)
    first = GROUPER.group(tasks, GrouperMetadata(hosts(before), {}, {}))
    share = partitions // before
    assert all(set(c.values()) == {share} for c in per_stream(first).values())
    previous = owners(first)
    where = hosts(before + extra)
    metadata = GrouperMetadata(where, {n: where[p] for n, p in previous.items()}, previous)
    second = GROUPER.group(tasks, metadata)
    assert tasks_moved(previous, owners(second)) == movement_lower_bound(tasks, metadata)
    even = partitions / (before + extra)
    for counts in per_stream(second).values():
        assert all(abs(counts[s] - even) < 1.5 for s in ("clicks", "orders")[:streams]), counts


@settings(max_examples=150, deadline=None)
@given(grouper_inputs(max_tasks=24, max_processors=6, streams=3))
def test_with_several_streams_moves_and_locality_are_still_optimal(data: GrouperInput) -> None:
    containers = GROUPER.group(data.tasks, data.metadata)
    validate(data.tasks, data.metadata, containers)
    if data.tasks:
        assert our_cost(data.tasks, data.metadata, containers, zone_level=False) == optimum(
            data.tasks, data.metadata, zone_level=False
        ), compact(data.tasks, data.metadata)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=2, max_size=5),
    st.integers(2, 7),
    st.integers(1, 3),
)
def test_streams_of_any_sizes_are_dealt_evenly(
    sizes: list[int], processors: int, zones: int
) -> None:
    """Issue 26: per-stream skew <= 1 whatever the streams' sizes (Kafka Streams' balance per
    subtopology), on one zone or several; a run of an interleaved order gave one processor two
    of a stream another had none of when sizes or room differed."""
    tasks = [
        TaskModel(f"{s}_{p}", frozenset({SystemStreamPartition("kafka", f"topic-{s}", p)}))
        for s, size in enumerate(sizes)
        for p in range(size)
    ]
    live = {f"p-{i:02d}": f"zone-{i % zones}/host-{i:02d}" for i in range(processors)}
    metadata = GrouperMetadata(live, {}, {})
    answer = GROUPER.group(tasks, metadata)
    validate(tasks, metadata, answer)
    assert stream_skew(tasks, metadata, answer) <= 1, {
        c.processor_id: sorted(c.tasks) for c in answer
    }


def dealt_one_at_a_time(
    chunk: list[str], takes: list[tuple[str, int]], stream: dict[str, str]
) -> dict[str, list[str]]:
    """What :meth:`Assignment.deal` stands for, one task at a time: the streams largest first,
    each task to the next processor (cursor carried) that still has room."""
    by_stream: dict[str, list[str]] = {}
    for name in chunk:
        by_stream.setdefault(stream[name], []).append(name)
    placed: dict[str, list[str]] = {pid: [] for pid, _ in takes}
    left = [take for _, take in takes]
    cursor = 0
    for names in sorted(by_stream.values(), key=lambda names: -len(names)):
        for name in names:
            while not left[cursor]:
                cursor = (cursor + 1) % len(takes)
            placed[takes[cursor][0]].append(name)
            left[cursor] -= 1
            cursor = (cursor + 1) % len(takes)
    return placed


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=5),
    st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=8),
    st.data(),
)
def test_dealing_by_rounds_is_dealing_one_at_a_time(
    sizes: list[int], room: list[int], data: st.DataObject
) -> None:
    """``deal`` hands out whole rounds at once (a task costs O(1), not a scan over full
    processors); it must place every task where dealing them one by one would."""
    chunk = [f"{s}_{p}" for s, size in enumerate(sizes) for p in range(size)]
    chunk = data.draw(st.permutations(chunk))
    room = room[: len(chunk)] or [1]
    total = sum(room)
    if total < len(chunk):  # the counts always sum to the chunk: give the rest to the last
        room[-1] += len(chunk) - total
    elif total > len(chunk):
        chunk = chunk + [f"x_{i}" for i in range(total - len(chunk))]
    stream = {name: name.split("_")[0] for name in chunk}
    takes = [(f"p-{i}", take) for i, take in enumerate(room)]
    metadata = GrouperMetadata({pid: f"host-{pid}" for pid, _ in takes}, {}, {})
    state = Assignment.start(chunk, metadata, 0, order=list(chunk), streams=stream)
    state.deal(list(chunk), takes)
    expected = dealt_one_at_a_time(chunk, takes, stream)
    assert {pid: state.placed[pid] for pid, _ in takes} == expected
