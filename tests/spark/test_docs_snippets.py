"""docs/spark.md's "Moving a query over" blocks run as written on the 3-worker cluster: the job
config of step 2 (overridden by the environment, as the page says), the set-up of step 3, the
query with Spark's own operator ("before") and with ``stateful_foreach_batch`` ("after"); both
give the same output, batch by batch. With ``AFFINITY_LOG_LEVEL=warning`` the handler and its
embedded coordinator print no debug or info line."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from docs_snippets import snippet
from spark_app import SparkApp

from coordinator.launchers.zookeeper import EmbeddedZooKeeper

pytestmark = pytest.mark.spark

PAGE = "docs/spark.md"
BATCHES = [[("u1", 3), ("u2", 1), ("u1", 2)], [("u2", 5), ("u3", 1)], [("u1", 1)]]
EXPECTED = {0: [("u1", 2, 5), ("u2", 1, 1)], 1: [("u2", 2, 6), ("u3", 1, 1)], 2: [("u1", 3, 6)]}
# the processor's: clicks, total and values not seen before, per user
EXPECTED_TWS = {
    0: [("u1", 2, 5, 2), ("u2", 1, 1, 1)],
    1: [("u2", 2, 6, 1), ("u3", 1, 1, 1)],
    2: [("u1", 3, 6, 1)],
}
# the same with u1 seeded by the initial state (10 clicks worth 100; u9 has no clicks)
EXPECTED_TWS_INITIAL = {**EXPECTED_TWS, 0: [("u1", 12, 105, 2), ("u2", 1, 1, 1)],
                        2: [("u1", 13, 106, 1)]}  # fmt: skip
# the event-time sessions': clicks and whether the session closed; batch 2's click is late
EXPECTED_EVENT_TIME = {
    0: [("u1", 2, False), ("u2", 1, False)],
    1: [("u2", 2, False), ("u3", 1, False)],
    2: [("u3", 1, True)],
}
SPARK_CONF = (  # what the tws-before block sets on the session (put back after it)
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.noDataMicroBatches.enabled",
)
# a structlog line below warning (console or JSON rendering)
CHATTY = re.compile(r"\[(debug|info)\s*\]|\"level\": \"(debug|info)\"")


def write_clicks(directory: Path) -> None:
    """One JSON file per batch, oldest first (the file source takes them in that order)."""
    directory.mkdir()
    now = time.time()
    for b, rows in enumerate(BATCHES):
        path = directory / f"clicks-{b}.json"
        path.write_text("".join(json.dumps({"user": u, "value": v}) + "\n" for u, v in rows))
        os.utime(path, (now - 100 + b, now - 100 + b))


def run_snippets(names: list[str], namespace: dict[str, Any]) -> dict[str, Any]:
    for name in names:
        exec(compile(snippet(PAGE, name), f"{PAGE}:{name}", "exec"), namespace)
    return namespace


def test_before_and_after_run_as_written_and_agree(
    app: SparkApp,
    zk_private_server: EmbeddedZooKeeper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    write_clicks(tmp_path / "clicks")
    (tmp_path / "clicks.yaml").write_text(snippet(PAGE, "clicks.yaml"))
    monkeypatch.chdir(tmp_path)  # load_config("clicks.yaml")
    # The page's file names zk:2181 and /mnt paths: the environment overrides them, as documented.
    monkeypatch.setenv("AFFINITY_ZK_CONNECT", zk_private_server.hosts)
    monkeypatch.setenv("AFFINITY_STATE__CHECKPOINT_DIR", str(tmp_path / "durable"))
    monkeypatch.setenv("AFFINITY_STATE__LOCAL_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("AFFINITY_LOG_LEVEL", "warning")
    outputs = {}
    for way in ("before", "after"):
        namespace: dict[str, Any] = {
            "__name__": f"docs_spark_{way}",  # not importable: functions travel by value
            "spark": app.session,
            "input_dir": str(tmp_path / "clicks"),
            "cp": str(tmp_path / f"checkpoint-{way}"),
        }
        try:
            run_snippets(["setup", way], namespace)
        finally:
            if "handler" in namespace:
                namespace["handler"].close()
        outputs[way] = namespace["outputs"]
    assert outputs["before"] == EXPECTED
    assert outputs["after"] == EXPECTED
    reports = namespace["handler"].reports
    assert [r.batch for r in reports] == [0, 1, 2] and reports[0].tasks == 4

    printed = capfd.readouterr()
    chatty = [line for line in printed.out.splitlines() if CHATTY.search(line)]
    assert chatty == [], chatty[:5]  # logging.level warning: no debug or info line of ours


def test_a_transform_with_state_query_moves_over_as_written(
    app: SparkApp,
    zk_private_server: EmbeddedZooKeeper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_clicks(tmp_path / "clicks")
    (tmp_path / "clicks.yaml").write_text(snippet(PAGE, "clicks.yaml"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AFFINITY_ZK_CONNECT", zk_private_server.hosts)
    monkeypatch.setenv("AFFINITY_STATE__CHECKPOINT_DIR", str(tmp_path / "durable"))
    monkeypatch.setenv("AFFINITY_STATE__LOCAL_DIR", str(tmp_path / "local"))
    assert app.session is not None
    outputs = {}
    for way in ("tws-before", "tws-after"):
        namespace: dict[str, Any] = {
            "__name__": f"docs_spark_{way}",  # not importable: classes travel by value
            "spark": app.session,
            "input_dir": str(tmp_path / "clicks"),
            "cp": str(tmp_path / f"checkpoint-{way}"),
        }
        try:
            run_snippets(["setup", "tws-processor", way], namespace)
        finally:
            if "handler" in namespace:
                namespace["handler"].close()
            for name in SPARK_CONF:
                app.session.conf.unset(name)
        outputs[way] = namespace["outputs"]
    assert outputs["tws-before"] == EXPECTED_TWS
    assert outputs["tws-after"] == EXPECTED_TWS


def test_a_transform_with_state_query_with_an_initial_state_moves_over_as_written(
    app: SparkApp,
    zk_private_server: EmbeddedZooKeeper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_clicks(tmp_path / "clicks")
    (tmp_path / "clicks.yaml").write_text(snippet(PAGE, "clicks.yaml"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AFFINITY_ZK_CONNECT", zk_private_server.hosts)
    monkeypatch.setenv("AFFINITY_STATE__CHECKPOINT_DIR", str(tmp_path / "durable"))
    monkeypatch.setenv("AFFINITY_STATE__LOCAL_DIR", str(tmp_path / "local"))
    assert app.session is not None
    outputs = {}
    for way in ("tws-initial-before", "tws-initial-after"):
        namespace: dict[str, Any] = {
            "__name__": f"docs_spark_{way}",  # not importable: classes travel by value
            "spark": app.session,
            "input_dir": str(tmp_path / "clicks"),
            "cp": str(tmp_path / f"checkpoint-{way}"),
        }
        try:
            run_snippets(["setup", "tws-processor", "tws-initial-processor", way], namespace)
        finally:
            if "handler" in namespace:
                namespace["handler"].close()
            for name in SPARK_CONF:
                app.session.conf.unset(name)
        outputs[way] = namespace["outputs"]
    assert outputs["tws-initial-before"] == EXPECTED_TWS_INITIAL
    assert outputs["tws-initial-after"] == EXPECTED_TWS_INITIAL


def test_an_event_time_query_moves_over_as_written(
    app: SparkApp,
    zk_private_server: EmbeddedZooKeeper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_clicks(tmp_path / "clicks")
    (tmp_path / "clicks.yaml").write_text(snippet(PAGE, "clicks.yaml"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AFFINITY_ZK_CONNECT", zk_private_server.hosts)
    monkeypatch.setenv("AFFINITY_STATE__CHECKPOINT_DIR", str(tmp_path / "durable"))
    monkeypatch.setenv("AFFINITY_STATE__LOCAL_DIR", str(tmp_path / "local"))
    assert app.session is not None
    outputs, namespace = {}, {}
    for way in ("event-before", "event-after"):
        namespace = {
            "__name__": f"docs_spark_{way}",  # not importable: functions travel by value
            "spark": app.session,
            "input_dir": str(tmp_path / "clicks"),
            "cp": str(tmp_path / f"checkpoint-{way}"),
        }
        try:
            run_snippets(["setup", "event-function", way], namespace)
        finally:
            if "handler" in namespace:
                namespace["handler"].close()
            app.session.conf.unset("spark.sql.streaming.noDataMicroBatches.enabled")
        outputs[way] = namespace["outputs"]
    assert outputs["event-before"] == EXPECTED_EVENT_TIME
    assert outputs["event-after"] == EXPECTED_EVENT_TIME
    reports = namespace["handler"].reports
    assert [(r.late_rows, r.watermark_ms) for r in reports] == [(0, 0), (0, 2000), (1, 4000)]
