"""The plan of ``affinity repair`` (:func:`coordinator.protocol.repair.plan_repair`): what is
removed, what is left and why, row by row of its table (issue 28 item 3)."""

from __future__ import annotations

import pytest

from coordinator.protocol.repair import Finding, Kind, plan_repair
from metadata.model import BarrierState

DONE = BarrierState.DONE
STATES = {1: DONE, 2: DONE, 3: DONE, 4: BarrierState.NEW}


def step(finding: Finding, pointer: int | None = 4, *others: Finding) -> tuple[bool, str]:
    planned = plan_repair([finding, *others], pointer=pointer, states=STATES)
    return planned[0].remove, planned[0].why


def version(v: int) -> Finding:
    return Finding(
        Kind.VERSION, f"/j/jobModels/{v}", "checksum mismatch", 3, v, f"/j/jobModels/{v}/e1-00000"
    )


@pytest.mark.parametrize(
    ("finding", "remove", "why"),
    [
        (version(3), True, "no reader uses it"),
        (version(4), False, "the pointer names it: a coordinator's leader publishes a clean"),
        (Finding(Kind.BARRIER, "/j/barriers/barrier_2", "MAYBE", 1, 2), True, "older version"),
        (Finding(Kind.BARRIER, "/j/barriers/barrier_4", "MAYBE", 1, 4), False, "supersedes it"),
        (Finding(Kind.LOCALITY, "/j/localityData/a", "not UTF-8", 0), True, "no recorded location"),
        (Finding(Kind.MARKER, "/j/localityData", "not JSON"), False, "by hand"),
        (Finding(Kind.HISTORY, "/j/history/rebalance-3", "not JSON", 0), True, "a record only"),
        (Finding(Kind.CHECKPOINT, "/j/checkpoints/k.e.0", "bad offsets"), False, "by hand"),
    ],
)
def test_each_row(finding: Finding, remove: bool, why: str) -> None:
    assert step(finding)[0] == remove
    assert why in step(finding)[1]


def test_what_a_leader_falls_back_to_is_the_leaders_own_rule() -> None:
    # 4 is NEW (not in force), 3 unreadable: a leader falls back to 2; with 2 gone too, to 1.
    assert "falling back to version 3" in step(version(4))[1]
    assert "falling back to version 2" in step(version(4), 4, version(3))[1]
    assert (
        "falling back to a fresh model"
        in step(version(4), 4, version(3), version(2), version(1))[1]
    )


def test_a_bad_pointer_leaves_every_version_and_barrier_for_later() -> None:
    pointer = Finding(Kind.POINTER, "/j/jobModelVersion", "garbage")
    barrier = Finding(Kind.BARRIER, "/j/barriers/barrier_2", "MAYBE", 1, 2)
    planned = plan_repair([pointer, version(3), barrier], pointer=None, states=STATES)
    assert [p.remove for p in planned] == [False, False, False]
    assert "only a leader's publish may rewrite it" in planned[0].why
    assert all("run repair again once a leader has published" in p.why for p in planned[1:])
