"""The expiry of TTL entries in the checkpoint: a batch in which k of a MapState's N entries
expire writes their k deletions (the differential checkpoint), not the variable again whole."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from test_spark_processor import restored_group, run_batch, spec_of

from locality.spark.state import TaskOutcome

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.processor_ttl import Seen

N = 10_000  # entries of the variable, under one grouping key (one key group)
K = 100  # of them expire in the measured batch (1%)


def written(outcomes: dict[str, TaskOutcome]) -> int:
    return sum(o.bytes_written for o in outcomes.values())


def test_expiring_k_of_n_entries_writes_k_deletions(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, Seen(), "ProcessingTime")
    run_batch(spec, 0, [{"k": 1, "v": v} for v in range(K)], time_ms=1000)  # expire at 2000
    run_batch(spec, 1, [{"k": 1, "v": v} for v in range(K, N)], time_ms=1500)  # at 2500
    before = restored_group(spec, 1)["tws/map/seen"]
    assert len(before) == N

    expiry = run_batch(spec, 2, [], time_ms=2000)  # no rows: the first K entries expire

    after = restored_group(spec, 1)["tws/map/seen"]
    assert sorted(after) == sorted(f"[1]\t[{v}]" for v in range(K, N))
    whole = len(json.dumps({"tws/map/seen": after}, separators=(",", ":")))
    assert written(expiry) * 20 < whole  # 1% of the entries: a few % of the variable's bytes
    folder = tmp_path / "durable" / "keygroups" / "kg-00001"
    newest = max(folder.iterdir(), key=lambda p: p.name.split("-")[1])
    assert written(expiry) == newest.stat().st_size
    document = json.loads(newest.read_text())
    assert document["type"] == "delta" and document["batch"] == 2
    assert document["objects"] == {
        "tws/map/seen": {"kind": "map", "patch": {"del": sorted(f"[1]\t[{v}]" for v in range(K))}}
    }
