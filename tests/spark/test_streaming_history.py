"""A real streaming query on the 3-worker cluster writes each committed batch's report to the
job's history in ZooKeeper (store.batches): its rows, tasks warm / restored / new, pinned ok,
each task's executor and location, drawn on the status page (a real Chromium) and by ``affinity
status``; a history write that fails is logged and counted, never failing the committed batch.
``AFFINITY_STREAMING_SCREENSHOT=docs/status-page-streaming.png`` keeps the page's screenshot."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from browser import CHROMIUM, Chromium, Dom
from prometheus_client import CollectorRegistry
from rich.console import Console
from spark_app import SparkApp
from test_streaming_failure_modes import TASKS, WordQuery, config_of

from coordinator.cli.status import render
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.observability import HealthServer
from coordinator.status import JobStatusReader
from coordinator.status.page import StatusPage
from metadata.zk.errors import StoreUnavailable
from metadata.zk.recipe.batches import BatchEntry

pytestmark = pytest.mark.spark


def words(index: int) -> list[str]:
    return [f"w{(index * 5 + i) % 17}" for i in range(30)]


def test_each_batch_goes_to_the_history_and_a_failed_write_does_not_fail_it(
    app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path
) -> None:
    config = config_of(zk_server, tmp_path, "words-history")
    query = WordQuery(app, tmp_path, config, "spark-checkpoint")
    try:
        query.feed(0, words(0))
        store = query.handler._store
        assert store is not None
        real_record = store.batches.record

        def lost(entry: BatchEntry, *, keep: int) -> bool:  # the connection lost
            store.batches.record = real_record  # type: ignore[method-assign]
            raise StoreUnavailable(store.layout.history, "connection lost")

        store.batches.record = lost  # type: ignore[method-assign]
        query.feed(1, words(1))  # its history write fails: logged, counted, the batch stands
        query.feed(2, words(2))
        reports = query.handler.reports
        entries = store.batches.read()
        document = JobStatusReader(store, config).read()
        drawn = draw_page(JobStatusReader(store, config, replica="r-1"), tmp_path)
    finally:
        query.stop()
    assert [r.after_commit_failures for r in reports] == [0, 1, 0]
    assert [e.batch for e in entries] == [0, 2]
    last, report = entries[-1], reports[-1]
    assert last.rows_in == report.rows_in == len(words(2))
    assert (last.tasks, last.warm, last.restored, last.new) == (
        report.tasks,
        report.warm,
        report.restored,
        report.new,
    )
    assert (last.pinned_ok, last.pinned_total) == (report.pinned_ok, report.pinned_total)
    assert last.tasks == TASKS and last.seconds > 0 and last.lag == {}
    assert [p.task for p in last.places] == sorted(p.task for p in last.places)
    for place in last.places:
        assert place.executor is not None and place.location, place
        assert place.pinned_to is not None
    assert last.bytes_written == sum(p.bytes_written for p in last.places) > 0
    assert [b["batch"] for b in document["batches"]] == [0, 2]
    assert document["warm_ratio"] == last.warm / last.tasks
    # the real query's batches as an operator sees them: the status page, affinity status
    assert [e["data-batch"] for e in drawn.find(tag="tr") if "data-batch" in e] == ["2", "0"]
    assert drawn.text["places-title"] == "Tasks of batch 2"
    assert sorted(e["data-task"] for e in drawn.find(tag="tr") if "data-task" in e) == sorted(
        p.task for p in last.places
    )
    console = Console(width=160, record=True, file=io.StringIO())
    for part in render(document):
        console.print(part)
    text = console.export_text()
    assert "tasks of batch 2" in text.lower()
    for place in last.places:
        assert place.task in text and str(place.location) in text


def draw_page(reader: JobStatusReader, tmp: Path) -> Dom:
    """The status page of the job drawn by a real Chromium (its screenshot kept in
    ``AFFINITY_STREAMING_SCREENSHOT`` when set: docs/status-page-streaming.png)."""
    if CHROMIUM is None:
        pytest.fail("chromium is missing: `make chromium` (or apt-get install chromium)")
    page = StatusPage(reader, min_interval_s=0)
    server = HealthServer(
        "127.0.0.1", 0, registry=CollectorRegistry(), alive=lambda: True, ready=lambda: True,
        routes=page.routes(),
    ).start()  # fmt: skip
    try:
        url = f"http://127.0.0.1:{server.port}/status"
        browser = Chromium(tmp / "profile")
        drawn = Dom(browser.dom(url))
        keep = os.environ.get("AFFINITY_STREAMING_SCREENSHOT")
        if keep:
            browser.screenshot(url, Path(keep))
    finally:
        server.stop()
    return drawn
