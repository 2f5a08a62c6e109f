"""What ``affinity demo`` shows: figures per batch, the totals, the tables and the progress bar
(rich), and the plot."""

from __future__ import annotations

import importlib
import io
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

__all__ = ["BatchFigures", "DemoResult", "Progress", "plot", "table"]

STRATEGIES = ("affinity", "spark state store")


class PlotUnavailable(RuntimeError):
    """--plot needs matplotlib."""


@dataclass
class BatchFigures:
    batch: int
    label: str
    warm: int
    cold: int
    bytes_restored: int
    seconds: float = 0.0
    rows_in: int = 0
    driver_rows: int = 0

    @property
    def warm_ratio(self) -> float | None:
        known = self.warm + self.cold
        return self.warm / known if known else None


@dataclass
class DemoResult:
    batches: dict[str, list[BatchFigures]] = field(
        default_factory=lambda: {name: [] for name in STRATEGIES}
    )
    versions: list[int] = field(default_factory=list)  # job-model versions put in force
    tasks_moved: int = 0
    output_correct: bool = False
    seconds: float = 0.0

    def recovery_batch_s(self, name: str) -> float | None:
        """The slowest first batch after a failure (a batch whose phase differs from the one
        before it, the first batch excluded)."""
        rows = self.batches[name]
        firsts = [b.seconds for a, b in itertools.pairwise(rows) if b.label != a.label]
        return round(max(firsts), 3) if firsts else None

    def totals(self, name: str) -> dict[str, Any]:
        rows = self.batches[name]
        warm = sum(b.warm for b in rows)
        cold = sum(b.cold for b in rows)
        return {
            "warm_ratio": round(warm / (warm + cold), 4) if warm + cold else None,
            "bytes_restored": sum(b.bytes_restored for b in rows),
            "warm": warm,
            "cold": cold,
            "rows_in": sum(b.rows_in for b in rows),
            "driver_rows": sum(b.driver_rows for b in rows),
        }

    def figures(self) -> dict[str, Any]:
        """The ``--json`` figures. ``spark_default`` (kept from the earlier demo) and
        ``spark_state_store`` are both Spark's own stateful operator, placed by Spark."""
        affinity = self.totals("affinity")
        spark = self.totals("spark state store")
        return {
            "affinity": {
                "warm_ratio": affinity["warm_ratio"],
                "bytes_restored": affinity["bytes_restored"],
                "tasks_moved": self.tasks_moved,
                "versions": len(self.versions),
                "recovery_batch_s": self.recovery_batch_s("affinity"),
                "rows_in": affinity["rows_in"],
                "driver_rows": affinity["driver_rows"],
            },
            "spark_default": {
                "warm_ratio": spark["warm_ratio"],
                "bytes_restored": spark["bytes_restored"],
            },
            "spark_state_store": {
                "warm_ratio": spark["warm_ratio"],
                "bytes_restored": spark["bytes_restored"],
                "recovery_batch_s": self.recovery_batch_s("spark state store"),
            },
            "output_correct": self.output_correct,
        }


class Progress:
    """The demo's progress on stderr: a rich progress bar (batches done of ``total``) with the
    current step in a terminal, one line per message otherwise (logs, CI)."""

    def __init__(self, total: int, console: Console | None = None) -> None:
        self.total = total
        self.done = 0
        self.console = console or Console(stderr=True, highlight=False)
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None
        if self.console.is_terminal:
            self._bar = RichProgress(
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=self.console,
                transient=False,
            )
            self._task = self._bar.add_task("", total=total)
            self._bar.start()

    def note(self, message: str) -> None:
        self._show(message)

    def step(self, message: str) -> None:
        self.done += 1
        self._show(message, advance=1)

    def _show(self, message: str, advance: int = 0) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=message, advance=advance)
        else:
            self.console.print(f"[{self.done}/{self.total}] {message}", markup=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def warm_cold(totals: dict[str, Any]) -> str:
    return f"{totals['warm']}/{totals['cold']}"


def _batches(result: DemoResult) -> Table:
    batches = Table(title="per batch", title_justify="left")
    columns = ("batch", "phase", "affinity warm", "loaded B", "s", "spark warm", "loaded B", "s")
    for column in columns:
        batches.add_column(column, justify="left" if column == "phase" else "right")
    for fa, fd in zip(  # one row per demo batch and way (spark_demo.step_figures)
        result.batches["affinity"], result.batches["spark state store"], strict=True
    ):
        batches.add_row(
            str(fa.batch),
            fa.label,
            percent(fa.warm_ratio),
            f"{fa.bytes_restored:,}",
            f"{fa.seconds:.1f}",
            percent(fd.warm_ratio),
            f"{fd.bytes_restored:,}",
            f"{fd.seconds:.1f}",
        )
    return batches


def _totals(result: DemoResult) -> Table:
    figures = result.figures()
    a, d = result.totals("affinity"), result.totals("spark state store")
    correct = "yes" if figures["output_correct"] else "NO"
    totals = Table(title="whole run", title_justify="left")
    totals.add_column("")
    totals.add_column("affinity", justify="right")
    totals.add_column("spark state store", justify="right")
    totals.add_row("job-model versions", str(len(result.versions)), "-")
    totals.add_row("tasks moved", str(result.tasks_moved), "-")
    totals.add_row("warm ratio", percent(a["warm_ratio"]), percent(d["warm_ratio"]))
    totals.add_row("warm / cold task runs", warm_cold(a), warm_cold(d))
    totals.add_row("state bytes loaded", f"{a['bytes_restored']:,}", f"{d['bytes_restored']:,}")
    totals.add_row(
        "slowest first batch after a failure",
        _seconds(figures["affinity"]["recovery_batch_s"]),
        _seconds(figures["spark_state_store"]["recovery_batch_s"]),
    )
    totals.add_row(
        "batch rows through the driver", f"{a['driver_rows']:,} of {a['rows_in']:,}", "-"
    )
    totals.add_row("output == reference", correct, correct)
    return totals


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def table(result: DemoResult) -> str:
    """The per-batch and whole-run tables (rich), as text."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, color_system=None, highlight=False)
    console.print(_batches(result))
    console.print(_totals(result))
    console.print(f"versions in force: {result.versions}; whole run {result.seconds:.0f} s")
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())


def plot(result: DemoResult, path: Path) -> None:
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install matplotlib") from None
    fig, (top, middle, bottom) = plt.subplots(3, 1, sharex=True, figsize=(8, 8))
    for name in STRATEGIES:
        rows = result.batches[name]
        xs = [b.batch for b in rows]
        top.plot(xs, [b.warm_ratio for b in rows], marker="o", label=name)
        middle.plot(xs, [b.bytes_restored for b in rows], marker="o", label=name)
        bottom.plot(xs, [b.seconds for b in rows], marker="o", label=name)
    rows = result.batches["affinity"]
    failures = [(b.batch, b.label) for a, b in itertools.pairwise(rows) if b.label != a.label]
    for axis in (top, middle, bottom):
        for batch, label in failures:
            axis.axvline(batch - 0.5, color="grey", linestyle="--")
            axis.annotate(label, (batch - 0.5, 0), xycoords=("data", "axes fraction"), fontsize=7)
        axis.legend()
    top.set_ylabel("warm ratio")
    top.set_ylim(-0.05, 1.05)
    middle.set_ylabel("state bytes loaded")
    bottom.set_ylabel("batch s")
    bottom.set_xlabel("batch")
    fig.suptitle("affinity demo: stateful_foreach_batch vs Spark's RocksDB state store")
    fig.savefig(path)
    plt.close(fig)
