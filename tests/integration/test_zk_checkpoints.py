"""Checkpoints on a real ZooKeeper: split and merge through the store, concurrent writers of
sibling buckets, stale writers, corrupt nodes, ACLs, and consumers crashing across rescales
without skipping a message."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from coordinator.launchers.zookeeper import EmbeddedZooKeeper as ZooKeeperServer
from groupers.keys import key_bucket
from metadata.checkpoints import PartitionCheckpoint
from metadata.errors import CorruptDataError
from metadata.model import SystemStreamPartition as SSP
from metadata.zk import PermissionDenied, ZkMetadataStore

pytestmark = pytest.mark.zk

EVENTS = ("kafka", "events")


def ssp(partition: int = 0, bucket: int = -1) -> SSP:
    return SSP(*EVENTS, partition, bucket)


def stored(store: ZkMetadataStore, partition: int = 0) -> PartitionCheckpoint | None:
    return store.checkpoints.read_partition(*EVENTS, partition)


def test_write_and_read_a_whole_partition(zk_store: ZkMetadataStore) -> None:
    assert zk_store.client.exists(f"{zk_store.layout.folder}/checkpoints")  # ensure_layout made it
    assert zk_store.checkpoints.read(ssp(), 1) is None
    assert stored(zk_store) is None

    assert zk_store.checkpoints.write(ssp(), 1, 42) == PartitionCheckpoint.whole(42)

    assert zk_store.checkpoints.read(ssp(), 1) == 42
    assert zk_store.checkpoints.read(ssp(bucket=0), 1) == 42  # bucket 0 of 1 is the whole
    data, _ = zk_store.client.get(f"{zk_store.layout.folder}/checkpoints/kafka.events.0")
    assert json.loads(data) == {"format": 1, "factor": 1, "offsets": [42]}
    assert zk_store.checkpoints.read_all() == {ssp(): PartitionCheckpoint.whole(42)}


def test_split_one_two_four_then_merge_back_to_one(zk_store: ZkMetadataStore) -> None:
    zk_store.checkpoints.write(ssp(), 1, 100)

    # split 1 -> 2: both children inherit the parent's offset
    assert [zk_store.checkpoints.read(ssp(bucket=b), 2) for b in range(2)] == [100, 100]
    zk_store.checkpoints.write(ssp(bucket=0), 2, 150)
    assert stored(zk_store) == PartitionCheckpoint(2, (150, 100))
    zk_store.checkpoints.write(ssp(bucket=1), 2, 120)
    assert stored(zk_store) == PartitionCheckpoint(2, (150, 120))

    # split 2 -> 4: bucket b of 4 inherits bucket b mod 2 of 2
    assert [zk_store.checkpoints.read(ssp(bucket=b), 4) for b in range(4)] == [150, 120, 150, 120]
    for bucket, offset in enumerate([200, 130, 180, 125]):
        zk_store.checkpoints.write(ssp(bucket=bucket), 4, offset)
    assert stored(zk_store) == PartitionCheckpoint(4, (200, 130, 180, 125))

    # merge 4 -> 2 and 4 -> 1: the minimum of the merged buckets (at least once)
    assert [zk_store.checkpoints.read(ssp(bucket=b), 2) for b in range(2)] == [180, 125]
    assert zk_store.checkpoints.read(ssp(), 1) == 125
    assert zk_store.checkpoints.write(ssp(), 1, 300) == PartitionCheckpoint.whole(300)
    assert [zk_store.checkpoints.read(ssp(bucket=b), 4) for b in range(4)] == [300] * 4


def test_a_stale_writer_of_the_old_factor_only_causes_replays(zk_store: ZkMetadataStore) -> None:
    for bucket, offset in enumerate([200, 130, 180, 125]):
        zk_store.checkpoints.write(ssp(bucket=bucket), 4, offset)
    # a task of the old factor 2 (bucket 1 = buckets 1 and 3 of 4) checkpoints late
    zk_store.checkpoints.write(ssp(bucket=1), 2, 140)
    assert stored(zk_store) == PartitionCheckpoint(2, (180, 140))
    # bucket 0 of 4 goes back from 200 to 180 (a replay); bucket 3 moves to the stale writer's
    # 140, which that writer did process (it read every key of buckets 1 and 3)
    assert [zk_store.checkpoints.read(ssp(bucket=b), 4) for b in range(4)] == [180, 140, 180, 140]


def test_names_with_dots_and_spaces_do_not_collide(zk_store: ZkMetadataStore) -> None:
    a, b = SSP("a.b", "c", 0), SSP("a", "b.c", 0)
    odd = SSP("my system", "page views/ü", 7)
    zk_store.checkpoints.write_many({a: 1}, 1)
    zk_store.checkpoints.write_many({b: 2}, 1)
    zk_store.checkpoints.write(odd, 1, 3)
    names = set(zk_store.client.get_children(f"{zk_store.layout.folder}/checkpoints"))
    assert names == {"a%2Eb.c.0", "a.b%2Ec.0", "my%20system.page%20views%2F%C3%BC.7"}
    assert zk_store.checkpoints.read_all() == {
        a: PartitionCheckpoint.whole(1),
        b: PartitionCheckpoint.whole(2),
        odd: PartitionCheckpoint.whole(3),
    }


def test_a_task_writes_all_its_inputs_at_once_and_only_what_changed(
    zk_store: ZkMetadataStore,
) -> None:
    task = {ssp(3, 1): 10, SSP("kafka", "clicks", 3, 1): 20}  # a virtual task of factor 2
    ops = zk_store.ops
    assert zk_store.checkpoints.write_many(task, 2) == {
        ssp(3): PartitionCheckpoint(2, (None, 10)),
        SSP("kafka", "clicks", 3): PartitionCheckpoint(2, (None, 20)),
    }
    assert zk_store.ops - ops == 2

    ops = zk_store.ops
    zk_store.checkpoints.write_many(task, 2)  # unchanged: nothing written
    zk_store.checkpoints.write(ssp(3, 1), 2, 10)
    assert zk_store.ops == ops
    zk_store.checkpoints.write_many({ssp(3, 1): 11, SSP("kafka", "clicks", 3, 1): 20}, 2)
    assert zk_store.ops - ops == 1
    assert zk_store.checkpoints.read(SSP("kafka", "clicks", 3, 1), 2) == 20


def test_bad_arguments_write_nothing(zk_store: ZkMetadataStore) -> None:
    ops = zk_store.ops
    with pytest.raises(ValueError, match=r"key_bucket must be in 0\.\.1 for factor 2, got 2"):
        zk_store.checkpoints.write(ssp(bucket=2), 2, 1)
    with pytest.raises(ValueError, match="key_bucket -1 is the whole partition"):
        zk_store.checkpoints.write_many({ssp(1): 5, ssp(2, bucket=-1): 5}, 2)
    with pytest.raises(ValueError, match=r"key bucket 0 of factor 1 of .* given twice"):
        zk_store.checkpoints.write_many({ssp(): 5, ssp(bucket=0): 6}, 1)
    with pytest.raises(ValueError, match="offset must be in"):
        zk_store.checkpoints.write(ssp(), 1, -5)
    with pytest.raises(ValueError, match="power of two"):
        zk_store.checkpoints.read(ssp(bucket=1), 3)
    assert zk_store.ops == ops
    assert zk_store.checkpoints.read_all() == {}


def test_concurrent_writers_of_sibling_buckets_lose_no_update(
    zk_store: ZkMetadataStore, zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient]
) -> None:
    factor, rounds = 8, 25
    zk_store.checkpoints.write(ssp(), 1, 0)  # stored at factor 1: the first writes convert it
    stores = [
        ZkMetadataStore(zk_connect(zk_server.hosts), zk_store.layout.folder, run_id="run-1")
        for _ in range(4)
    ]
    errors: list[BaseException] = []
    start = threading.Barrier(factor)

    def writer(bucket: int) -> None:
        store = stores[bucket % len(stores)]
        try:
            start.wait()
            for offset in range(1, rounds + 1):
                store.checkpoints.write(ssp(bucket=bucket), factor, offset * 100 + bucket)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in range(factor)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    assert stored(zk_store) == PartitionCheckpoint(
        factor, tuple(rounds * 100 + b for b in range(factor))
    )
    for store in stores:
        store.close()


def test_a_corrupt_node_is_named_and_never_overwritten(zk_store: ZkMetadataStore) -> None:
    path = f"{zk_store.layout.folder}/checkpoints/kafka.events.0"
    bad = b'{"format": 1, "factor": 2, "offsets": [5]}'
    zk_store.client.create(path, bad)
    ops = zk_store.ops

    for attempt in (
        lambda: zk_store.checkpoints.read(ssp(), 1),
        lambda: zk_store.checkpoints.write(ssp(bucket=1), 2, 9),
        lambda: zk_store.checkpoints.write_many({ssp(1): 1, ssp(0): 1}, 1),
        zk_store.checkpoints.read_all,
    ):
        with pytest.raises(CorruptDataError) as error:
            attempt()
        assert error.value.path == path
        assert "offsets: factor 2 needs 2 offsets, got 1" in error.value.problem

    assert zk_store.client.get(path)[0] == bad
    assert zk_store.ops == ops  # nothing written, not even the other partition of the batch
    assert stored(zk_store, 1) is None


def test_a_foreign_node_name_is_corrupt_data(zk_store: ZkMetadataStore) -> None:
    zk_store.checkpoints.write(ssp(), 1, 1)
    zk_store.client.create(f"{zk_store.layout.folder}/checkpoints/kafka.events", b"{}")
    with pytest.raises(CorruptDataError, match=r"is not <system>\.<stream>\.<partition>"):
        zk_store.checkpoints.read_all()


def test_a_job_set_up_before_checkpoints_gets_the_folder(zk_store: ZkMetadataStore) -> None:
    folder = f"{zk_store.layout.folder}/checkpoints"
    zk_store.client.delete(folder)  # a job folder made before checkpoints existed
    assert zk_store.checkpoints.read_all() == {}
    assert zk_store.checkpoints.read(ssp(), 1) is None
    zk_store.checkpoints.write(ssp(), 1, 7)
    assert zk_store.checkpoints.read(ssp(), 1) == 7

    zk_store.client.delete(folder, recursive=True)  # removed again behind the store's back
    zk_store.checkpoints.write(ssp(bucket=1), 2, 8)
    assert stored(zk_store) == PartitionCheckpoint(2, (None, 8))


def test_a_protected_job_refuses_outsiders(
    zk_server: ZooKeeperServer, zk_connect: Callable[..., KazooClient], zk_job_folder: str
) -> None:
    auth = "affinity:s3cret"
    owner = ZkMetadataStore(
        zk_connect(zk_server.hosts, auth=auth), zk_job_folder, run_id="r", auth=auth
    )
    owner.ensure_layout()
    owner.checkpoints.write(ssp(), 1, 5)
    outsider = ZkMetadataStore(zk_connect(zk_server.hosts), zk_job_folder, run_id="r")
    for attempt in (
        lambda: outsider.checkpoints.read(ssp(), 1),
        lambda: outsider.checkpoints.write(ssp(), 1, 99),
        lambda: outsider.checkpoints.write(ssp(1), 1, 99),
        outsider.checkpoints.read_all,
    ):
        with pytest.raises(PermissionDenied):
            attempt()
    assert owner.checkpoints.read_all() == {ssp(): PartitionCheckpoint.whole(5)}


def test_no_message_is_skipped_across_splits_merges_and_crashes(
    zk_store: ZkMetadataStore,
) -> None:
    """Consumers of 1, 2, 4, 8, ... buckets resume from the store, crash at random points after
    checkpointing at random points, some of their writes land after the rescale (stale writers);
    the last factor drains the partition. Every message is processed at least once."""
    messages = 300
    for seed, factors in enumerate([[1, 2, 4, 8, 2, 1], [4, 1, 8, 4, 2], [2, 8, 1, 2, 4, 2, 8]]):
        rng = random.Random(seed)
        keys = [rng.randrange(2**32) for _ in range(messages)]
        partition = ssp(seed)
        processed: set[int] = set()
        late: list[tuple[int, int, int]] = []  # (bucket, factor, offset) of stale writers
        for epoch, factor in enumerate(factors):
            drain = epoch == len(factors) - 1
            writes = list(late)
            late = []
            rng.shuffle(writes)
            for bucket in range(factor):
                task = SSP(*EVENTS, partition.partition, bucket if factor > 1 else -1)
                resume = zk_store.checkpoints.read(task, factor) or 0  # none: the earliest
                stop = messages if drain else rng.randint(resume, messages)
                processed.update(
                    o for o in range(resume, stop) if key_bucket(keys[o], factor) == bucket
                )
                points = sorted(rng.randint(resume, stop) for _ in range(rng.randint(0, 3)))
                for point in [*points, stop] if drain else points:
                    if not drain and rng.random() < 0.3:
                        late.append((task.key_bucket, factor, point))  # lands after the rescale
                    else:
                        zk_store.checkpoints.write(task, factor, point)
                # stale writes of the previous factor interleave with this one's
                while writes and rng.random() < 0.5:
                    bucket_, factor_, offset = writes.pop()
                    zk_store.checkpoints.write(
                        SSP(*EVENTS, partition.partition, bucket_), factor_, offset
                    )
            for bucket_, factor_, offset in writes:
                zk_store.checkpoints.write(
                    SSP(*EVENTS, partition.partition, bucket_), factor_, offset
                )
        assert set(range(messages)) - processed == set(), f"skipped with factors {factors}"
        final = zk_store.checkpoints.read(SSP(*EVENTS, partition.partition), 1)
        assert final is not None and final <= messages  # stale writes may have lowered it
