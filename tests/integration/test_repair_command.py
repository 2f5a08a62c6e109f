"""``affinity repair`` (issue 28 item 3): a dry run that lists every unusable node of a job and
what would be done, then ``--apply``. Real ZooKeeper, the real command line.

The job has four versions: version 1 (its barrier state corrupt), 2 (clean, DONE: the model a
leader falls back to), 3 (a chunk corrupt) and 4 (the latest, its manifest corrupt), a corrupt
locality entry and a corrupt history entry. The dry run changes nothing; ``--apply`` removes
barrier 1, version 3 (with its barrier), the locality entry and the history entry, and leaves
version 4, which the version pointer names, to a coordinator's leader (falling back to 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from coordinator.cli.repair import apply_step
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.protocol.repair import Kind, plan_repair
from coordinator.status.damage import find_damage
from metadata.model import (
    BarrierState,
    ContainerModel,
    FrozenMap,
    JobModel,
    SystemStreamPartition,
    TaskModel,
)
from metadata.zk import ZkMetadataStore
from metadata.zk.recipe.history import RebalanceEntry

pytestmark = [pytest.mark.zk]

AFFINITY = str(Path(sys.executable).with_name("affinity"))


def model(version: int) -> JobModel:
    tasks = {
        f"Partition {i}": TaskModel(
            f"Partition {i}", frozenset({SystemStreamPartition("kafka", "events", i)}), i
        )
        for i in range(4)
    }
    container = ContainerModel("p-1", "host-a", FrozenMap(tasks))
    return JobModel(version, FrozenMap({"p-1": container}), FrozenMap())


def snapshot(client: KazooClient, root: str) -> dict[str, bytes]:
    nodes, stack = {}, [root]
    while stack:
        path = stack.pop()
        data, _ = client.get(path)
        nodes[path] = data
        stack += [f"{path}/{child}" for child in client.get_children(path)]
    return nodes


@pytest.fixture
def damaged(
    zk_server: EmbeddedZooKeeper, zk_client: KazooClient, tmp_path: Path
) -> Iterator[tuple[ZkMetadataStore, Path]]:
    root = f"/repair-{uuid.uuid4().hex[:8]}"
    store = ZkMetadataStore(zk_client, f"{root}/clicks-1", run_id="r1")
    store.ensure_layout()
    epoch = store.epochs.acquire()
    for version in (1, 2, 3, 4):
        store.job_models.publish(model(version), epoch=epoch, participants=["p-1"])
        if version < 4:
            store.barriers.set_state(version, BarrierState.DONE, epoch=epoch)
    store.locality.write({"Partition 0": "host-a", "Partition 1": "host-a"})
    entry = RebalanceEntry(3, "DONE", "processors new", published_at=1.0, decided_at=2.0)
    store.history.record(entry, epoch=epoch, keep=10)
    layout = store.layout
    zk_client.set(layout.barrier_state(1), b"MAYBE")
    chunk = store.job_models.read_manifest(3).chunks[0].name
    zk_client.set(f"{layout.job_model(3)}/{chunk}", b"\x00truncated")
    zk_client.set(layout.job_model(4), b"{not a manifest")
    zk_client.set(layout.locality_entry("Partition 1"), b"\x00\xff")
    zk_client.set(layout.history_entry(3), b"{")
    config = tmp_path / "job.yaml"
    config.write_text(
        "job: {name: clicks, id: '1', run_id: r1}\n"
        f"zookeeper: {{connect: '{zk_server.hosts}', root: {root}}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 4}]\n"
    )
    yield store, config
    store.close()


def repair(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AFFINITY, "repair", "--config", str(config), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_dry_run_lists_every_unusable_node_and_changes_nothing(
    damaged: tuple[ZkMetadataStore, Path], zk_client: KazooClient
) -> None:
    store, config = damaged
    before = snapshot(zk_client, store.layout.folder)
    done = repair(config, "--json")
    assert done.returncode == 0, done.stderr
    assert snapshot(zk_client, store.layout.folder) == before
    found = {(f["kind"], f["version"]): f for f in json.loads(done.stdout)["findings"]}
    layout = store.layout
    assert set(found) == {
        ("barrier state", 1),
        ("job-model version", 3),
        ("job-model version", 4),
        ("locality entry", None),
        ("history entry", None),
    }
    assert found[("job-model version", 3)]["action"] == "remove"
    assert found[("job-model version", 3)]["unreadable"].startswith(layout.job_model(3) + "/")
    assert "checksum mismatch" in found[("job-model version", 3)]["problem"]
    latest = found[("job-model version", 4)]
    assert latest["action"] == "leave" and "falling back to version 2" in latest["why"]
    assert found[("barrier state", 1)]["node"] == layout.barrier(1)
    assert found[("locality entry", None)]["node"] == layout.locality_entry("Partition 1")
    assert found[("history entry", None)]["node"] == layout.history_entry(3)
    text = repair(config)
    assert text.returncode == 0
    assert "5 unusable nodes" in text.stdout
    assert "dry run: nothing changed; with --apply, 4 nodes would be removed" in text.stdout
    assert snapshot(zk_client, store.layout.folder) == before


def test_apply_removes_what_no_reader_can_use(
    damaged: tuple[ZkMetadataStore, Path], zk_client: KazooClient
) -> None:
    store, config = damaged
    done = repair(config, "--apply")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("    removed: ") == 4, done.stdout
    assert store.job_models.versions() == [1, 2, 4]
    assert store.barriers.versions() == [2, 4]
    assert store.locality.read() == {"Partition 0": "host-a"}  # reads clean: one entry gone
    assert store.history.read() == []
    again = json.loads(repair(config, "--json").stdout)["findings"]
    assert [(f["kind"], f["version"], f["action"]) for f in again] == [
        ("job-model version", 4, "leave")
    ]


def test_a_node_changed_since_it_was_read_is_not_removed(
    damaged: tuple[ZkMetadataStore, Path], zk_client: KazooClient
) -> None:
    store, _ = damaged
    path = store.layout.locality_entry("Partition 1")
    found = store.read_node(path)
    assert found is not None
    zk_client.set(path, b"host-b")  # its processor rewrote it meanwhile
    assert not store.remove_unusable(path, zversion=found[1], what="test")
    assert store.locality.read()["Partition 1"] == "host-b"
    folder = store.layout.job_model(3)
    stat = zk_client.exists(folder)
    assert stat is not None
    assert store.remove_unusable(folder, zversion=stat.version, what="test")
    assert zk_client.exists(folder) is None


def test_no_such_job_is_one_line_exit_2(tmp_path: Path, zk_server: EmbeddedZooKeeper) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "job: {name: nothing, id: '1'}\n"
        f"zookeeper: {{connect: '{zk_server.hosts}', root: /no-such-root}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 4}]\n"
    )
    done = repair(config)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"affinity: error: no job nothing-1 on ZooKeeper {zk_server.hosts} "
        "(no folder /no-such-root/nothing-1)"
    ]


def test_a_clean_job_has_nothing_to_repair(
    zk_server: EmbeddedZooKeeper, zk_client: KazooClient, tmp_path: Path
) -> None:
    root = f"/repair-{uuid.uuid4().hex[:8]}"
    store = ZkMetadataStore(zk_client, f"{root}/clicks-1", run_id="r1")
    store.ensure_layout()
    epoch = store.epochs.acquire()
    store.job_models.publish(model(1), epoch=epoch, participants=["p-1"])
    config = tmp_path / "job.yaml"
    config.write_text(
        "job: {name: clicks, id: '1', run_id: r1}\n"
        f"zookeeper: {{connect: '{zk_server.hosts}', root: {root}}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 4}]\n"
    )
    done = repair(config, "--apply")
    assert done.returncode == 0
    assert done.stdout == f"job clicks-1 at {root}/clicks-1: no unusable node found\n"


def test_a_version_whose_chunk_became_readable_since_it_was_read_is_not_removed(
    damaged: tuple[ZkMetadataStore, Path], zk_client: KazooClient
) -> None:
    store, _ = damaged
    damage = find_damage(store)
    steps = plan_repair(damage.findings, pointer=damage.pointer, states=damage.states)
    [step] = [s for s in steps if s.finding.kind is Kind.VERSION and s.finding.version == 3]
    assert step.remove and step.finding.unreadable.startswith(store.layout.job_model(3) + "/")
    # Meanwhile the chunk is rewritten whole (readable again); its folder's znode is untouched.
    clean = ZkMetadataStore(zk_client, f"{store.layout.folder}-clean", run_id="r1")
    clean.ensure_layout()
    clean.job_models.publish(model(3), epoch=clean.epochs.acquire(), participants=["p-1"])
    chunk = step.finding.unreadable.rsplit("/", 1)[1]
    zk_client.set(step.finding.unreadable, zk_client.get(f"{clean.layout.job_model(3)}/{chunk}")[0])
    assert store.job_models.read(3) == model(3)

    assert not apply_step(store, step)
    assert store.job_models.read(3) == model(3)  # still there
