"""The demo's report: the tables and the progress bar (rich)."""

from __future__ import annotations

import io

from rich.console import Console

from coordinator.demo.race_ways import RaceBatch
from coordinator.demo.report import BatchFigures, DemoResult, Progress, table
from coordinator.demo.spark_demo import Demo


def result() -> DemoResult:
    demo = DemoResult(versions=[1, 2], tasks_moved=3, output_correct=True, seconds=42)
    demo.batches["affinity"] += [
        BatchFigures(1, "steady", 8, 0, 0, 1.5),
        BatchFigures(2, "after kill", 6, 2, 12_345, 2.25),
    ]
    demo.batches["spark state store"] += [
        BatchFigures(1, "steady", 2, 6, 50_000, 1.0),
        BatchFigures(2, "after kill", 1, 7, 61_000, 4.5),
    ]
    return demo


def test_table_shows_every_batch_and_the_totals() -> None:
    text = table(result())
    lines = text.splitlines()
    row = next(line for line in lines if "after kill" in line)
    assert "75%" in row and "12,345" in row and "12%" in row and "61,000" in row
    assert any("warm ratio" in line and "88%" in line and "19%" in line for line in lines)
    assert any("tasks moved" in line and "3" in line for line in lines)
    assert any("output == reference" in line and "yes" in line for line in lines)
    assert any(
        "first batch after a failure" in line and "2.2 s" in line and "4.5 s" in line
        for line in lines
    )
    assert lines[-1] == "versions in force: [1, 2]; whole run 42 s"
    assert "\x1b[" not in text  # plain text: it may go to a file or a pipe


def test_json_figures_keep_the_old_keys_and_add_the_state_store() -> None:
    figures = result().figures()
    assert figures["affinity"]["recovery_batch_s"] == 2.25
    assert figures["spark_state_store"] == {
        "warm_ratio": 0.1875,
        "bytes_restored": 111_000,
        "recovery_batch_s": 4.5,
    }
    assert figures["spark_default"] == {"warm_ratio": 0.1875, "bytes_restored": 111_000}


def test_progress_writes_one_line_per_message_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(2, console=Console(file=out, width=100))
    progress.note("starting ZooKeeper ...")
    progress.step("batch 1: 8 warm")
    progress.step("batch 2: 6 warm")
    progress.close()
    assert out.getvalue().splitlines() == [
        "[0/2] starting ZooKeeper ...",
        "[1/2] batch 1: 8 warm",
        "[2/2] batch 2: 6 warm",
    ]


def test_progress_draws_a_bar_in_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system=None)
    progress = Progress(4, console=console)
    progress.step("batch 1")
    progress.close()
    assert progress.done == 1
    assert "1/4" in out.getvalue() and "batch 1" in out.getvalue()


def race_batch(batch: int, warm: int, loaded: int, seconds: float = 1.0) -> RaceBatch:
    return RaceBatch(batch, "", seconds, loaded, rows_out=1, tasks=4, warm=warm)


def test_the_table_and_the_progress_lines_show_the_same_batch() -> None:
    # Spark's Kafka source ran demo batch 0 as two of its batches and demo batch 2 (the kill)
    # as its batches 3 and 4: its rows outnumber affinity's.
    kill = "executor killed"
    steps = [
        ("steady", [race_batch(0, 4, 0)], [race_batch(0, 4, 0), race_batch(1, 4, 0)]),
        ("steady", [race_batch(1, 4, 0)], [race_batch(2, 4, 0)]),
        (kill, [race_batch(2, 4, 0)], [race_batch(3, 2, 5_413_596), race_batch(4, 4, 0)]),
        (kill, [race_batch(3, 4, 0)], [race_batch(5, 4, 0)]),
    ]
    out = io.StringIO()
    demo = Demo.__new__(Demo)  # the recording alone: no cluster
    demo.result = DemoResult()
    demo.progress = Progress(len(steps), console=Console(file=out, width=200))
    for index, (label, affinity, spark) in enumerate(steps):
        demo.record(index, label, {"affinity": affinity, "spark": spark})
    progress = out.getvalue().splitlines()
    assert "batch 2 (executor killed)" in progress[2]
    assert "Spark 75% warm, 5,413,596 B" in progress[2]
    rows = {}
    for line in table(demo.result).splitlines():
        cells = [cell.strip() for cell in line.split("\u2502")[1:-1]]
        if cells and cells[0].isdigit() and len(cells) == 8:
            rows[cells[0]] = cells
    assert sorted(rows) == ["0", "1", "2", "3"]
    for index, line in enumerate(progress):
        spark_warm, spark_loaded = line.split("Spark ")[1].split(" warm, ")
        row = rows[str(index)]
        assert row[5:7] == [spark_warm, spark_loaded.removesuffix(" B loaded")], (line, row)
