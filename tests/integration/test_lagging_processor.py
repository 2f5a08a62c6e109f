"""A real processor connected only to a lagging follower starts the new version (SAMZA-2301).

``zk_lagging_ensemble`` holds the quorum links of one follower on demand (``partition()``): it
keeps answering its clients with the state it had while the leader and the other follower commit
new writes; ``heal()`` lets it catch up. Here a :class:`ProcessorClient` is connected to that
follower alone, and the coordinator (a leader's store on the two healthy servers) publishes
through the others.

ZooKeeper itself keeps one session consistent with its own writes and its watches, so the reads
that can see an old state are those a processor makes on its own: the resync after a store
error (or after a fence) reads the latest version. The processor fails to read version 1's
manifest (a store error, injected at that call) just as the coordinator publishes version 2
while the processor's server lags; when it resyncs, it must follow version 2 - not read, join or
run version 1, which a lagging server still calls the latest. Without the ``sync`` in the
member group's fetch of the latest version it joins barrier 1.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from polling import model, wait_for

from coordinator.launchers.ensemble import ZooKeeperEnsemble
from coordinator.member.processor import ProcessorClient
from metadata.model import (
    BarrierState,
    ContainerModel,
    TaskModel,
)
from metadata.zk import ZkMetadataStore, connect
from metadata.zk.errors import StoreUnavailable
from metadata.zk.recipe.manifests import ManifestHead

pytestmark = [pytest.mark.zk, pytest.mark.slow]

LAGGING = 2
#: The follower catches up this long after version 2 is published: after the processor's resync
#: (RESYNC_DELAY_S, 1 s) has read the latest version.
HEAL_AFTER_S = 4.0


class LaggingProcessor:
    """Processor p1 on the lagging follower; what it did: ("read"|"join"|"start", version)."""

    def __init__(self, ensemble: ZooKeeperEnsemble, folder: str) -> None:
        self.client = connect(ensemble.hosts_of(LAGGING), session_timeout_s=20.0)
        self.store = ZkMetadataStore(self.client, folder, run_id="r1")
        self.steps: list[tuple[str, int | None]] = []
        self.started: dict[int, set[str]] = {}
        self.before_manifest: Callable[[int], None] = lambda version: None
        self._wrap_store()
        self.processor = ProcessorClient(
            self.client,
            self.store,
            "p1",
            "host-p1",
            on_start=self._on_start,
            on_stop=lambda version, tasks: None,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.processor.run, args=(self._stop,), daemon=True)

    def _on_start(self, version: int, tasks: Mapping[str, TaskModel]) -> None:
        self.steps.append(("start", version))
        self.started.setdefault(version, set()).update(tasks)

    def _wrap_store(self) -> None:
        job_models, barriers = self.store.job_models, self.store.barriers
        read_head, read_container = job_models.read_manifest_head, job_models.read_container
        join, join_and_watch = barriers.join, barriers.join_and_watch

        def reading_manifest(version: int) -> ManifestHead:
            self.before_manifest(version)
            return read_head(version)

        def reading(version: int, processor_id: str, **kwargs: object) -> ContainerModel | None:
            self.steps.append(("read", version))
            return read_container(version, processor_id, **kwargs)  # type: ignore[arg-type]

        def joining(version: int, processor_id: str) -> None:
            self.steps.append(("join", version))
            join(version, processor_id)

        def joining_and_watching(version: int, *args: Any, **kwargs: Any) -> Any:
            self.steps.append(("join", version))
            return join_and_watch(version, *args, **kwargs)

        job_models.read_manifest_head = reading_manifest  # type: ignore[method-assign]
        job_models.read_container = reading  # type: ignore[method-assign]
        barriers.join = joining  # type: ignore[method-assign]
        barriers.join_and_watch = joining_and_watching  # type: ignore[method-assign]

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.store.close()
        self.client.stop()
        self.client.close()


@pytest.fixture
def ensemble(zk_lagging_ensemble: ZooKeeperEnsemble) -> Iterator[ZooKeeperEnsemble]:
    zk_lagging_ensemble.heal()
    zk_lagging_ensemble.make_follower(LAGGING)
    yield zk_lagging_ensemble
    zk_lagging_ensemble.heal()


def test_a_processor_on_a_lagging_follower_starts_the_new_version(
    ensemble: ZooKeeperEnsemble,
) -> None:
    folder = f"/affinity-test/lag-{uuid.uuid4().hex[:8]}-1"
    healthy = ensemble.hosts_of(*(i for i in range(len(ensemble.servers)) if i != LAGGING))
    leader_client = connect(healthy, session_timeout_s=20.0)
    leader = ZkMetadataStore(leader_client, folder, run_id="r1")
    leader.ensure_layout()
    epoch = leader.epochs.acquire()
    processor = LaggingProcessor(ensemble, folder)
    v2 = model(2, {"p1": [0, 1], "p2": [2, 3]}, location="host-{}", stream="events")
    failed: list[int] = []
    heal = threading.Timer(HEAL_AFTER_S, ensemble.heal)

    def lag_and_fail(version: int) -> None:
        """At the processor's first read of version 1's manifest: its server starts lagging,
        the coordinator publishes version 2 through the others, and the read fails."""
        if version != 1 or failed:
            return
        ensemble.partition()
        leader.job_models.publish(v2, epoch=epoch, participants=["p1", "p2"])
        leader.barriers.join(2, "p2")  # p2 (elsewhere) is there at once
        heal.start()
        failed.append(version)
        raise StoreUnavailable(leader.layout.job_model(1), "injected: connection loss")

    processor.before_manifest = lag_and_fail
    try:
        processor.start()
        wait_for(lambda: leader.processors.locality() == {"p1": "host-p1"})
        leader.job_models.publish(
            model(1, {"p1": [0, 1, 2, 3]}, location="host-{}", stream="events"),
            epoch=epoch,
            participants=["p1"],
        )
        wait_for(lambda: failed == [1])
        assert processor.store.job_models.latest_version() == 1  # its server does lag
        wait_for(
            lambda: leader.barriers.participants(2) == {"p1", "p2"}, timeout_s=HEAL_AFTER_S + 10
        )
        leader.barriers.set_state(2, BarrierState.DONE, epoch=epoch)
        wait_for(lambda: 2 in processor.started)
        assert processor.started == {2: {"Partition 0", "Partition 1"}}
        assert processor.steps == [("read", 2), ("join", 2), ("start", 2)]
        assert leader.barriers.participants(1) == set()
    finally:
        heal.cancel()
        ensemble.heal()
        processor.close()
        leader.close()
        leader_client.stop()
        leader_client.close()
