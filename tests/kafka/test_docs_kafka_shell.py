"""docs/kafka.md's "a broker by hand" shell block runs as written: fetch the jars, write the
server's properties, format its storage and start it on 127.0.0.1:9092; a producer and a
consumer then reach it there.

The block names fixed ports (9092, 9093) and a fixed folder (/tmp/kafka), so it runs in a network
and mount namespace of its own (``unshare``: a loopback of its own, and a tmpfs over /tmp/kafka),
where neither can meet the session's broker, another test or a broker of the machine's. Where
namespaces are not allowed, it runs on the machine itself if both ports are free and there is no
/tmp/kafka (removed afterwards), and fails saying so otherwise."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from docs_snippets import ROOT, snippet

pytestmark = pytest.mark.kafka

CHECK = """
import sys
import pandas as pd
from locality.spark.kafka import OffsetRange, create_topic, read_range, write_records
servers = "127.0.0.1:9092"
create_topic(servers, "by-hand", 1)
write_records(servers, "by-hand", pd.DataFrame({"key": ["a", "b"], "value": ["1", "2"]}))
table = read_range(servers, OffsetRange("by-hand", 0, 0, 2))
print("read", table.column("value").to_pylist())
"""

#: In the namespace: the block in the background, then the check once the broker listens.
DRIVER = """
set -u
{isolate}
bash {block} > {log} 2>&1 &
for i in $(seq 1 120); do
  (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null && break
  sleep 0.5
done
{python} {check}
status=$?
pkill -f '[k]afka.Kafka /tmp/kafka/server.properties'  # not this script's own line
wait
exit $status
"""


ISOLATE = "mount -t tmpfs tmpfs /tmp/kafka && ip link set lo up"
NAMESPACE = ["unshare", "--map-root-user", "--net", "--mount"]


def _namespaces_allowed() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*NAMESPACE, "true"], capture_output=True, check=False, timeout=30)
    return probe.returncode == 0


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _runner(kafka_dir: Path) -> tuple[list[str], str]:
    """How to run the driver: in namespaces, else on the machine (see the module docstring)."""
    if _namespaces_allowed():
        kafka_dir.mkdir(exist_ok=True)  # the mount point; the block's files go to a tmpfs
        return NAMESPACE, ISOLATE
    if kafka_dir.exists() or not (_port_free(9092) and _port_free(9093)):
        pytest.fail(
            "no namespaces (unshare) here, and the block's ports 9092/9093 or its folder "
            f"{kafka_dir} are taken on this machine"
        )
    return [], "true"


def test_the_broker_by_hand_block_runs_as_written(tmp_path: Path) -> None:
    kafka_dir = Path("/tmp/kafka")
    created = not kafka_dir.exists()
    prefix, isolate = _runner(kafka_dir)
    block, check, log = tmp_path / "block.sh", tmp_path / "check.py", tmp_path / "broker.log"
    block.write_text(snippet("docs/kafka.md", "kafka-by-hand"))
    check.write_text(CHECK)
    driver = DRIVER.format(
        isolate=isolate, block=block, log=log, python=sys.executable, check=check
    )
    try:
        done = subprocess.run(
            [*prefix, "bash", "-c", driver],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        if created:  # the mount point, or the block's own folder on the machine
            shutil.rmtree(kafka_dir, ignore_errors=True)
    broker_log = log.read_text() if log.exists() else ""
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{broker_log[-3000:]}"
    assert "read [b'1', b'2']" in done.stdout
    assert "Formatting metadata directory /tmp/kafka/data" in broker_log
