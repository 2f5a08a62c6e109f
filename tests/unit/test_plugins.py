"""The grouper registry: built-ins, the example plugin through its entry point, and errors."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import groupers.registry
from groupers import (
    GrouperError,
    GrouperMetadata,
    UnknownGrouperError,
    get_grouper,
    grouper_names,
    validate,
)
from groupers.testing import check_grouper
from metadata.model import TaskModel


def test_example_plugin_is_found_through_its_entry_point_and_conforms() -> None:
    assert "sticky-least-loaded" in grouper_names()
    grouper = get_grouper("sticky-least-loaded", cap=50)
    assert type(grouper).__module__ == "affinity_example_grouper"
    check_grouper(grouper, max_examples=40, hash_seeds=("3",), subprocess_examples=2)


def test_example_plugin_keeps_tasks_on_their_previous_processor() -> None:
    tasks = [TaskModel(f"t{i}", frozenset()) for i in range(4)]
    md = GrouperMetadata({"a": "h1", "b": "h2"}, {}, {"t0": "b", "t1": "b", "t2": "a", "t3": "a"})
    out = get_grouper("sticky-least-loaded").group(tasks, md)
    validate(tasks, md, out)
    assert {c.processor_id: sorted(c.tasks) for c in out} == {"a": ["t2", "t3"], "b": ["t0", "t1"]}


def test_unknown_grouper_lists_the_known_ones() -> None:
    with pytest.raises(UnknownGrouperError) as info:
        get_grouper("no-such-grouper")
    message = str(info.value)
    assert "no-such-grouper" in message
    for name in ("host-affinity", "round-robin", "sticky-least-loaded"):
        assert name in message


def test_unknown_option_names_the_option_and_what_the_grouper_takes() -> None:
    with pytest.raises(
        GrouperError,
        match=r"does not take option\(s\) colour \(it takes: balance_slack, standby_replicas, "
        r"max_warmup_replicas, acceptable_recovery_lag, max_moves_per_rebalance\)",
    ):
        get_grouper("host-affinity", colour="blue")


def test_builtins_cannot_be_shadowed_and_broken_plugins_are_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugins = {
        "host-affinity": EntryPoint("host-affinity", "nowhere:Nothing", "affinity.groupers"),
        "broken": EntryPoint("broken", "no_such_module_xyz:Grouper", "affinity.groupers"),
        "not-callable": EntryPoint(
            "not-callable", "groupers.registry:ENTRY_POINT_GROUP", "affinity.groupers"
        ),
        "no-group": EntryPoint("no-group", "builtins:object", "affinity.groupers"),
    }
    monkeypatch.setattr(groupers.registry, "_plugins", lambda: plugins)
    assert type(get_grouper("host-affinity")).__name__ == "HostAffinityGrouper"
    with pytest.raises(
        GrouperError, match=r"'broken' \(no_such_module_xyz:Grouper\) failed to load"
    ):
        get_grouper("broken")
    with pytest.raises(GrouperError, match="is not callable"):
        get_grouper("not-callable")
    with pytest.raises(GrouperError, match="has no group"):
        get_grouper("no-group")


class _Refuses:
    """A plugin's constructor that raises."""

    def __init__(self, level: int = 0) -> None:
        raise RuntimeError(f"cannot start at level {level}")


@pytest.mark.parametrize(
    ("name", "options", "argument"),
    [
        ("no-such-grouper", {}, "name"),
        ("host-affinity", {"colour": "blue"}, "options"),
        ("host-affinity", {"balance_slack": -2}, "options"),  # the constructor refuses it
        ("broken", {}, "name"),
        ("refuses", {}, "name"),  # raises whatever it is given: the grouper is to blame
        ("refuses", {"level": 3}, "options"),
        ("no-group", {}, "name"),
    ],
)
def test_errors_say_which_argument_is_to_blame(
    monkeypatch: pytest.MonkeyPatch, name: str, options: dict[str, object], argument: str
) -> None:
    """``GrouperError.argument``: what ``coordinator run`` names as the bad key (``grouper.name``
    or ``grouper.options``) when it cannot build its grouper at start-up (issue 28)."""
    plugins = {
        "broken": EntryPoint("broken", "no_such_module_xyz:Grouper", "affinity.groupers"),
        "refuses": EntryPoint("refuses", f"{__name__}:_Refuses", "affinity.groupers"),
        "no-group": EntryPoint("no-group", "builtins:object", "affinity.groupers"),
    }
    monkeypatch.setattr(groupers.registry, "_plugins", lambda: plugins)
    with pytest.raises(GrouperError) as info:
        get_grouper(name, **options)
    assert info.value.argument == argument
