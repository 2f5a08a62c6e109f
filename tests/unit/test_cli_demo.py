"""`affinity demo` (grouper simulation): host-affinity moves the minimum and keeps state warm."""

from __future__ import annotations

import json

import pytest

from coordinator.cli import main
from coordinator.demo.simulation import simulate


def test_every_rebalance_moves_exactly_the_lower_bound_and_beats_round_robin() -> None:
    steps, totals = simulate()
    assert len(steps) > 10
    for step in steps[1:]:
        moved, bound, _, _ = step.per_grouper["host-affinity"]
        assert moved == bound, step.label
    ha, rr = totals["host-affinity"], totals["round-robin"]
    assert ha.warm > rr.warm
    assert ha.restored < rr.restored
    # A rolling restart at the same hosts restores nothing with host-affinity.
    for step in steps:
        if step.label.startswith("rolling restart"):
            assert step.per_grouper["host-affinity"][3] == 0, step.label


def test_demo_json_is_the_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--simulate", "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures["affinity"]["tasks_moved"] == figures["affinity"]["tasks_moved_lower_bound"]
    assert figures["affinity"]["warm_ratio"] > figures["round_robin"]["warm_ratio"]
