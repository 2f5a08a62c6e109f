"""What ``affinity demo`` shows: figures per batch, the totals, the table, the plot and the
progress line."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BatchFigures", "DemoResult", "Progress", "plot", "table"]

STRATEGIES = ("affinity", "spark default")


class PlotUnavailable(RuntimeError):
    """--plot needs matplotlib."""


@dataclass
class BatchFigures:
    batch: int
    label: str
    warm: int
    cold: int
    bytes_restored: int

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

    def totals(self, name: str) -> dict[str, Any]:
        rows = self.batches[name]
        warm = sum(b.warm for b in rows)
        cold = sum(b.cold for b in rows)
        return {
            "warm_ratio": round(warm / (warm + cold), 4) if warm + cold else None,
            "bytes_restored": sum(b.bytes_restored for b in rows),
            "warm": warm,
            "cold": cold,
        }

    def figures(self) -> dict[str, Any]:
        affinity = self.totals("affinity")
        default = self.totals("spark default")
        return {
            "affinity": {
                "warm_ratio": affinity["warm_ratio"],
                "bytes_restored": affinity["bytes_restored"],
                "tasks_moved": self.tasks_moved,
                "versions": len(self.versions),
            },
            "spark_default": {
                "warm_ratio": default["warm_ratio"],
                "bytes_restored": default["bytes_restored"],
            },
            "output_correct": self.output_correct,
        }


class Progress:
    """A one-line text progress bar on stderr."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total = total
        self.width = width
        self.done = 0
        self.tty = sys.stderr.isatty()

    def note(self, message: str) -> None:
        self._write(f"{self._bar()} {message}")

    def step(self, message: str) -> None:
        self.done += 1
        self._write(f"{self._bar()} {message}")

    def _bar(self) -> str:
        filled = self.width * self.done // max(1, self.total)
        return f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total}"

    def _write(self, line: str) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def warm_cold(totals: dict[str, Any]) -> str:
    return f"{totals['warm']}/{totals['cold']}"


def table(result: DemoResult) -> str:
    figures = result.figures()
    a, d = result.totals("affinity"), result.totals("spark default")
    lines = [
        f"{'batch':<7}{'phase':<12}{'affinity warm':>15}{'restored B':>12}"
        f"{'default warm':>15}{'restored B':>12}",
    ]
    for fa, fd in zip(result.batches["affinity"], result.batches["spark default"], strict=True):
        lines.append(
            f"{fa.batch:<7}{fa.label:<12}{percent(fa.warm_ratio):>15}{fa.bytes_restored:>12,}"
            f"{percent(fd.warm_ratio):>15}{fd.bytes_restored:>12,}"
        )
    lines += [
        "",
        f"{'':<28}{'affinity':>14}{'spark default':>16}",
        f"{'job-model versions':<28}{len(result.versions):>14}{'-':>16}",
        f"{'tasks moved':<28}{result.tasks_moved:>14}{'-':>16}",
        f"{'warm ratio':<28}{percent(a['warm_ratio']):>14}{percent(d['warm_ratio']):>16}",
        f"{'warm / cold task runs':<28}{warm_cold(a):>14}{warm_cold(d):>16}",
        f"{'bytes restored':<28}{a['bytes_restored']:>14,}{d['bytes_restored']:>16,}",
        f"{'output == reference':<28}{'yes' if figures['output_correct'] else 'NO':>14}"
        f"{'yes' if figures['output_correct'] else 'NO':>16}",
        "",
        f"versions in force: {result.versions}; whole run {result.seconds:.0f} s",
    ]
    return "\n".join(lines)


def plot(result: DemoResult, path: Path) -> None:
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install matplotlib") from None
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for name in STRATEGIES:
        rows = result.batches[name]
        xs = [b.batch for b in rows]
        top.plot(xs, [b.warm_ratio for b in rows], marker="o", label=name)
        bottom.plot(xs, [b.bytes_restored for b in rows], marker="o", label=name)
    kill = next((b.batch for b in result.batches["affinity"] if b.label != "steady"), None)
    for axis in (top, bottom):
        if kill is not None:
            axis.axvline(kill - 0.5, color="grey", linestyle="--", label="executor killed")
        axis.legend()
    top.set_ylabel("warm ratio")
    top.set_ylim(-0.05, 1.05)
    bottom.set_ylabel("bytes restored")
    bottom.set_xlabel("batch")
    fig.suptitle("affinity demo: host affinity vs Spark default placement")
    fig.savefig(path)
    plt.close(fig)
