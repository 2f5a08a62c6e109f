"""The escaping helpers (:mod:`coordinator.escaping`), one per medium, and ``affinity status``'s
rendering of ids written before the id rule (a job model in force may still carry them)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from coordinator.cli.status import render
from coordinator.escaping import rich_text, script_json, terminal_text
from coordinator.status.data import location_tree


def test_script_json_cannot_end_or_open_a_script_element() -> None:
    document = {"id": "p-<!--<script></script>&\u2028"}
    text = script_json(document)
    assert not any(c in text for c in "<>&\u2028")
    assert json.loads(text) == document


def test_terminal_text_shows_control_characters_as_escapes() -> None:
    assert terminal_text("p-\x1b[2J\x1b]0;title\x07\n") == "p-\\x1b[2J\\x1b]0;title\\x07\\n"
    assert terminal_text("zone-a/ü") == "zone-a/ü"


def test_status_renders_markup_and_escapes_as_written() -> None:
    processors = [
        {"id": "p-markup[/]", "location": "zone-[b]/h", "live": True, "tasks": 1},
        {"id": "p-\x1b[2J", "location": "zone-a", "live": False, "tasks": 0},
    ]
    document = {
        "job": {"name": "clicks", "id": "1", "folder": "/affinity/clicks-1", "run_id": "r1"},
        "leader": {"replica": "c-[red]", "replicas": ["c-[red]"]},
        "version": {"latest": 2, "in_force": 2},
        "barrier": {"version": 2, "state": "NEW", "expected": ["p-[x]"], "joined": []},
        "tasks": 1,
        "processors": processors,
        "locations": location_tree(processors),
        "rebalances": [],
    }
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    for part in render(document):
        console.print(part)
    text = out.getvalue()
    assert "p-markup[/]" in text and "zone-[b]" in text and "c-[red]" in text
    assert "waiting for p-[x]" in text
    assert "\x1b" not in text and "p-\\x1b[2J" in text
    assert rich_text("a[/]\x07") == "a\\[/]\\x07"
