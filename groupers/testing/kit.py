"""The conformance check: :func:`check_grouper` asserts the grouper contract on drawn inputs and
on the edge cases (see :mod:`groupers.testing`)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Collection, Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupers.api import GrouperMetadata, TaskNameGrouper, validate
from groupers.testing.strategies import GrouperInput, grouper_inputs, virtual_grouper_inputs
from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

__all__ = ["canonical", "check_grouper"]


def canonical(containers: Collection[ContainerModel]) -> str:
    """A canonical text of an answer: sorted JSON of processor -> location and task names (and
    standby task names, when it has standbys)."""
    return json.dumps(
        {
            c.processor_id: [c.location_id, sorted(c.tasks)]
            + ([sorted(c.standby_tasks)] if c.standby_tasks else [])
            for c in containers
        },
        sort_keys=True,
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
            dict(reversed(list(md.processor_capacity.items()))),
            {
                name: dict(reversed(list(lags.items())))
                for name, lags in reversed(list(md.task_state.items()))
            },
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
    Half of the ordinary inputs carry ``processor_capacity`` and ``task_state`` (the replicas
    fields); a grouper that returns standby replicas has them checked by :func:`validate`
    (never on the task's active processor, only tasks of the job) and by the purity checks.
    """
    _check_edge_cases(grouper)
    rng = random.Random(1234)
    collected = _check_drawn(
        grouper,
        grouper_inputs(replicas=None),
        max_examples,
        rng,
        keep=subprocess_examples,
        twice=True,
    )
    extra = max_examples // 2 if virtual_examples is None else virtual_examples
    if extra > 0:
        collected += _check_drawn(grouper, virtual_grouper_inputs(), extra, rng, keep=2)
    if collected and hash_seeds:
        _check_hash_seeds(grouper, collected, hash_seeds)


def _check_edge_cases(grouper: TaskNameGrouper) -> None:
    """Totality: a valid answer on every edge case."""
    for label, case in _edge_cases():
        try:
            answer = grouper.group(case.tasks, case.metadata)
        except Exception as exc:  # report which edge case, with the cause
            raise AssertionError(f"grouper crashed on edge case {label!r}: {exc!r}") from exc
        validate(case.tasks, case.metadata, answer)


def _check_drawn(
    grouper: TaskNameGrouper,
    inputs: st.SearchStrategy[GrouperInput],
    examples: int,
    rng: random.Random,
    *,
    keep: int,
    twice: bool = False,
) -> list[GrouperInput]:
    """Validity and purity on ``examples`` drawn inputs: a valid answer, the same one again
    (with ``twice``) and for shuffled inputs. Returns up to ``keep`` non-empty inputs, for the
    hash-seed check."""
    collected: list[GrouperInput] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(inputs)
    def valid_and_order_independent(data: GrouperInput) -> None:
        first = grouper.group(data.tasks, data.metadata)
        validate(data.tasks, data.metadata, first)
        if twice:
            again = grouper.group(data.tasks, data.metadata)
            assert canonical(again) == canonical(first), "a second call gave another answer"
        shuffled = _shuffled(data, rng)
        other = grouper.group(shuffled.tasks, shuffled.metadata)
        assert canonical(other) == canonical(first), "shuffled inputs gave another answer"
        if len(collected) < keep and data.tasks:  # drawn virtual inputs always have tasks
            collected.append(data)

    valid_and_order_independent()
    return collected


def _check_hash_seeds(
    grouper: TaskNameGrouper, collected: list[GrouperInput], hash_seeds: Collection[str]
) -> None:
    """Purity across processes: the same answers in fresh interpreters with other hash seeds."""
    expected = [canonical(grouper.group(c.tasks, c.metadata)) for c in collected]
    for seed in hash_seeds:
        got = _answers_in_fresh_interpreter(grouper, collected, seed)
        assert got == expected, f"answers differ under PYTHONHASHSEED={seed}"
