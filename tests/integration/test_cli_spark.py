"""`affinity spark pod-template`: the executor pod template, with node affinity from the job's
task locality in ZooKeeper, the node's name for the executor and the state folder from the
node."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from metadata.zk import ZkMetadataStore, connect

pytestmark = pytest.mark.zk

AFFINITY = str(Path(sys.executable).with_name("affinity"))


def _affinity(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AFFINITY, "spark", "pod-template", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _config(tmp_path: Path, hosts: str, state: str = "") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(
        "job: {name: clicks, id: '1', run_id: r1}\n"
        f"zookeeper: {{connect: '{hosts}', root: /affinity-podtemplate}}\n"
        "inputs: [{system: kafka, stream: events, partitions: 4}]\n" + state
    )
    return config


@pytest.fixture
def job_with_locality(zk_server: ZooKeeperServer) -> None:
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


def test_the_template_prefers_the_nodes_with_state_names_the_node_and_mounts_the_state(
    zk_server: ZooKeeperServer, job_with_locality: None, tmp_path: Path
) -> None:
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /var/lib/affinity-state}\n")
    out = tmp_path / "executor.yaml"
    proc = _affinity(
        "--config", str(config), "--output", str(out),
        "--service-account", "clicks-affinity-coordinator-spark-executor",
        "--label", "affinity-spark-job=clicks-affinity-coordinator",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    template: dict[str, Any] = yaml.safe_load(out.read_text())
    for version in ("1.25", "1.37"):
        kubernetes_validate.validate(template, version, strict=True)
    spec = template["spec"]
    terms = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    weight = {
        value: term["weight"]
        for term in terms
        for field in term["preference"]["matchFields"]
        for value in field["values"]
    }
    assert weight == {"node-1": 100, "node-2": 33}  # 6 tasks against 2
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["AFFINITY_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert container["volumeMounts"][0]["mountPath"] == "/var/lib/affinity-state"
    assert spec["volumes"][0]["hostPath"]["type"] == "DirectoryOrCreate"
    assert spec["serviceAccountName"] == "clicks-affinity-coordinator-spark-executor"
    labels = template["metadata"]["labels"]
    assert labels["affinity-spark-job"] == "clicks-affinity-coordinator"
    # Without --output: the same template on stdout.
    again = _affinity(
        "--config", str(config),
        "--service-account", "clicks-affinity-coordinator-spark-executor",
        "--label", "affinity-spark-job=clicks-affinity-coordinator",
    )  # fmt: skip
    assert again.returncode == 0 and yaml.safe_load(again.stdout) == template


def test_options_reach_the_template(
    zk_server: ZooKeeperServer, job_with_locality: None, tmp_path: Path
) -> None:
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /data/state}\n")
    proc = _affinity(
        "--config", str(config), "--zone-lookup", "off", "--host-path", "/mnt/ssd/affinity",
        "--state-uid", "1000", "--state-gid", "1001", "--no-state-init",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(proc.stdout)["spec"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["AFFINITY_ZONE_LOOKUP"]["value"] == "off"
    assert spec["volumes"][0]["hostPath"]["path"] == "/mnt/ssd/affinity"
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["runAsGroup"] == 1001
    assert "initContainers" not in spec
    local_pv = _affinity("--config", str(config), "--state-volume", "none")
    assert local_pv.returncode == 0, local_pv.stderr
    assert "volumes" not in yaml.safe_load(local_pv.stdout)["spec"]


def test_without_state_local_dir_it_refuses_naming_the_key(
    zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    proc = _affinity("--config", str(_config(tmp_path, zk_server.hosts)))
    assert proc.returncode == 2
    assert proc.stderr.startswith("affinity: error: state.local_dir is not set in the job config")
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state-uid", "0"], "state uid must be a non-root id"),
        (["--host-path", "relative"], "host path must be an absolute path"),
        (["--label", "no-equals-sign"], "--label 'no-equals-sign': expected KEY=VALUE"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    zk_server: ZooKeeperServer, tmp_path: Path, args: list[str], message: str
) -> None:
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /s}\n")
    proc = _affinity("--config", str(config), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_config_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("job: {name: clicks}\ncoordinator: {debounce_ms: -1}\n")
    proc = _affinity("--config", str(config))
    assert proc.returncode == 2
    assert "coordinator.debounce_ms" in proc.stderr


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    [line] = proc.stderr.splitlines()
    assert line.startswith("affinity: error: ") and needle in line, line


@pytest.mark.parametrize("where", ["missing/executor.yaml", "folder"])
def test_an_output_that_cannot_be_written_is_one_line(
    zk_server: ZooKeeperServer, job_with_locality: None, tmp_path: Path, where: str
) -> None:
    (tmp_path / "folder").mkdir()
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /var/lib/affinity-state}\n")
    proc = _affinity("--config", str(config), "--output", str(tmp_path / where))
    _one_line_error(proc, f"cannot write --output {tmp_path / where}")


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (("--container-name", "Bad_Name!"), "container name must be a DNS-1123 label"),
        (("--service-account", "Not A Name"), "service account must be a DNS-1123 subdomain"),
        (("--label", "bad key!=v"), "label key 'bad key!'"),
        (("--label", "k=" + "v" * 100), "label value of 'k'"),
        (("--state-init-image", "busybox 1.36"), "image must be a reference"),
        (("--host-path", "/etc"), "must not be a system folder"),
        (("--host-path", "/var/lib/../../etc"), "must be a normalized path"),
        (("--host-path", "/data/x\nfake"), "must be printable"),
    ],
)
def test_names_the_api_server_would_refuse_are_one_line(
    zk_server: ZooKeeperServer, job_with_locality: None, tmp_path: Path, option: tuple[str, str],
    needle: str,
) -> None:  # fmt: skip
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /var/lib/affinity-state}\n")
    _one_line_error(_affinity("--config", str(config), *option), needle)


def test_a_job_name_with_a_typo_is_no_job(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /var/lib/affinity-state}\n")
    config.write_text(config.read_text().replace("name: clicks", "name: clikcs"))
    _one_line_error(_affinity("--config", str(config)), "no job clikcs-1 on ZooKeeper")


def test_a_location_breaking_the_id_rule_is_skipped_with_a_warning(
    zk_server: ZooKeeperServer, job_with_locality: None, tmp_path: Path
) -> None:
    client = connect(zk_server.hosts)
    try:
        folder = "/affinity-podtemplate/clicks-1/localityData"
        client.create(f"{folder}/Partition%2099", b"zone-a/")
    finally:
        client.stop()
        client.close()
    config = _config(tmp_path, zk_server.hosts, "state: {local_dir: /var/lib/affinity-state}\n")
    try:
        proc = _affinity("--config", str(config))
        assert proc.returncode == 0, proc.stderr
        assert "warning: skipped" in proc.stderr and "empty segment" in proc.stderr
        text = proc.stdout
        assert "zone-a\n" not in text and "- zone-a" not in text
        assert "node-1" in text
    finally:
        client = connect(zk_server.hosts)
        client.delete(f"{folder}/Partition%2099")
        client.stop()
        client.close()
