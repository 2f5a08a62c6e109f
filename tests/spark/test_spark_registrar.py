"""ExecutorRegistrar against a real ZooKeeper and a real Spark application."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from spark_app import SparkApp

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from coordinator.member.executors import ExecutorRegistrar
from locality.spark import ProbedLocations, SparkExecutors
from metadata.zk import ZkMetadataStore

pytestmark = [pytest.mark.spark, pytest.mark.zk]


def test_executors_register_as_processors_at_their_hosts_and_follow_losses(
    app: SparkApp, zk_store: ZkMetadataStore
) -> None:
    registrar = ExecutorRegistrar.for_context(app.sc, zk_store)
    first = registrar.sync()
    executors = app.executors()
    expected = {registrar.processor_id(e.executor_id): e.host for e in executors}
    assert set(first.added) == set(expected) and not first.removed
    assert zk_store.processors.locality() == expected
    assert all(pid.startswith(f"{app.app_id}-exec-") for pid in expected)
    live, _ = zk_store.processors.read()
    assert {r.data["executor_id"] for r in live} == {e.executor_id for e in executors}
    assert not registrar.sync().changed  # nothing changed: nothing written

    # An executor dies; its worker starts a replacement with a new id on the same host.
    victim = executors[0]
    app.cluster.kill_executor(app.app_id, victim.executor_id)
    replaced = app.ready(exclude=(victim.executor_id,))
    newcomer = next(e for e in replaced if e.host == victim.host)
    assert newcomer.executor_id != victim.executor_id

    step = registrar.sync()
    assert step.removed == (registrar.processor_id(victim.executor_id),)
    assert step.added == (registrar.processor_id(newcomer.executor_id),)
    locality = zk_store.processors.locality()
    assert locality[registrar.processor_id(newcomer.executor_id)] == victim.host  # same location
    assert registrar.processor_id(victim.executor_id) not in locality
    assert registrar.placement({"Partition 0": registrar.processor_id(newcomer.executor_id)}) == {
        "Partition 0": newcomer.executor_id
    }

    registrar.close()
    assert zk_store.processors.locality() == {}


def test_registrations_come_back_after_a_zookeeper_session_expiry(
    app: SparkApp, zk_server: ZooKeeperServer, zk_client: KazooClient, zk_store: ZkMetadataStore
) -> None:
    with ExecutorRegistrar.for_context(app.sc, zk_store) as registrar:
        registrar.sync()
        before = zk_store.processors.locality()
        zk_server.expire_session(zk_client)  # the server deletes our ephemeral nodes
        assert zk_store.processors.locality() == {}
        step = registrar.sync()
        assert set(step.restored) == set(before) and not step.added and not step.removed
        assert zk_store.processors.locality() == before


def test_probed_locations_ask_each_executor_for_its_own_location(
    app: SparkApp, zk_store: ZkMetadataStore
) -> None:
    executors = SparkExecutors(app.sc).list()
    probe = ProbedLocations(app.sc)
    with ExecutorRegistrar.for_context(
        app.sc, zk_store, prefix="probed", location_of=probe
    ) as registrar:
        registrar.sync()
        # No AFFINITY_LOCATION_ID on these executors: each reports its own host.
        assert zk_store.processors.locality() == {
            f"probed-exec-{e.executor_id}": e.host for e in executors
        }
