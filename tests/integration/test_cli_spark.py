"""`affinity spark pod-template`: node affinity from the job's task locality in ZooKeeper."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from coordinator.demo.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.zk import ZkMetadataStore, connect

pytestmark = pytest.mark.zk

AFFINITY = str(Path(sys.executable).with_name("affinity"))


def test_pod_template_weights_nodes_by_the_state_they_hold(
    zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    client = connect(zk_server.hosts)
    try:
        store = ZkMetadataStore(client, "/affinity-podtemplate/clicks-1", run_id="r1")
        store.ensure_layout()
        store.locality.write(
            {f"Partition {n}": ("zone-a/node-1" if n < 6 else "zone-b/node-2") for n in range(8)}
        )
    finally:
        client.stop()
        client.close()
    config = tmp_path / "job.yaml"
    config.write_text(
        "job: {name: clicks, id: '1', run_id: r1}\n"
        f"zookeeper: {{connect: '{zk_server.hosts}', root: /affinity-podtemplate}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 4}]\n"
    )
    out = tmp_path / "executor.yaml"
    proc = subprocess.run(
        [AFFINITY, "spark", "pod-template", "--config", str(config), "--output", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    template = yaml.safe_load(out.read_text())
    kubernetes_validate.validate(template, "1.30", strict=True)
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    weight = {
        value: term["weight"]
        for term in terms
        for expression in term["preference"]["matchExpressions"]
        for value in expression["values"]
    }
    assert weight["node-1"] > weight["node-2"] > 0


def test_bad_config_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("job: {name: clicks}\ncoordinator: {debounce_ms: -1}\n")
    proc = subprocess.run(
        [AFFINITY, "spark", "pod-template", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "coordinator.debounce_ms" in proc.stderr
