"""Conformance kit for grouper plugin authors.

Two things:

- hypothesis strategies that make grouper inputs: :func:`grouper_inputs` draws ``(tasks,
  metadata)`` with live and vanished processors, flat and hierarchical location ids, task
  locality that is mostly consistent with the previous assignment and sometimes stale or unknown;
- :func:`check_grouper`, which asserts the contract on many drawn inputs and on the edge cases:

  * validity: :func:`groupers.validate` accepts every answer;
  * purity: the same answer for shuffled inputs, for a second call, and in fresh interpreters
    with other ``PYTHONHASHSEED`` values (the grouper must be picklable for that part, as any
    grouper defined at module level is);
  * totality: no crash on an empty task set, one processor, more processors than tasks, or
    localities no processor has;
  * SEP-32 virtual tasks: :func:`virtual_grouper_inputs` draws a split or merge (the elasticity
    factor doubled, halved, or changed from/to 1) with the previous tasks' stream partitions in
    ``previous_task_to_ssps``, so history is recorded under names that no longer exist; these
    are checked for validity and purity too.

Use it from a test::

    from groupers.testing import check_grouper

    def test_my_grouper_conforms():
        check_grouper(MyGrouper())

Needs ``hypothesis`` (a test dependency, not a runtime one).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupers.api import GrouperMetadata, TaskNameGrouper, validate
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

__all__ = [
    "GrouperInput",
    "canonical",
    "check_grouper",
    "grouper_inputs",
    "locations",
    "task_models",
    "virtual_grouper_inputs",
]

_ZONES = ("zone-a", "zone-b", "zone-c")


@st.composite
def locations(draw: st.DrawFn, scheme: str = "mixed") -> str:
    """A location id: flat (``host-3``) or hierarchical (``zone-a/rack-1/host-3``).

    ``scheme`` is "flat", "hierarchical" or "mixed" (either, drawn per location).
    """
    host = draw(st.integers(0, 5))
    if scheme == "flat" or (scheme == "mixed" and draw(st.booleans())):
        return f"host-{host}"
    zone = draw(st.sampled_from(_ZONES))
    rack = draw(st.integers(0, 1))
    return f"{zone}/rack-{rack}/host-{host}"


@st.composite
def task_models(draw: st.DrawFn, max_tasks: int = 40) -> list[TaskModel]:
    """Distinct tasks named like Samza's ``Partition N``, one SSP each."""
    count = draw(st.integers(0, max_tasks))
    numbers = draw(
        st.lists(st.integers(0, 10 * max_tasks + 10), min_size=count, max_size=count, unique=True)
    )
    return [
        TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n)
        for n in numbers
    ]


@dataclass(frozen=True)
class GrouperInput:
    tasks: list[TaskModel]
    metadata: GrouperMetadata


@st.composite
def grouper_inputs(
    draw: st.DrawFn,
    max_tasks: int = 40,
    max_processors: int = 8,
    min_processors: int = 1,
    schemes: Collection[str] = ("flat", "hierarchical", "mixed"),
) -> GrouperInput:
    """Tasks plus metadata: a previous assignment over live and vanished processors.

    Each example uses one location scheme from ``schemes`` (see :func:`locations`).
    """
    scheme = draw(st.sampled_from(sorted(schemes)))
    tasks = draw(task_models(max_tasks=max_tasks))
    live_count = draw(st.integers(min_processors, max_processors))
    gone_count = draw(st.integers(0, 3))
    live = [f"p-{i}" for i in range(live_count)]
    gone = [f"gone-{i}" for i in range(gone_count)]
    where = {pid: draw(locations(scheme)) for pid in live + gone}
    previous: dict[str, str] = {}
    task_locality: dict[str, str] = {}
    owners = live + gone
    for task in tasks:
        kind = draw(st.sampled_from(("prev", "prev", "prev", "new", "stale", "unknown-loc")))
        if kind == "new" or not owners:
            continue
        owner = draw(st.sampled_from(owners))
        previous[task.name] = owner
        if kind == "prev":
            task_locality[task.name] = where[owner]
        elif kind == "stale":
            task_locality[task.name] = draw(locations(scheme))
    metadata = GrouperMetadata(
        processor_locality={pid: where[pid] for pid in live},
        task_locality=task_locality,
        previous_task_to_processor=previous,
    )
    return GrouperInput(tasks, metadata)


def _virtual_tasks(partitions: int, factor: int) -> list[TaskModel]:
    """``group-by-partition`` tasks of one 'events' and one 'clicks' input at ``factor``."""
    tasks = []
    for p in range(partitions):
        for b in range(factor) if factor > 1 else (-1,):
            name = f"Partition {p}" if factor == 1 else f"Partition {p}-{b}-{factor}"
            ssps = {SystemStreamPartition("kafka", s, p, b) for s in ("events", "clicks")}
            tasks.append(TaskModel(name, frozenset(ssps), p * factor + max(b, 0)))
    return tasks


@st.composite
def virtual_grouper_inputs(
    draw: st.DrawFn,
    max_partitions: int = 6,
    max_processors: int = 8,
    schemes: Collection[str] = ("flat", "hierarchical", "mixed"),
) -> GrouperInput:
    """A SEP-32 split or merge: tasks at a new elasticity factor, history under the old names.

    The previous tasks (factor ``f``) ran on live and vanished processors with mostly accurate
    locality; the requested tasks have factor ``2f``, ``f/2``, 1 or 8, and the metadata carries
    the previous tasks' stream partitions in ``previous_task_to_ssps``.
    """
    scheme = draw(st.sampled_from(sorted(schemes)))
    partitions = draw(st.integers(1, max_partitions))
    old_factor = draw(st.sampled_from((1, 2, 4)))
    new_factor = draw(st.sampled_from(sorted({max(1, old_factor // 2), old_factor * 2, 1, 8})))
    old_tasks = _virtual_tasks(partitions, old_factor)
    new_tasks = _virtual_tasks(partitions, new_factor)
    live = [f"p-{i}" for i in range(draw(st.integers(1, max_processors)))]
    gone = [f"gone-{i}" for i in range(draw(st.integers(0, 2)))]
    where = {pid: draw(locations(scheme)) for pid in live + gone}
    previous: dict[str, str] = {}
    task_locality: dict[str, str] = {}
    for task in old_tasks:
        kind = draw(st.sampled_from(("prev", "prev", "prev", "none", "stale")))
        if kind == "none":
            continue
        owner = draw(st.sampled_from(live + gone))
        previous[task.name] = owner
        task_locality[task.name] = where[owner] if kind == "prev" else draw(locations(scheme))
    metadata = GrouperMetadata(
        processor_locality={pid: where[pid] for pid in live},
        task_locality=task_locality,
        previous_task_to_processor=previous,
        previous_task_to_ssps={t.name: t.partitions for t in old_tasks},
    )
    return GrouperInput(new_tasks, metadata)


def canonical(containers: Collection[ContainerModel]) -> str:
    """A canonical text of an answer: sorted JSON of processor -> location and task names."""
    return json.dumps(
        {c.processor_id: [c.location_id, sorted(c.tasks)] for c in containers}, sort_keys=True
    )


def _shuffled(data: GrouperInput, rng: random.Random) -> GrouperInput:
    tasks = list(data.tasks)
    rng.shuffle(tasks)

    def shuffle_map(mapping: Mapping[str, str]) -> dict[str, str]:
        items = list(mapping.items())
        rng.shuffle(items)
        return dict(items)

    md = data.metadata
    old_ssps = list(md.previous_task_to_ssps.items())
    rng.shuffle(old_ssps)
    return GrouperInput(
        tasks,
        GrouperMetadata(
            shuffle_map(md.processor_locality),
            shuffle_map(md.task_locality),
            shuffle_map(md.previous_task_to_processor),
            dict(old_ssps),
        ),
    )


_CHILD = """
import base64, pickle, sys
from groupers.testing import canonical
grouper, cases = pickle.loads(base64.b64decode(sys.stdin.read()))
for tasks, metadata in cases:
    print(canonical(grouper.group(tasks, metadata)))
"""


def _answers_in_fresh_interpreter(
    grouper: TaskNameGrouper, cases: list[GrouperInput], hash_seed: str
) -> list[str]:
    payload = base64.b64encode(
        pickle.dumps((grouper, [(c.tasks, c.metadata) for c in cases]))
    ).decode()
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=payload,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"grouper failed in a fresh interpreter (PYTHONHASHSEED={hash_seed}): "
            f"{proc.stderr[-2000:]}"
        )
    return proc.stdout.splitlines()


def _edge_cases() -> list[tuple[str, GrouperInput]]:
    def task(n: int) -> TaskModel:
        return TaskModel(
            f"Partition {n}", frozenset({SystemStreamPartition("kafka", "events", n)}), n
        )

    three = [task(n) for n in range(3)]
    return [
        ("no tasks", GrouperInput([], GrouperMetadata({"p-0": "host-0"}, {}, {}))),
        ("one processor", GrouperInput(three, GrouperMetadata({"p-0": "host-0"}, {}, {}))),
        (
            "more processors than tasks",
            GrouperInput(three, GrouperMetadata({f"p-{i}": f"host-{i}" for i in range(7)}, {}, {})),
        ),
        (
            "unknown localities",
            GrouperInput(
                three,
                GrouperMetadata(
                    {"p-0": "zone-a/host-0", "p-1": "host-1"},
                    {"Partition 0": "nowhere", "Partition 1": "zone-z/rack-9/host-9"},
                    {"Partition 0": "vanished", "Partition 2": "also-vanished"},
                ),
            ),
        ),
    ]


def check_grouper(
    grouper: TaskNameGrouper,
    *,
    max_examples: int = 100,
    hash_seeds: Collection[str] = ("0", "1", "4242"),
    subprocess_examples: int = 5,
    virtual_examples: int | None = None,
) -> None:
    """Assert the grouper contract (validity, purity, totality); raise AssertionError if broken.

    ``virtual_examples`` (default: half of ``max_examples``) SEP-32 split/merge inputs from
    :func:`virtual_grouper_inputs` are checked on top of the ``max_examples`` ordinary ones.
    """
    for label, case in _edge_cases():
        try:
            answer = grouper.group(case.tasks, case.metadata)
        except Exception as exc:  # report which edge case, with the cause
            raise AssertionError(f"grouper crashed on edge case {label!r}: {exc!r}") from exc
        validate(case.tasks, case.metadata, answer)

    rng = random.Random(1234)
    collected: list[GrouperInput] = []

    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(grouper_inputs())
    def valid_and_order_independent(data: GrouperInput) -> None:
        first = grouper.group(data.tasks, data.metadata)
        validate(data.tasks, data.metadata, first)
        again = grouper.group(data.tasks, data.metadata)
        assert canonical(again) == canonical(first), "a second call gave another answer"
        shuffled = _shuffled(data, rng)
        other = grouper.group(shuffled.tasks, shuffled.metadata)
        assert canonical(other) == canonical(first), "shuffled inputs gave another answer"
        if len(collected) < subprocess_examples and data.tasks:
            collected.append(data)

    valid_and_order_independent()

    extra = max_examples // 2 if virtual_examples is None else virtual_examples
    if extra > 0:
        virtual_collected: list[GrouperInput] = []

        @settings(
            max_examples=extra,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(virtual_grouper_inputs())
        def virtual_valid_and_order_independent(data: GrouperInput) -> None:
            first = grouper.group(data.tasks, data.metadata)
            validate(data.tasks, data.metadata, first)
            shuffled = _shuffled(data, rng)
            other = grouper.group(shuffled.tasks, shuffled.metadata)
            assert canonical(other) == canonical(first), "shuffled inputs gave another answer"
            if len(virtual_collected) < 2:
                virtual_collected.append(data)

        virtual_valid_and_order_independent()
        collected.extend(virtual_collected)

    if collected and hash_seeds:
        expected = [canonical(grouper.group(c.tasks, c.metadata)) for c in collected]
        for seed in hash_seeds:
            got = _answers_in_fresh_interpreter(grouper, collected, seed)
            assert got == expected, f"answers differ under PYTHONHASHSEED={seed}"
