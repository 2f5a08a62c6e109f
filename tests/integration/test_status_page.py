"""The status page (/status, /status.json) of real ``affinity coordinator run`` replicas on a
real ZooKeeper, drawn by a real headless Chromium (Debian's ``chromium`` package; ``make test``
installs it): the page shows the job, and after a processor is killed the new version and the
tasks moved; a follower serves the page too, naming the leader.

``AFFINITY_STATUS_SCREENSHOT=docs/status-page.png`` keeps the screenshot taken after the kill
(a real query's batches: ``tests/spark/test_streaming_history.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import CHROMIUM, Chromium, Dom
from jobharness import JobHarness, Proc
from prometheus_client import CollectorRegistry
from test_zk_batches import entry as batch_entry

from coordinator.config import load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.observability import HealthServer
from coordinator.status import JobStatusReader
from coordinator.status.page import StatusPage
from metadata.zk import StoreUnavailable, ZkMetadataStore

pytestmark = [pytest.mark.zk, pytest.mark.slow]

HOSTS = {"p-1": "zone-a/host-1", "p-2": "zone-a/host-2", "p-3": "zone-b/host-3"}


def get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def http_port(proc: Proc) -> int:
    for line in proc.log.read_text(errors="replace").splitlines():
        if '"coordinator.started"' in line:
            return int(json.loads(line)["http_port"])
    raise AssertionError("not started yet")


@pytest.fixture
def job(zk_private_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[JobHarness]:
    harness = JobHarness(zk_private_server, tmp_path / "job", partitions=12)
    yield harness
    harness.stop_all()


def ports_by_role(job: JobHarness) -> tuple[int, int]:
    """(leader's port, follower's port), as the replicas' own /status.json say."""
    roles: dict[bool, int] = {}
    for proc in job.coordinators.values():
        port = http_port(proc)
        code, _, body = get(port, "/status.json")
        assert code == 200, body
        roles[json.loads(body)["replica"]["leading"]] = port
    return roles[True], roles[False]


def test_the_page_shows_the_job_and_a_processor_death(job: JobHarness, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.fail("chromium is missing: `make chromium` (or apt-get install chromium)")
    job.start_coordinator("c-1")
    job.start_coordinator("c-2")
    for pid, location in HOSTS.items():
        job.start_processor(pid, location)
    job.wait_for(job.settled, 60, "the first model in force")
    job.wait_for(lambda: len(job.coordinators) == 2 and bool(ports_by_role(job)), 30, "ports")
    leader_port, follower_port = ports_by_role(job)
    first = job.done_model()
    assert first is not None
    browser = Chromium(tmp_path / "profile")

    page = Dom(browser.dom(f"http://127.0.0.1:{leader_port}/status"))
    assert page.text["job"] == "job clicks-1"
    assert "(leader)" in page.text["who"]
    assert page.text["in-force"].endswith(str(first.version))
    assert page.text["barrier"].endswith("DONE")
    assert {e["data-processor"] for e in page.find(tag="span") if "data-processor" in e} == set(
        HOSTS
    )
    assert "zone-a" in page.text["tree"] and "host-3" in page.text["tree"]
    assert int(page.find(tag="body")[0]["data-refreshes"]) >= 1  # it refreshed itself

    lost = len(first.containers["p-3"].tasks)
    job.kill(job.processors["p-3"])
    job.mark_dead("p-3")
    job.wait_for(
        lambda: job.settled() and job.store.history.versions()[-1] > first.version,
        60,
        "the rebalance after p-3 died",
    )
    model = job.done_model()
    assert model is not None

    after = Dom(browser.dom(f"http://127.0.0.1:{leader_port}/status"))
    assert after.text["in-force"].endswith(str(model.version))
    assert after.find(tag="span", **{"data-version": str(model.version)})  # the timeline
    assert "processors gone" in after.text["timeline"]
    cells = after.text[f"row-{model.version}"].split("|")[1:]
    assert cells[0] == str(model.version)
    assert cells[2:6] == ["processors gone", "DONE", str(lost), f"{12 - lost}/12"]
    assert all(cell.endswith(" ms") or cell.endswith(" s") for cell in cells[6:])
    moved = after.find(tag="div", **{"data-id": f"v{model.version}"})
    assert moved and f"v{model.version}{lost}" in after.text["moved"].replace(" ", "")
    assert "p-3" not in after.text["tree"]

    follower = Dom(browser.dom(f"http://127.0.0.1:{follower_port}/status", budget_ms=1000))
    leader_id = json.loads(get(leader_port, "/status.json")[2])["replica"]["id"]
    assert f"leader: {leader_id}" in follower.text["who"]
    assert "(follower)" in follower.text["who"]
    assert follower.text["in-force"].endswith(str(model.version))

    shot = tmp_path / "status-page.png"
    browser.screenshot(f"http://127.0.0.1:{leader_port}/status", shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("AFFINITY_STATUS_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_the_page_loads_nothing_from_outside_and_answers_503_without_zookeeper(
    zk_store: ZkMetadataStore, tmp_path: Path
) -> None:
    config_path = tmp_path / "job.yaml"
    folder = zk_store.layout.folder
    root, name = folder.rsplit("/", 1)
    config_path.write_text(
        f"job: {{name: {name.rsplit('-', 1)[0]}, id: '{name.rsplit('-', 1)[1]}', run_id: run-1}}\n"
        f"zookeeper: {{root: {root}}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 2}]\n"
    )
    config = load_config(str(config_path))
    assert config.job_folder == folder
    failing = [False]

    class Reader(JobStatusReader):
        def read(self) -> dict[str, Any]:
            if failing[0]:
                raise StoreUnavailable(folder, "ZooKeeper did not answer")
            return super().read()

    page = StatusPage(
        Reader(zk_store, config, replica="r-1", leading=lambda: False), min_interval_s=0
    )
    server = HealthServer(
        "127.0.0.1",
        0,
        registry=CollectorRegistry(),
        alive=lambda: True,
        ready=lambda: True,
        routes=page.routes(),
    ).start()
    try:
        code, ctype, html = get(server.port, "/status")
        assert (code, ctype) == (200, "text/html; charset=utf-8")
        assert "Content-Security-Policy" in html and "default-src 'none'" in html
        assert not re.search(r"(src|href)\s*=|url\(|@import|https?://", html)
        code, ctype, body = get(server.port, "/status.json")
        document = json.loads(body)
        assert (code, document["replica"], document["version"]) == (
            200,
            {"id": "r-1", "leading": False},
            {"latest": None, "in_force": None},
        )
        assert get(server.port, "/nothing")[0] == 404
        failing[0] = True
        code, ctype, body = get(server.port, "/status.json")
        assert (code, ctype) == (503, "application/json")
        assert "ZooKeeper did not answer" in json.loads(body)["error"]
    finally:
        server.stop()


def test_the_page_shows_a_streaming_querys_batches_and_tasks(
    zk_store: ZkMetadataStore, tmp_path: Path
) -> None:
    """The batches a driver wrote to the job's history: the warm ratio, seconds per batch, the
    last batches and the last batch's tasks, a task off its executor and a restore marked."""
    if CHROMIUM is None:
        pytest.fail("chromium is missing: `make chromium` (or apt-get install chromium)")
    folder = zk_store.layout.folder
    root, name = folder.rsplit("/", 1)
    config = load_config(
        data={
            "job": {"name": name.rsplit("-", 1)[0], "id": name.rsplit("-", 1)[1]},
            "zookeeper": {"root": root},
            "inputs": [{"system": "kafka", "stream": "events", "partitions": 2}],
        },
        environ={},
    )
    for batch in range(6):
        restored = 1 if batch == 5 else 0
        zk_store.batches.record(
            batch_entry(batch, seconds=0.4 + batch * 0.3, warm=2 - restored, restored=restored),
            keep=20,
        )
    page = StatusPage(JobStatusReader(zk_store, config, replica="r-1"), min_interval_s=0)
    server = HealthServer(
        "127.0.0.1",
        0,
        registry=CollectorRegistry(),
        alive=lambda: True,
        ready=lambda: True,
        routes=page.routes(),
    ).start()
    try:
        url = f"http://127.0.0.1:{server.port}/status"
        browser = Chromium(tmp_path / "profile")
        drawn = Dom(browser.dom(url))
        shot = tmp_path / "status-page-streaming.png"
        browser.screenshot(url, shot)
    finally:
        server.stop()
    assert drawn.text["warm"] == "warm ratio50%"  # the last batch: 1 of 2 tasks warm
    assert [e["data-batch"] for e in drawn.find(tag="tr") if "data-batch" in e] == [
        str(b) for b in range(5, -1, -1)
    ]
    newest = drawn.text["batches"].split("5|")[1]  # the row of batch 5, after the header
    assert newest.startswith("1.9 s|17|1/2|1|0|5.0 MiB|6.0 KiB|1/2|events-0: 120")
    assert drawn.text["places-title"] == "Tasks of batch 5"
    off = {e["data-task"]: e["data-off"] for e in drawn.find(tag="tr") if "data-task" in e}
    assert off == {"Partition 0": "false", "Partition 1": "true"}
    assert "|3 (pinned to 2)|zone-b/host-3|restored|5.0 MiB|" in drawn.text["places"]
    assert drawn.find(tag="div", **{"data-id": "b5"})  # seconds per batch
    assert "batch 3" + "1.3 s" in drawn.text["batch-times"]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
