"""Names from processors that are hostile to whoever shows them (issue 37, cases 1-4): a
processor id that would change how the browser parses the status page, a location 600 segments
deep, rich markup and terminal escapes in ids, a location with a newline. Real ZooKeeper, the
real ``affinity`` commands and a real headless Chromium."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobharness import AFFINITY, JobHarness
from prometheus_client import CollectorRegistry
from test_status_page import CHROMIUM, Chromium, Dom, get

from coordinator.config import load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.observability import HealthServer
from coordinator.status import JobStatusReader
from coordinator.status.page import StatusPage

pytestmark = [pytest.mark.zk, pytest.mark.slow]

DEEP = "/".join(["z"] * 600)


@pytest.fixture
def job(zk_private_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[JobHarness]:
    harness = JobHarness(zk_private_server, tmp_path / "job", partitions=4)
    harness.store.ensure_layout()
    yield harness
    harness.stop_all()


def affinity(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AFFINITY, *args], capture_output=True, text=True, timeout=60)


def raw_registration(job: JobHarness, processor_id: str, location_id: str) -> str:
    """A registration written past the registry's checks (an old or a hostile client)."""
    data = json.dumps({"processor_id": processor_id, "location_id": location_id, "host": ""})
    path: str = job.store.client.create(
        job.store.layout.processor_prefix, data.encode(), ephemeral=True, sequence=True
    )
    return path


def serve_page(job: JobHarness) -> HealthServer:
    reader = JobStatusReader(job.store, load_config(str(job.config)), replica="r-1")
    return HealthServer(
        "127.0.0.1",
        0,
        registry=CollectorRegistry(),
        alive=lambda: True,
        ready=lambda: True,
        routes=StatusPage(reader, min_interval_s=0).routes(),
    ).start()


def test_a_processor_id_cannot_change_how_the_page_parses(job: JobHarness, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.fail("chromium is missing: `make chromium` (or apt-get install chromium)")
    hostile = "p-<!--<script>"
    job.store.processors.register(hostile, "zone-a/host-1")
    job.store.processors.register("p-2", "zone-b/host-2")
    server = serve_page(job)
    try:
        code, _, html = get(server.port, "/status")
        assert code == 200 and "<!--" not in html.split('id="first"')[1].split("</script>")[0]
        page = Dom(Chromium(tmp_path / "profile").dom(f"http://127.0.0.1:{server.port}/status"))
    finally:
        server.stop()
    assert page.text["job"] == "job clicks-1"  # the drawing script ran
    drawn = {e["data-processor"] for e in page.find(tag="span") if "data-processor" in e}
    assert drawn == {hostile, "p-2"}
    assert hostile in page.text["tree"]


def test_a_deep_location_is_skipped_and_every_status_answers(job: JobHarness) -> None:
    job.store.processors.register("p-1", "zone-a/host-1")
    bad = raw_registration(job, "p-deep", DEEP)
    deeper = raw_registration(job, "p-deeper", "/".join(["z"] * 5000))
    server = serve_page(job)
    try:
        for path in ("/status", "/status.json"):
            code, _, body = get(server.port, path)
            assert code == 200 and "p-deep" not in body
    finally:
        server.stop()
    assert job.store.processors.skipped == tuple(sorted((bad, deeper)))
    for extra in ((), ("--json",)):
        done = affinity("status", "--config", str(job.config), *extra)
        assert done.returncode == 0, done.stderr
        assert "p-1" in done.stdout and "p-deep" not in done.stdout


def test_markup_and_terminal_escapes_in_ids_are_shown_escaped(job: JobHarness) -> None:
    job.store.processors.register("p-markup[/]", "zone-a/[bold]host")
    raw_registration(job, "p-\x1b[2J", "zone-a/host-2")
    raw_registration(job, "p-\x1b]0;title\x07", "zone-a/host-3")
    for command in ("status", "locality show"):
        done = affinity(*command.split(), "--config", str(job.config))
        assert done.returncode == 0, done.stderr
        assert "p-markup[/]" in done.stdout and "[bold]host" in done.stdout
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("location", ["zone-e\nfake", "zone-\x07e", "zone-e/", DEEP])
def test_a_processor_with_a_bad_location_is_refused_before_it_registers(
    job: JobHarness, location: str
) -> None:
    done = affinity(
        "processor", "run", "--config", str(job.config), "--processor-id", "p-1",
        "--location", location,
    )  # fmt: skip
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("affinity: error: location id must")
    assert job.store.processors.read() == ([], [])
