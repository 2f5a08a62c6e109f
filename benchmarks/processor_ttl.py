"""TTL expiry in the differential checkpoint: what a batch writes when 1% of a processor's
TTL entries expire, against the size of the whole variable.

A ``StatefulProcessor`` with a ``MapState`` of N = 100,000 entries (``ttlDurationMs``) runs on
the object space, without Spark (``run_task_batch``, one task owning every key group, commits
as the driver writes them): batch 0 writes 1% of the entries, batch 1 the other 99% (later, so
they expire later), batch 2 has no rows and runs when the first 1% expired. Two layouts: all
entries under one grouping key (one key group), and 1,000 keys of 100 entries each over 48 key
groups (each key's first entry in the 1%). Measured: the bytes the expiry batch writes (the
deletions), the whole variable as compact JSON (what rewriting it would write at least), and
the expiry batch's time.

Usage: ``python benchmarks/processor_ttl.py [--quick] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks._processor_run import processor_spec  # noqa: E402
from benchmarks._processor_run import run_batch as run_tasks  # noqa: E402
from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from locality.spark.state import QuerySpec, forget_memory, latest_commit  # noqa: E402
from locality.spark.state.objectspace import ObjectSpace  # noqa: E402

MAXP = 48
TTL_MS = 1000
VARIABLE = "tws/map/seen"


class Seen:
    """A MapState of the values seen per key, each entry with a TTL of a second."""

    def init(self, handle: Any) -> None:
        self.seen = handle.getMapState("seen", "v long", "at long", ttlDurationMs=TTL_MS)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        for pdf in rows:
            for v in pdf["v"]:
                self.seen.updateValue((int(v),), (now,))
        return iter([])


@dataclass(frozen=True)
class Result:
    layout: str
    entries: int
    expired: int
    key_groups: int
    bytes_written: int
    whole_bytes: int
    seconds: float


def spec_of(root: Path) -> QuerySpec:
    return processor_spec(root, Seen(), "ProcessingTime", MAXP, scope="ttl")


def run_batch(spec: QuerySpec, batch: int, frame: pd.DataFrame, time_ms: int) -> Any:
    """One batch of the one task (every key group), committed; its outcome."""
    return run_tasks(spec, batch, frame, {"t0": tuple(range(MAXP))}, time_ms)["t0"]


def whole_bytes(spec: QuerySpec) -> tuple[int, int]:
    """The variable's compact JSON bytes over its key groups, and their number (restored)."""
    commit = latest_commit(spec.store.storage)
    assert commit is not None and commit.heads is not None
    groups = sorted(commit.heads)
    space, _ = ObjectSpace.load(
        spec.store.storage, groups, max_parallelism=MAXP, heads=dict(commit.heads)
    )
    total, used = 0, 0
    for g in groups:
        group = space.group(g)
        if VARIABLE in group and len(group.get_map(VARIABLE)):
            total += len(json.dumps(group.get_map(VARIABLE).to_dict(), separators=(",", ":")))
            used += 1
    return total, used


def measure(layout: str, keys: int, entries: int) -> Result:
    """N = ``entries`` over ``keys`` grouping keys; 1% of them expire in batch 2."""
    forget_memory()
    per_key = entries // keys
    frame = pd.DataFrame({"k": [i // per_key for i in range(entries)], "v": range(entries)})
    first = frame.index % 100 == 0  # 1%, every key's first entry when keys have 100
    with tempfile.TemporaryDirectory(prefix="ttl-bench-") as workdir:
        spec = spec_of(Path(workdir))
        run_batch(spec, 0, frame[first], 1000)  # expire at 2000
        run_batch(spec, 1, frame[~first], 1500)  # expire at 2500
        before, used = whole_bytes(spec)
        began = time.perf_counter()
        outcome = run_batch(spec, 2, frame.iloc[0:0], 2000)
        seconds = time.perf_counter() - began
        after, _ = whole_bytes(spec)
    forget_memory()
    assert after < before
    return Result(layout, entries, int(first.sum()), used, outcome.bytes_written, before, seconds)


def report(results: list[Result]) -> str:
    rows = [
        (
            r.layout,
            f"{r.entries:,}",
            f"{r.expired:,}",
            r.key_groups,
            f"{r.bytes_written:,}",
            f"{r.whole_bytes:,}",
            f"{100 * r.bytes_written / r.whole_bytes:.2f}%",
            f"{r.seconds * 1000:.0f}",
        )
        for r in results
    ]
    headers = (
        "layout",
        "entries",
        "expired",
        "key groups",
        "bytes written at expiry",
        "whole variable (bytes)",
        "ratio",
        "expiry batch (ms)",
    )
    return (
        "## TTL expiry in the differential checkpoint (`benchmarks/processor_ttl.py`)\n\n"
        "A processor's `MapState` with `ttlDurationMs`, 1% of its entries expiring in a batch "
        "without rows: the batch writes their deletions only (one delta per key group that "
        "held one), not the variable again. The whole variable is its compact JSON (what a "
        "rewrite would write at least). On the object space, without Spark; "
        f"{machine()}.\n\n" + table(headers, rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10,000 entries (a smoke test)")
    parser.add_argument("--doc", type=Path, default=DOC, help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    entries = 10_000 if args.quick else 100_000
    results = [
        measure("one key", 1, entries),
        measure(f"{entries // 100:,} keys x 100", entries // 100, entries),
    ]
    markdown = report(results)
    print(markdown)
    if not args.no_write:
        write_section("processor_ttl", markdown, args.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
