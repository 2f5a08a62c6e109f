"""Executor-side identity and location, on hand-made /proc trees and environments (no Spark).

The real thing (inside executors) is covered by test_spark_pinning.py; these pin down the
parsing and the order of precedence.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from locality.base import LocationError, LocationIdProvider
from locality.spark import (
    SparkExecutorLocationIdProvider,
    current_executor_host,
    current_executor_id,
)
from locality.spark.executors import _host_of
from locality.spark.provider import _executor_jvm_args

pytestmark = pytest.mark.spark

LOG_URL = (
    "http://127.0.0.3:43597/logPage/?appId=app-20260101000000-0000&executorId=7&logType=stderr"
)


def _proc_tree(root: Path) -> Path:
    """python worker (30) -> pyspark daemon (20) -> executor JVM (10) -> worker JVM (5)."""
    processes = {
        30: (20, ["python", "-m", "pyspark.worker"]),
        20: (10, ["python", "-m", "pyspark.daemon"]),
        10: (5, ["java", "-cp", "jars/*", "org.apache.spark.executor.CoarseGrainedExecutorBackend",
                 "--driver-url", "spark://x", "--executor-id", "12", "--hostname", "127.0.0.9",
                 "--cores", "1", "--app-id", "app-1"]),
        5: (1, ["java", "org.apache.spark.deploy.worker.Worker"]),
    }  # fmt: skip
    for pid, (parent, argv) in processes.items():
        folder = root / str(pid)
        folder.mkdir(parents=True)
        (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (folder / "stat").write_text(f"{pid} (odd (name)) S {parent} {pid} {pid} 0 -1\n")
    return root


def test_the_executor_jvm_is_found_by_walking_up_proc(tmp_path: Path) -> None:
    proc = _proc_tree(tmp_path)
    args = _executor_jvm_args(proc, pid=30)
    assert args == {"executor-id": "12", "hostname": "127.0.0.9", "app-id": "app-1"}
    assert _executor_jvm_args(proc, pid=5) == {}  # above the executor: nothing


def test_the_log_url_gives_the_executor_id_first(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert current_executor_id({"SPARK_LOG_URL_STDERR": LOG_URL}, proc=empty) == "7"
    assert current_executor_id({}, proc=empty) is None
    assert current_executor_host({"SPARK_LOG_URL_STDERR": LOG_URL}, proc=empty) == "127.0.0.3"
    assert current_executor_host({"SPARK_LOCAL_IP": "127.0.0.4"}, proc=empty) == "127.0.0.4"
    assert current_executor_host({}, proc=empty) is None


def test_the_location_is_the_env_var_else_the_executor_host(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"SPARK_LOCAL_IP": "127.0.0.4"}
    provider = SparkExecutorLocationIdProvider(environ=env, proc=empty)
    assert isinstance(provider, LocationIdProvider)
    assert provider.location_id() == "127.0.0.4"
    env["AFFINITY_LOCATION_ID"] = "zone-a/node-1"
    assert provider.location_id() == "zone-a/node-1"
    env["AFFINITY_LOCATION_ID"] = "  "
    assert provider.location_id() == "127.0.0.4"
    strict = SparkExecutorLocationIdProvider(environ={}, proc=empty, fallback_hostname=False)
    with pytest.raises(LocationError, match="AFFINITY_LOCATION_ID"):
        strict.location_id()
    assert SparkExecutorLocationIdProvider(environ={}, proc=empty).location_id()  # host name


def test_host_port_parsing() -> None:
    assert _host_of("127.0.0.2:39105") == "127.0.0.2"
    assert _host_of("127.0.0.2") == "127.0.0.2"  # not registered with its block manager yet
    assert _host_of("[::1]:4040") == "::1"
    assert _host_of("node-1.example:7078") == "node-1.example"
