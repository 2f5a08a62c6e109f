"""Executors as Kubernetes executors are: each at zone/node of its node, whatever its address.

A cluster of its own (three workers; a worker is a pod's stand-in): each worker's environment
carries what the executor pod template gives an executor pod on Kubernetes (the node name from
the Downward API, ``AFFINITY_ZONE_LOOKUP=api``) and the in-cluster API settings of a pod, which
point at the TLS stub of the API server (``tests/kubeapi.py``) serving the nodes' zone labels.
Workers 127.0.0.2 and 127.0.0.3 are on node-a (zone-1), 127.0.0.4 on node-b (zone-2); the state's
``local_dir`` is one folder of this machine, as a hostPath is one folder of a node. So the
executors take the same code path as on Kubernetes: the driver probes each one
(``ProbedLocations``), the executor's ``SparkExecutorLocationIdProvider`` resolves its node
through ``KubernetesLocationIdProvider`` against the API, and its tasks key their local state by
that id.

Then, through ``stateful_foreach_batch``: a pod replaced by one at a new address on the same node
opens the state its predecessor left (warm, 0 bytes restored); a pod replaced on another node
restores; with the API down a new executor is an error naming it, never registered at its address.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from affinity_pipeline.streaming import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    STATE_SCHEMA,
    ClickFiles,
    count_clicks,
    reference_clicks,
)
from kubeapi import ApiStub, make_cert, serve_api
from spark_app import SparkApp, stop_active_session

from coordinator.config import JobConfig, load_config
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from coordinator.streaming import BatchReport, StatefulQuery, stateful_foreach_batch
from locality.base import LocationError
from locality.spark import SparkExecutors
from metadata.zk import ZkMetadataStore, connect

pytestmark = [pytest.mark.spark, pytest.mark.zk, pytest.mark.slow]

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NODE_OF_HOST = {"127.0.0.2": "node-a", "127.0.0.3": "node-a", "127.0.0.4": "node-b"}
ZONE_OF_NODE = {"node-a": "zone-1", "node-b": "zone-2", "node-c": "zone-2"}
TASKS = 6  # two per executor
ROOT = "/affinity-k8s-nodes"


def location(node: str) -> str:
    return f"{ZONE_OF_NODE[node]}/{node}"


def pod_env(api: ApiStub, node: str) -> dict[str, str]:
    """What an executor pod on ``node`` has: the template's Downward API node name and zone
    lookup, and a pod's in-cluster API settings (here: the stub and its service-account files)."""
    return {
        "AFFINITY_NODE_NAME": node,
        "AFFINITY_ZONE_LOOKUP": "api",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api.port),
        "AFFINITY_SERVICE_ACCOUNT_DIR": str(api.service_account_dir),
    }


@pytest.fixture(scope="module")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiStub]:
    cert, key = make_cert(tmp_path_factory.mktemp("kube-tls"))
    with serve_api(tmp_path_factory.mktemp("kube-api") / "serviceaccount", cert, key) as api:
        for node, zone in ZONE_OF_NODE.items():
            api.add_node(node, {"topology.kubernetes.io/zone": zone})
        yield api


@pytest.fixture(scope="module")
def node_cluster(
    tmp_path_factory: pytest.TempPathFactory, kube_api: ApiStub
) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(
        tmp_path_factory.mktemp("spark-nodes"),
        HOSTS,
        worker_env={host: pod_env(kube_api, NODE_OF_HOST[host]) for host in HOSTS},
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def node_app(node_cluster: StandaloneCluster) -> Iterator[SparkApp]:
    stop_active_session()  # one SparkContext per process: the session's application pauses
    app = SparkApp(node_cluster, HOSTS)
    try:
        app.start()
        yield app
    finally:
        app.stop()


def job_config(zk: EmbeddedZooKeeper, tmp: Path) -> JobConfig:
    return load_config(
        data={
            "job": {"name": "k8s-nodes", "id": "1", "run_id": "r1"},
            "zookeeper": {"connect": zk.hosts, "root": ROOT},
            "inputs": [{"system": "spark", "stream": "clicks", "partitions": TASKS}],
            "ssp_grouper": {"name": "group-by-partition"},
            "coordinator": {"debounce_ms": 100, "debounce_max_ms": 1000},
            "state": {
                "checkpoint_dir": str(tmp / "durable"),
                "local_dir": str(tmp / "hostpath"),  # one folder per node on Kubernetes
                "max_parallelism": 120,
            },
        },
        environ={},
    )


class Sink:
    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[Any, ...]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches[batch_id] = sorted(tuple(r) for r in df.collect())


class Job:
    """The stateful query, fed one batch at a time, and what ZooKeeper says about it."""

    def __init__(self, app: SparkApp, handler: StatefulQuery, files: ClickFiles, store: Any):
        self.app, self.handler, self.files, self.store = app, handler, files, store
        self.next_batch = 0

    def run(self) -> BatchReport:
        assert self.app.session is not None
        df = self.app.session.createDataFrame(self.files.batch(self.next_batch), INPUT_SCHEMA)
        self.handler(df, self.next_batch)
        self.next_batch += 1
        return self.handler.reports[-1]

    def processors(self) -> dict[str, tuple[str, str]]:
        """Processor id -> (host, location) as registered in ZooKeeper."""
        live, _ = self.store.processors.read()
        return {r.processor_id: (r.host, r.location_id) for r in live}

    def owners(self, report: BatchReport) -> dict[str, str]:
        """Task -> host of the executor that ran it in ``report``'s batch (its job model)."""
        hosts = {pid: host for pid, (host, _) in self.processors().items()}
        model = self.store.job_models.read(report.version)
        return {task: hosts[pid] for task, pid in model.task_to_processor().items()}


def move_pod(app: SparkApp, cluster: StandaloneCluster, old: str, new: str, env: Any) -> str:
    """The pod at ``old`` is gone; a new pod comes up at address ``new`` (with ``env``, its
    node). Waits until Spark lists the new executor and no longer the old one; its id."""
    (gone,) = [e.executor_id for e in app.executors() if e.host == old]
    cluster.kill_worker(old)
    cluster.start_worker(new, env=env)
    app.hosts = (*(h for h in app.hosts if h != old), new)
    deadline = time.monotonic() + 120
    while gone in {e.executor_id for e in app.executors()}:
        assert time.monotonic() < deadline, f"executor {gone} at {old} still listed"
        time.sleep(0.2)
    live = SparkExecutors(app.sc).wait_for(len(app.hosts), hosts=app.hosts, timeout_s=120)
    (newcomer,) = [e.executor_id for e in live if e.host == new]
    return newcomer


@pytest.fixture
def job(node_app: SparkApp, zk_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[Job]:
    handler = stateful_foreach_batch(
        count_clicks,
        key_columns=["user"],
        output_schema=OUTPUT_SCHEMA,
        state_schema=STATE_SCHEMA,
        sink=Sink(),
        config=job_config(zk_server, tmp_path),
    )
    client = connect(zk_server.hosts)
    try:
        yield Job(
            node_app,
            handler,
            ClickFiles(tmp_path / "in", users=60, rows=120, pad=2000),
            ZkMetadataStore(client, f"{ROOT}/k8s-nodes-1", run_id="r1"),
        )
    finally:
        handler.close()
        client.stop()
        client.close()


def test_state_stays_on_the_node_whatever_the_pods_address(
    job: Job, node_app: SparkApp, node_cluster: StandaloneCluster, kube_api: ApiStub
) -> None:
    sink = job.handler.sink
    assert isinstance(sink, Sink)
    first = [job.run() for _ in range(3)]
    assert [r.new for r in first] == [TASKS, 0, 0]
    assert [r.warm for r in first[1:]] == [TASKS, TASKS]

    # Every executor is a processor at zone/node of its node (from the API), not at its host.
    registered = job.processors()
    assert sorted(registered.values()) == sorted(
        (host, location(NODE_OF_HOST[host])) for host in HOSTS
    )
    # The zone came from the API server, with the pods' service-account token.
    assert {path for path, _ in kube_api.requests} == {
        "/api/v1/nodes/node-a",
        "/api/v1/nodes/node-b",
    }
    assert set(job.store.locality.read().values()) == {location("node-a"), location("node-b")}

    # The pod at 127.0.0.2 (node-a) is replaced by one at a new address on the same node.
    before = job.owners(first[-1])
    moved = sorted(task for task, host in before.items() if host == "127.0.0.2")
    assert len(moved) == TASKS // 3
    newcomer = move_pod(
        node_app, node_cluster, "127.0.0.2", "127.0.0.5", pod_env(kube_api, "node-a")
    )
    same_node = job.run()
    after = job.owners(same_node)
    assert {after[task] for task in moved} == {"127.0.0.5"}  # a new executor (JVM, workers)...
    assert same_node.warm == TASKS and same_node.restored == 0  # ...opens what node-a kept
    assert same_node.bytes_restored == 0
    assert ("127.0.0.5", location("node-a")) in job.processors().values()
    assert newcomer in {e.executor_id for e in node_app.executors()}

    # The pod at 127.0.0.4 (node-b) is replaced by one on another node (node-c): it restores.
    lost = sorted(task for task, host in after.items() if host == "127.0.0.4")
    move_pod(node_app, node_cluster, "127.0.0.4", "127.0.0.6", pod_env(kube_api, "node-c"))
    other_node = job.run()
    assert {job.owners(other_node)[task] for task in lost} == {"127.0.0.6"}
    assert other_node.restored == len(lost) and other_node.warm == TASKS - len(lost)
    assert other_node.bytes_restored > 0
    assert ("127.0.0.6", location("node-c")) in job.processors().values()
    assert job.run().warm == TASKS  # and then it is warm there

    # The output is that of one process, through both moves.
    assert sink.batches == reference_clicks(job.files, range(job.next_batch))

    # The API server is down: a new pod cannot tell its node. The batch fails with an error
    # naming the executor and the cause, and nothing is registered at the pod's address.
    kube_api.stop()
    move_pod(node_app, node_cluster, "127.0.0.3", "127.0.0.7", pod_env(kube_api, "node-a"))
    with pytest.raises(LocationError) as info:
        job.run()
    message = str(info.value)
    assert "(127.0.0.7) cannot tell its location" in message
    assert "cannot read node node-a from the Kubernetes API at https://127.0.0.1:" in message
    assert "request failed" in message
    hosts = {host: loc for host, loc in job.processors().values()}
    assert "127.0.0.7" not in hosts and "127.0.0.7" not in set(hosts.values())
