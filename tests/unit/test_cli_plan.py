"""`affinity plan`: the dry run, its JSON, and its errors (exit code 2 naming the problem)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli import main
from metadata.serde import load_job_model_document

SNAPSHOT = {
    "tasks": [
        "Partition 0",
        "Partition 1",
        "Partition 2",
        {
            "name": "Partition 3",
            "partitions": [{"system": "kafka", "stream": "events", "partition": 3}],
        },
    ],
    "processor_locality": {
        "p-1": "zone-a/host-1",
        "p-2": "zone-a/host-2",
        "p-3-new": "zone-b/host-3",
    },
    "task_locality": {
        "Partition 0": "zone-a/host-1",
        "Partition 1": "zone-a/host-1",
        "Partition 2": "zone-b/host-3",
        "Partition 3": "zone-a/host-2",
    },
    "previous_task_to_processor": {
        "Partition 0": "p-1",
        "Partition 1": "p-1",
        "Partition 2": "p-3-old",
        "Partition 3": "p-2",
    },
    "version": 6,
}


def write(tmp_path: Path, content: object) -> str:
    path = tmp_path / "snapshot.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_plan_json_is_the_job_model_of_the_next_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["plan", "--grouper", "host-affinity", "--input", write(tmp_path, SNAPSHOT), "--json"])
        == 0
    )
    document = load_job_model_document(capsys.readouterr().out)
    assert document.model.version == 7
    assert document.grouper == "host-affinity"
    owner = document.model.task_to_processor()
    # The restarted processor's task follows its location to the new id.
    assert owner == {
        "Partition 0": "p-1",
        "Partition 1": "p-1",
        "Partition 2": "p-3-new",
        "Partition 3": "p-2",
    }
    assert document.model.containers["p-2"].tasks["Partition 3"].partitions


def test_plan_summary_reports_moves_locality_and_balance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--grouper", "round-robin", "--input", write(tmp_path, SNAPSHOT)]) == 0
    out = capsys.readouterr().out
    assert "version        7" in out
    assert "tasks          4 on 3 processors" in out
    assert "balance        min 1, max 2" in out
    assert "moved" in out and "locality kept" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ([], "must be a JSON object"),
        ({"tasks": "Partition 0"}, "tasks: expected a list"),
        ({"tasks": ["a", "a"], "processor_locality": {"p": "h"}}, "listed twice"),
        (
            {
                "tasks": [
                    {"name": "t", "partitions": [{"system": "k", "stream": "s", "partition": "x"}]}
                ],
                "processor_locality": {"p": "h"},
            },
            "tasks[0].partitions[0].partition: expected an integer",
        ),
        (
            {"tasks": ["a"], "processor_locality": {"p": 3}},
            "processor_locality.p: expected a string",
        ),
        ({"tasks": ["a"]}, "no live processor"),
        ({"tasks": [], "version": -1}, "version: expected a whole number"),
        (
            {"tasks": ["a"], "processor_locality": {"p": "h"}, "processor_capacity": {"p": 0}},
            "processor_capacity of 'p' must be an integer >= 1",
        ),
        (
            {"tasks": ["a"], "processor_locality": {"p": "h"}, "task_state": {"a": {"p": "x"}}},
            "a.p: expected a whole number >= 0",
        ),
    ],
)
def test_bad_snapshots_exit_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object, message: str
) -> None:
    assert main(["plan", "--grouper", "host-affinity", "--input", write(tmp_path, content)]) == 2
    assert message in capsys.readouterr().err


def test_unknown_grouper_and_bad_option_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, SNAPSHOT)
    assert main(["plan", "--grouper", "nope", "--input", path]) == 2
    assert "unknown grouper 'nope'; known groupers: host-affinity" in capsys.readouterr().err
    assert (
        main(
            ["plan", "--grouper", "host-affinity", "--input", path, "--option", "balance_slack=-2"]
        )
        == 2
    )
    assert "balance_slack must be >= 0" in capsys.readouterr().err
    assert (
        main(["plan", "--grouper", "host-affinity", "--input", str(tmp_path / "missing.json")]) == 2
    )
    assert "cannot read" in capsys.readouterr().err


def test_console_script_runs_end_to_end(tmp_path: Path) -> None:
    affinity = Path(sys.executable).with_name("affinity")
    proc = subprocess.run(
        [
            str(affinity),
            "plan",
            "--grouper",
            "host-affinity",
            "--input",
            write(tmp_path, SNAPSHOT),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert load_job_model_document(proc.stdout).model.version == 7


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'\xff\xfe{"tasks": []}', "snapshot.json is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON: nested too deeply"),
        (
            b'{"tasks": [], "version": ' + b"9" * 100_000 + b"}",
            "not valid JSON: a number has 100000 digits (at most 30)",
        ),
    ],
    ids=["not-utf8", "deep", "huge-number"],
)
def test_unusable_snapshot_files_are_one_line_exit_2(
    tmp_path: Path, content: bytes, message: str
) -> None:
    """A real ``python -m coordinator.cli plan`` process: one line on stderr, no traceback."""
    path = tmp_path / "snapshot.json"
    path.write_bytes(content)
    command = ["plan", "--grouper", "host-affinity", "--input", str(path)]
    proc = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *command],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("affinity: error: plan: ")
    assert message in lines[0]
    assert proc.stdout == ""


def test_plan_shows_standbys_and_reads_capacity_and_task_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = dict(
        SNAPSHOT,
        processor_capacity={"p-1": 2},
        task_state={"Partition 2": {"p-2": 0}},
    )
    path = write(tmp_path, snapshot)
    args = ["plan", "--grouper", "host-affinity", "--input", path, "--option", "standby_replicas=1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "standbys       4" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("p-")}
    assert all("Partition" in row for row in rows.values()), rows
    assert main([*args, "--json"]) == 0
    document = load_job_model_document(capsys.readouterr().out.encode())
    containers = document.model.containers
    assert sum(len(c.standby_tasks) for c in containers.values()) == 4
    assert len(containers["p-1"].tasks) == 2  # capacity 2 of 4: two of the four tasks
    assert main(args[:-2]) == 0
    assert "standbys       0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"tasks": ["a"], "processor_locality": {"p-1": ""}},
            "processor_locality.p-1: location id must be a non-empty string, got ''",
        ),
        (
            {"tasks": ["a"], "processor_locality": {"p-1": "h"}, "task_locality": {"a": ""}},
            "task_locality.a: location id must be a non-empty string, got ''",
        ),
        (
            {"tasks": ["a"], "processor_locality": {"p-1": "h\n"}},
            "processor_locality.p-1: location id must be printable text (no control characters), "
            "got 'h\\n'",
        ),
        (
            {"tasks": ["a"], "processor_locality": {"": "h"}},
            "processor_locality: '' is not a usable id (empty or not printable)",
        ),
        (
            {
                "tasks": ["a"],
                "processor_locality": {"p-1": "h"},
                "previous_task_to_processor": {"a": ""},
            },
            "previous_task_to_processor.a: processor id must be a non-empty string, got ''",
        ),
    ],
    ids=["processor-location", "task-location", "control-character", "processor-id", "previous"],
)
def test_an_empty_location_or_processor_id_is_one_line_exit_2(
    tmp_path: Path, content: object, message: str
) -> None:
    """Issue 28 item 4: ``affinity plan`` planned for a processor at location ``""`` (which the
    metadata store refuses to register or record). A real process: one line naming the key."""
    command = ["plan", "--grouper", "host-affinity", "--input", write(tmp_path, content)]
    affinity = Path(sys.executable).with_name("affinity")
    proc = subprocess.run(
        [str(affinity), *command], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"affinity: error: plan: {message}"], proc.stderr
    assert proc.stdout == ""
