"""A model in force that cannot be read no longer stops the job (issue 28 item 3).

Real coordinator and processor processes on a real ZooKeeper. The job runs version 2 (version 1
is an older DONE model); the coordinator is killed; a chunk or the manifest of version 2, or the
version pointer, is corrupted; a processor restarts meanwhile (it runs none of its tasks: it
cannot read what it should run). A new coordinator used to step down and back off for ever (no
rebalance until someone repaired ZooKeeper). Now it falls back to the newest model that reads
clean (version 1, or version 2 itself when only the pointer is bad; a fresh model when nothing
reads clean), publishes a new version above every stored one, and says so in its log, its
metrics, the rebalance history and ``affinity status``; every processor runs its tasks again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from jobharness import JobHarness, Proc

pytestmark = [pytest.mark.zk, pytest.mark.slow]

AFFINITY = str(Path(sys.executable).with_name("affinity"))


def logged(proc: Proc, event: str) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for line in proc.log.read_text(errors="replace").splitlines()
        if line.startswith("{") and f'"{event}"' in line
    ]


def http_port(job: JobHarness, proc: Proc) -> int:
    job.wait_for(lambda: bool(logged(proc, "coordinator.started")), 30, "coordinator.started")
    return int(logged(proc, "coordinator.started")[0]["http_port"])  # type: ignore[call-overload]


def metrics(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode()).splitlines()


def two_versions(job: JobHarness) -> Proc:
    """Version 1 (p-1, p-2) and version 2 (p-3 joins), both DONE; returns the coordinator."""
    coordinator = job.start_coordinator("coordinator-0")
    job.start_processor("p-1", "host-a")
    job.start_processor("p-2", "host-b")
    job.wait_for(job.settled, 40, "version 1")
    job.start_processor("p-3", "host-c")
    job.wait_for(job.settled, 40, "version 2")
    model = job.done_model()
    assert model is not None and model.version == 2
    return coordinator


def corrupt(job: JobHarness, what: str) -> None:
    store = job.store
    client, layout = store.client, store.layout
    if what == "pointer":
        client.set(layout.job_model_version, b"garbage")
    elif what == "dangling pointer":
        client.set(layout.job_model_version, b"40")  # a version that does not exist
    elif what == "manifest":
        client.set(layout.job_model(2), b"{not a manifest")
    else:
        versions = (1, 2) if what == "every chunk" else (2,)
        for version in versions:
            chunk = store.job_models.read_manifest(version).chunks[0].name
            client.set(f"{layout.job_model(version)}/{chunk}", b"\x00truncated")


CASES = [
    # what is corrupted, the version it falls back to (None: fresh), the version published
    ("chunk", 1, 3),
    ("manifest", 1, 3),
    ("pointer", 2, 3),
    ("dangling pointer", 2, 41),
    ("every chunk", None, 3),
]


@pytest.mark.parametrize(("what", "fallback", "published"), CASES, ids=[c[0] for c in CASES])
def test_a_new_leader_falls_back_and_republishes(
    job_factory: Callable[..., JobHarness],
    what: str,
    fallback: int | None,
    published: int,
) -> None:
    job = job_factory(partitions=6, barrier_timeout_ms=8000)
    job.kill(two_versions(job))
    corrupt(job, what)
    job.kill(job.processors["p-1"])
    (job.workdir / "p-1.json").unlink()  # what the killed process ran
    job.start_processor("p-1", "host-a")  # restarted while the model in force is unreadable
    if what in ("manifest", "pointer"):
        job.wait_for(
            lambda: bool(logged(job.processors["p-1"], "member.store_error")), 20, "p-1 failing"
        )
        assert job.running("p-1") == {}  # it cannot read what to run

    coordinator = job.start_coordinator("coordinator-1")
    port = http_port(job, coordinator)
    job.wait_for(job.settled, 60, f"a clean version replacing the unreadable one ({what})")
    model = job.done_model()
    assert model is not None and model.version == published
    assert all(
        set(job.running(pid)) == set(model.containers[pid].tasks) for pid in model.containers
    )
    assert set(model.containers) == {"p-1", "p-2", "p-3"}
    assert job.running("p-1")  # the restarted processor runs its tasks again

    # The log says what could not be read and what replaced it ...
    (found,) = logged(coordinator, "coordinator.model_in_force_unreadable")
    assert found["fallback_version"] == fallback
    assert found["recovery"] == ("fresh model" if fallback is None else "older model")
    nodes = " ".join(map(str, found["nodes"]))  # type: ignore[call-overload]
    assert ("jobModelVersion" if "pointer" in what else "jobModels/2") in nodes, found
    (publish,) = [
        p for p in logged(coordinator, "coordinator.published") if p.get("replaces_unreadable")
    ]
    assert publish["version"] == published
    assert not logged(coordinator, "coordinator.leadership_failed")  # it did not back off
    # ... the metrics ...
    label = "fresh model" if fallback is None else "older model"
    lines = metrics(port)
    assert f'affinity_unreadable_model_recoveries_total{{fallback="{label}"}} 1.0' in lines
    assert "affinity_unreadable_model 0.0" in lines
    # ... and affinity status (the rebalance history).
    status = subprocess.run(
        [AFFINITY, "status", "--config", str(job.config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    document = json.loads(status.stdout)
    assert document["version"]["in_force"] == published
    entry = next(e for e in document["rebalances"] if e["version"] == published)
    assert entry["trigger"] == "model in force unreadable"
    assert ("fell back to version" in entry["note"]) == (fallback is not None), entry["note"]
    shown = subprocess.run(
        [AFFINITY, "status", "--config", str(job.config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"v{published} model in force unreadable: " in shown.stdout

    # What the leader read past is still there: affinity repair finds it and removes it.
    def findings(*extra: str) -> list[dict[str, object]]:
        done = subprocess.run(
            [AFFINITY, "repair", "--config", str(job.config), "--json", *extra],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        found: list[dict[str, object]] = json.loads(done.stdout)["findings"]
        return found

    left_behind = {"chunk": [2], "manifest": [2], "every chunk": [1, 2]}.get(what, [])
    dry = findings()
    assert sorted(f["version"] for f in dry) == left_behind  # type: ignore[type-var]
    assert all(f["action"] == "remove" for f in dry)
    assert all(f["removed"] for f in findings("--apply"))
    assert findings() == []
    assert job.store.job_models.latest_version() == published  # the job is untouched
    assert job.settled()
