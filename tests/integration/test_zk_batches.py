"""The streaming batch history (store.batches) on a real ZooKeeper: bounded, a batch committed
again replaces its entry, beside the rebalance history without disturbing it; and what reads
it: the status document, ``affinity status``'s rendering and the coordinator's /metrics."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from jobharness import AFFINITY
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from coordinator.cli.status import render
from coordinator.config import JobConfig
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.status import JobStatusReader
from coordinator.status.batch_metrics import BatchCollector
from metadata.errors import CorruptDataError
from metadata.zk import ZkMetadataStore
from metadata.zk.recipe.batches import BatchEntry, TaskPlace
from metadata.zk.recipe.history import RebalanceEntry

pytestmark = pytest.mark.zk


def entry(batch: int, **kw: object) -> BatchEntry:
    places = (
        TaskPlace("Partition 0", "1", "zone-a/host-1", "1", "local", 0, 2048, 10, 0.2),
        TaskPlace("Partition 1", "3", "zone-b/host-3", "2", "restored", 5 << 20, 4096, 7, 0.9),
    )
    fields: dict[str, object] = {
        "written_at": 1_700_000_000.0 + batch,
        "version": 3,
        "seconds": 1.25,
        "rows_in": 17,
        "tasks": 2,
        "warm": 1,
        "restored": 1,
        "pinned_ok": 1,
        "pinned_total": 2,
        "bytes_restored": 5 << 20,
        "bytes_written": 6144,
        "places": places,
        "lag": {"events-0": 120, "events-1": 0},
    }
    fields.update(kw)
    return BatchEntry(batch, **fields)  # type: ignore[arg-type]


def test_entries_round_trip_bounded_and_replaced(zk_store: ZkMetadataStore) -> None:
    batches = zk_store.batches
    for b in range(5):
        assert batches.record(entry(b), keep=3)
    assert [e.batch for e in batches.read()] == [2, 3, 4]
    assert batches.read(limit=1) == [entry(4)]
    assert batches.read()[-1].places[1].off and not batches.read()[-1].places[0].off
    # a batch committed again (Spark's replay after a driver restart) replaces its entry
    assert not batches.record(entry(4, seconds=9.0), keep=3)
    assert [e.seconds for e in batches.read()] == [1.25, 1.25, 9.0]


def test_beside_the_rebalance_history(zk_store: ZkMetadataStore) -> None:
    epoch = zk_store.epochs.acquire()
    rebalance = RebalanceEntry(7, "DONE", "processors gone", published_at=1.0, decided_at=2.0)
    assert zk_store.history.record(rebalance, epoch=epoch, keep=1)
    for b in (1, 2):
        zk_store.batches.record(entry(b), keep=1)
    assert zk_store.history.read() == [rebalance]
    assert zk_store.history.record(
        RebalanceEntry(8, "DONE", "x", published_at=1.0, decided_at=2.0), epoch=epoch, keep=1
    )
    assert [e.batch for e in zk_store.batches.read()] == [2]
    assert zk_store.history.versions() == [8]


def test_unusable_entry_names_its_path(zk_store: ZkMetadataStore) -> None:
    path = zk_store.layout.batch_entry(3)
    zk_store.client.create(path, b"{not json")
    with pytest.raises(CorruptDataError, match=r"batch-3.*batch history entry is unusable"):
        zk_store.batches.read()
    zk_store.client.set(path, json.dumps({"batch": 3, "written_at": 1.0, "later": 1}).encode())
    assert zk_store.batches.read() == [BatchEntry(3, written_at=1.0)]


def test_status_document_and_text_show_the_batches(zk_store: ZkMetadataStore) -> None:
    config = JobConfig.model_validate(
        {
            "job": {"name": "clicks", "id": "1"},
            "inputs": [{"system": "kafka", "stream": "events", "partitions": 2}],
        }
    )
    reader = JobStatusReader(zk_store, config)
    empty = reader.read()
    assert empty["batches"] == [] and empty["warm_ratio"] is None
    zk_store.batches.record(entry(1, warm=2, restored=0), keep=5)
    zk_store.batches.record(entry(2), keep=5)
    document = json.loads(json.dumps(reader.read()))
    assert [b["batch"] for b in document["batches"]] == [1, 2]
    assert document["warm_ratio"] == 0.5  # the last batch: 1 of 2 tasks warm
    assert document["batches"][-1]["places"][1]["location"] == "zone-b/host-3"

    console = Console(width=160, record=True)
    for part in render(document):
        console.print(part)
    text = console.export_text()
    assert "last batches (streaming)" in text and "tasks of batch 2" in text
    row = next(line for line in text.splitlines() if line.strip("│ ").startswith("2 "))
    for cell in ("1.2 s", "1/2", "5.0 MiB", "6.0 KiB", "events-0: 120"):
        assert cell in row, (cell, row)
    moved = next(line for line in text.splitlines() if "Partition 1" in line)
    assert "3 (pinned to 2)" in moved and "zone-b/host-3" in moved and "restored" in moved


def test_metrics_export_the_newest_batch(zk_store: ZkMetadataStore) -> None:
    registry = CollectorRegistry()
    registry.register(BatchCollector(zk_store, min_interval_s=0))
    before = generate_latest(registry).decode()
    assert "affinity_streaming_history_readable 1.0" in before
    assert "affinity_streaming_batch_seconds " not in before
    zk_store.batches.record(entry(1), keep=5)
    zk_store.batches.record(entry(2, seconds=3.5), keep=5)
    text = generate_latest(registry).decode()
    for sample in (
        "affinity_streaming_last_batch 2.0",
        "affinity_streaming_batch_seconds 3.5",
        'affinity_streaming_batch_tasks{state="restored"} 1.0',
        'affinity_streaming_batch_tasks{state="warm"} 1.0',
        'affinity_streaming_batch_bytes{kind="restored"} 5.24288e+06',
        "affinity_streaming_batch_tasks_off_executor 1.0",
        'affinity_streaming_kafka_lag{partition="events-0"} 120.0',
    ):
        assert sample in text, sample
    zk_store.client.set(zk_store.layout.batch_entry(2), b"[]")
    broken = generate_latest(registry).decode()
    assert "affinity_streaming_history_readable 0.0" in broken
    assert "affinity_streaming_last_batch 2.0" in broken  # the last entry read


def test_affinity_status_prints_the_batches(
    zk_store: ZkMetadataStore, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    root, name = zk_store.layout.folder.rsplit("/", 1)
    job, job_id = name.rsplit("-", 1)
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job: {{name: {job}, id: '{job_id}', run_id: run-1}}\n"
        f"zookeeper: {{connect: '{zk_server.hosts}', root: {root}}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 2}]\n"
    )
    zk_store.batches.record(entry(7), keep=5)
    command = [AFFINITY, "status", "--config", str(config)]
    text = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "last batches (streaming)" in text.stdout and "tasks of batch 7" in text.stdout
    assert "3 (pinned to 2)" in text.stdout
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=60)
    document = json.loads(done.stdout)
    assert document["batches"][-1]["lag"] == {"events-0": 120, "events-1": 0}
    assert document["warm_ratio"] == 0.5
