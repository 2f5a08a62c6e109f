"""Differential checkpoints (affinity_pipeline.objectspace): a persisted object space keyed by
key group; only changes are written, a subset of key groups loads alone, crashes leave every key
group at a consistent batch, corrupt files are named."""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.events import PipelineConfig, generate_batch
from affinity_pipeline.objectspace import (
    JSON,
    CheckpointStorage,
    CompactionPolicy,
    CorruptCheckpointError,
    DirectoryStorage,
    KeyGroup,
    MemoryStorage,
    ObjectSpace,
    ObjectSpaceError,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from groupers.keygroups import key_group_ranges

# --------------------------------------------------------------------------------------------
# storage wrappers


class InjectedCrash(Exception):
    """The simulated crash of a checkpoint."""


class SpyStorage:
    """Passes through to ``inner``, recording every call and the bytes created."""

    def __init__(self, inner: CheckpointStorage) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int, str]] = []
        self.created: dict[tuple[int, str], int] = {}
        self.fail_after: int | None = None  # creates allowed before InjectedCrash

    def reset(self) -> None:
        self.calls = []
        self.created = {}

    def groups_touched(self) -> set[int]:
        return {group for _, group, _ in self.calls}

    def list_files(self, key_group: int) -> list[str]:
        self.calls.append(("list", key_group, ""))
        return self.inner.list_files(key_group)

    def read_file(self, key_group: int, name: str) -> bytes:
        self.calls.append(("read", key_group, name))
        return self.inner.read_file(key_group, name)

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        if self.fail_after is not None:
            if self.fail_after <= 0:
                raise InjectedCrash(f"crash before writing {name} of key group {key_group}")
            self.fail_after -= 1
        self.calls.append(("create", key_group, name))
        self.inner.create_file(key_group, name, data)
        self.created[key_group, name] = len(data)

    def delete_file(self, key_group: int, name: str) -> None:
        self.calls.append(("delete", key_group, name))
        self.inner.delete_file(key_group, name)

    def describe(self, key_group: int, name: str) -> str:
        return self.inner.describe(key_group, name)


def folder_bytes(storage: DirectoryStorage, groups: Iterable[int]) -> int:
    return sum(
        (storage.folder(g) / name).stat().st_size for g in groups for name in storage.list_files(g)
    )


# --------------------------------------------------------------------------------------------
# the model-based test: random operations, checkpoints, reloads, crashes


def json_values() -> st.SearchStrategy[JSON]:
    """JSON values; half of them are ``["#", None]`` placeholders that the machine makes
    unique (a counter), so that a lost write cannot hide behind an equal value."""
    scalars: st.SearchStrategy[JSON] = (
        st.none()
        | st.booleans()
        | st.integers(-(10**12), 10**12)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=6)
    )
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=6,
    )
    return values | st.just(["#", None])


MAXP = 4
NAMES = ["v", "l", "m", "x"]  # "x" changes kind now and then
MAP_KEYS = [f"k{i}" for i in range(5)]
POLICY = CompactionPolicy(delta_ratio=4.0, max_deltas=4)  # deltas, and compactions often
groups_st = st.integers(0, MAXP - 1)
names_st = st.sampled_from(NAMES)
value_names = st.sampled_from(["v", "v", "x"])
list_names = st.sampled_from(["l", "l", "x"])
map_names = st.sampled_from(["m", "m", "x"])

Model = dict[str, dict[str, Any]]  # name -> {"kind": ..., "data": ...} (snapshot shape)


def create_empty(group: KeyGroup, name: str, kind: str) -> JSON:
    """Create an empty ``kind`` object; its data in the model."""
    if kind == "value":
        group.create_value(name)
        return None
    if kind == "list":
        group.create_list(name)
        return []
    group.create_map(name)
    return {}


class ObjectSpaceMachine(RuleBasedStateMachine):
    """The live space always equals ``live``; what storage holds (per key group) always equals
    ``durable``; any reload of any subset gives ``durable`` for those key groups."""

    def __init__(self) -> None:
        super().__init__()
        self.storage = SpyStorage(MemoryStorage())
        self.space = ObjectSpace(MAXP, range(MAXP), storage=self.storage, policy=POLICY)
        self.live: dict[int, Model] = {g: {} for g in range(MAXP)}
        self.durable: dict[int, tuple[int, Model]] = {g: (-1, {}) for g in range(MAXP)}
        self.touched: set[int] = set()  # key groups mutated since their last checkpoint
        self.batch = -1  # the last batch checkpointed (committed)
        self.abandoned_possible = False  # an upto_batch recovery left uncommitted files
        self.counter = 0

    def _unique(self, value: JSON) -> JSON:
        if value == ["#", None]:
            self.counter += 1
            return ["#", self.counter]
        return value

    # -- mutations --
    def _kind(self, g: int, name: str) -> str | None:
        entry = self.live[g].get(name)
        return None if entry is None else str(entry["kind"])

    def _ensure(self, g: int, name: str, kind: str) -> None:
        """Make ``name`` a ``kind`` (replacing an object of another kind), as the op needs."""
        if self._kind(g, name) == kind:
            return
        group = self.space.group(g)
        if name in group:
            group.delete(name)
        self.live[g][name] = {"kind": kind, "data": create_empty(group, name, kind)}
        self.touched.add(g)

    @rule(g=groups_st, name=names_st, kind=st.sampled_from(["value", "list", "map"]))
    def create(self, g: int, name: str, kind: str) -> None:
        group = self.space.group(g)
        if self._kind(g, name) is not None:
            with pytest.raises(ObjectSpaceError, match="already has"):
                group.create_map(name)
            return
        self.live[g][name] = {"kind": kind, "data": create_empty(group, name, kind)}
        self.touched.add(g)

    @rule(g=groups_st, name=names_st)
    def delete(self, g: int, name: str) -> None:
        if self._kind(g, name) is None:
            with pytest.raises(KeyError):
                self.space.group(g).delete(name)
            return
        self.space.group(g).delete(name)
        del self.live[g][name]
        self.touched.add(g)

    @rule(g=groups_st, name=value_names, value=json_values())
    def value_set(self, g: int, name: str, value: JSON) -> None:
        value = self._unique(value)
        self._ensure(g, name, "value")
        self.space.group(g).get_value(name).set(value)
        self.live[g][name]["data"] = value
        self.touched.add(g)

    @rule(
        g=groups_st,
        name=list_names,
        ops=st.lists(
            st.tuples(
                st.sampled_from(["append", "extend", "set", "set", "insert", "pop", "clear"]),
                st.integers(-4, 6),
                st.lists(json_values(), min_size=1, max_size=3),
            ),
            min_size=1,
            max_size=6,
        ),
    )
    def list_ops(self, g: int, name: str, ops: list[tuple[str, int, list[JSON]]]) -> None:
        self._ensure(g, name, "list")
        persisted = self.space.group(g).get_list(name)
        model: list[JSON] = self.live[g][name]["data"]
        for op, raw_index, raw_values in ops:
            values = [self._unique(v) for v in raw_values]
            index = raw_index
            if model and index < 6:  # mostly in range: -len..len-1
                index = index % (2 * len(model)) - len(model)
            if op in ("set", "pop") and not -len(model) <= index < len(model):
                with pytest.raises(IndexError):
                    if op == "pop":
                        persisted.pop(index)
                    else:
                        persisted[index] = values[0]
                continue
            self.touched.add(g)
            if op == "append":
                persisted.append(values[0])
                model.append(values[0])
            elif op == "extend":
                persisted.extend(values)
                model.extend(values)
            elif op == "set":
                persisted[index] = values[0]
                model[index] = values[0]
            elif op == "insert":
                persisted.insert(index, values[0])
                model.insert(index, values[0])
            elif op == "pop":
                assert persisted.pop(index) == model.pop(index)
            else:
                persisted.clear()
                model.clear()

    @rule(
        g=groups_st,
        name=map_names,
        ops=st.lists(
            st.tuples(st.sampled_from(MAP_KEYS), json_values(), st.booleans()),
            min_size=1,
            max_size=6,
        ),
    )
    def map_ops(self, g: int, name: str, ops: list[tuple[str, JSON, bool]]) -> None:
        self._ensure(g, name, "map")
        persisted = self.space.group(g).get_map(name)
        model: dict[str, JSON] = self.live[g][name]["data"]
        for key, raw_value, delete in ops:
            value = self._unique(raw_value)
            if not delete:
                persisted[key] = value
                model[key] = value
                self.touched.add(g)
            elif key in model:
                del persisted[key]
                del model[key]
                self.touched.add(g)
            else:
                with pytest.raises(KeyError):
                    del persisted[key]

    # -- checkpoints --
    def _commit(self, groups: Iterable[int], batch: int) -> None:
        for g in groups:
            self.durable[g] = (batch, copy.deepcopy(self.live[g]))

    @rule()
    def checkpoint(self) -> None:
        self.batch += 1
        self.storage.reset()
        report = self.space.checkpoint(self.batch)
        assert report.key_groups_written == tuple(sorted(self.touched))
        assert report.bytes_written == sum(self.storage.created.values())
        assert report.files_written == len(self.storage.created)
        self._commit(self.touched, self.batch)
        self.touched = set()
        self.abandoned_possible = False
        self._storage_is_durable()

    def _storage_is_durable(self) -> None:
        loaded, report = ObjectSpace.load(
            self.storage.inner, range(MAXP), max_parallelism=MAXP, upto_batch=self.batch
        )
        for g in range(MAXP):
            assert (report.batches[g], loaded.group(g).snapshot()) == self.durable[g]

    @rule(k=st.integers(0, MAXP - 1))
    def interrupted_checkpoint_then_retry(self, k: int) -> None:
        """The storage fails at the (k+1)-th write; an in-process retry finishes the batch."""
        self.batch += 1
        self.storage.fail_after = k
        try:
            self.space.checkpoint(self.batch)
            finished = True
        except InjectedCrash:
            finished = False
        finally:
            self.storage.fail_after = None
        assert finished == (len(self.touched) <= k)
        report = self.space.checkpoint(self.batch)
        assert len(report.key_groups_written) == max(0, len(self.touched) - k)
        self._commit(self.touched, self.batch)
        self.touched = set()
        self.abandoned_possible = False
        self._storage_is_durable()

    @rule(k=st.integers(0, MAXP - 1), recover_at_committed=st.booleans())
    def crash_during_checkpoint(self, k: int, recover_at_committed: bool) -> None:
        """The process dies after k files of a checkpoint; a new process loads every key group:
        each is at the new batch (and equals the new state) or at its previous checkpoint."""
        if self.abandoned_possible:  # files of an abandoned attempt: only upto_batch is exact
            recover_at_committed = True
        before = copy.deepcopy(self.durable)
        batch = self.batch + 1
        self.storage.fail_after = k
        try:
            self.space.checkpoint(batch)
        except InjectedCrash:
            pass
        finally:
            self.storage.fail_after = None
        if recover_at_committed:  # as the pipeline does: load at the driver's committed batch
            space, report = ObjectSpace.load(
                self.storage, range(MAXP), max_parallelism=MAXP, upto_batch=batch - 1, policy=POLICY
            )
            for g in range(MAXP):
                assert (report.batches[g], space.group(g).snapshot()) == before[g]
            self.durable = before
            self.abandoned_possible = True
        else:
            space, report = ObjectSpace.load(
                self.storage, range(MAXP), max_parallelism=MAXP, policy=POLICY
            )
            for g in range(MAXP):
                if report.batches[g] == batch:
                    assert g in self.touched
                    assert space.group(g).snapshot() == self.live[g]
                    self.durable[g] = (batch, copy.deepcopy(self.live[g]))
                else:
                    assert (report.batches[g], space.group(g).snapshot()) == before[g]
            self.batch = batch
        self.space = space
        self.live = {g: copy.deepcopy(self.durable[g][1]) for g in range(MAXP)}
        self.touched = set()

    # -- reloads and rescaling --
    @rule(subset=st.sets(groups_st))
    def reload_subset(self, subset: set[int]) -> None:
        """A new owner loads ``subset`` (reading nothing else) and takes it over: the live space
        drops those key groups (losing what was not checkpointed) and merges the loaded ones."""
        self.storage.reset()
        upto = self.batch if self.abandoned_possible else None
        loaded, report = ObjectSpace.load(
            self.storage, subset, max_parallelism=MAXP, upto_batch=upto, policy=POLICY
        )
        assert self.storage.groups_touched() <= subset
        assert report.bytes_read == sum(
            len(self.storage.inner.read_file(g, n))
            for op, g, n in self.storage.calls
            if op == "read"
        )
        for g in subset:
            assert (report.batches[g], loaded.group(g).snapshot()) == self.durable[g]
        self.space.drop(subset)
        self.space.merge(loaded)
        assert len(loaded) == 0
        for g in subset:
            self.live[g] = copy.deepcopy(self.durable[g][1])
        self.touched -= subset

    @rule(subset=st.sets(groups_st))
    def split_and_merge_in_memory(self, subset: set[int]) -> None:
        """Hand key groups to another space (via bytes, as a local copy) and back: dirty
        tracking and chain positions travel with them."""
        other = self.space.extract(subset)
        assert set(other.key_groups) == subset
        assert not set(self.space.key_groups) & subset
        copied = ObjectSpace.from_bytes(other.to_bytes(), storage=self.storage)
        assert copied.snapshot() == other.snapshot()
        self.space.merge(copied)

    @rule()
    def roundtrip_whole_space(self) -> None:
        data = self.space.to_bytes()
        self.space = ObjectSpace.from_bytes(data, storage=self.storage)
        assert self.space.to_bytes() == data

    @precondition(lambda self: not self.abandoned_possible)
    @rule(subset=st.sets(groups_st, min_size=1))
    def plain_load_is_durable(self, subset: set[int]) -> None:
        loaded, report = ObjectSpace.load(self.storage, subset, max_parallelism=MAXP)
        for g in subset:
            assert (report.batches[g], loaded.group(g).snapshot()) == self.durable[g]

    @invariant()
    def live_space_equals_model(self) -> None:
        assert self.space.snapshot() == self.live
        assert set(self.space.dirty_key_groups()) == self.touched


# examples from the profile (tests/unit/conftest.py: 300 in CI, 5,000 with HYPOTHESIS_PROFILE=deep)
ObjectSpaceMachine.TestCase.settings = settings(stateful_step_count=60, deadline=None)
TestObjectSpaceMachine = ObjectSpaceMachine.TestCase


# --------------------------------------------------------------------------------------------
# bytes written are proportional to what changed


def pair(value: JSON) -> tuple[int, int]:
    """A ``[count, sum]`` entry."""
    assert isinstance(value, list) and len(value) == 2
    count, total = value
    assert isinstance(count, int) and isinstance(total, int)
    return count, total


def counts_space(
    storage: CheckpointStorage, entries: int, max_parallelism: int = 128
) -> ObjectSpace:
    space = ObjectSpace(max_parallelism, range(max_parallelism), storage=storage)
    for i in range(entries):
        key = f"key-{i:07d}"
        space.group_for_key(key).get_map("counts", create=True)[key] = [1, i]
    return space


def test_ten_changes_among_100k_entries_write_under_2kb(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path / "ckpt", fsync=False)
    space = counts_space(storage, 100_000)
    first = space.checkpoint(0)
    full = len(space.to_bytes())
    assert first.bytes_written > 1_000_000 and full > 1_000_000
    assert first.compacted == tuple(range(128))  # a new key group starts with a base

    rng = random.Random(1)
    for i in rng.sample(range(100_000), 10):
        key = f"key-{i:07d}"
        counts = space.group_for_key(key).get_map("counts")
        count, total = pair(counts[key])
        counts[key] = [count + 1, total + 5]
    report = space.checkpoint(1)
    assert report.bytes_written < 2_000, report
    assert report.files_written <= 10 and report.compacted == ()
    assert report.bytes_written == report.delta_bytes
    assert space.checkpoint(2).bytes_written == 0  # nothing changed: nothing written

    loaded, _ = ObjectSpace.load(storage, range(128), max_parallelism=128)
    assert loaded.snapshot() == space.snapshot()


def test_appending_to_a_long_list_writes_only_the_new_items() -> None:
    storage = MemoryStorage()
    space = ObjectSpace(4, [0], storage=storage)
    log = space.group(0).create_list("log", range(10_000))
    space.checkpoint(0)
    log.extend(["x", "y", "z"])
    log[5] = -5
    report = space.checkpoint(1)
    assert report.bytes_written < 250
    delta = json.loads(storage.files[0, "delta-00000001.json"])
    assert delta["objects"]["log"]["patch"] == {
        "from": 10_000,
        "tail": ["x", "y", "z"],
        "set": [[5, -5]],
    }
    log.pop()
    log.append("w")  # pop + append: one slot rewritten
    assert space.checkpoint(2).bytes_written < 200
    loaded, _ = ObjectSpace.load(storage, [0], max_parallelism=4)
    assert loaded.group(0).get_list("log").to_list() == log.to_list()


def test_compaction_keeps_total_bytes_amortized_to_the_changes() -> None:
    """Ratio rule (1.0): total bytes <= 3 x what pure deltas would write + the first bases;
    a full snapshot per checkpoint would write ~100x more."""
    storage = SpyStorage(MemoryStorage())
    space = counts_space(storage, 4_000, max_parallelism=4)
    first = space.checkpoint(0)
    rng = random.Random(7)
    written = changes = 0
    compactions = 0
    next_key = 4_000
    for batch in range(1, 501):
        for _ in range(10):
            if rng.random() < 0.2:  # the state also grows
                i, next_key = next_key, next_key + 1
            else:
                i = rng.randrange(next_key)
            key = f"key-{i:07d}"
            space.group_for_key(key).get_map("counts")[key] = [batch, i]
        report = space.checkpoint(batch)
        written += report.bytes_written
        changes += report.delta_bytes
        compactions += len(report.compacted)
    assert compactions >= 4  # the rule fired
    assert written <= 3 * changes + first.bytes_written
    full_each_time = 500 * len(space.to_bytes())
    assert written * 20 < full_each_time
    # a load reads the base and deltas no bigger than it (ratio 1): < 2 x the base
    storage.reset()
    loaded, load = ObjectSpace.load(storage, range(4), max_parallelism=4)
    assert loaded.snapshot() == space.snapshot()
    bases = sum(len(storage.inner.read_file(g, n)) for op, g, n in storage.calls if "base" in n)
    assert load.bytes_read < 2 * bases + 4 * 200


def test_max_deltas_bounds_the_chain_and_old_generations_go_one_checkpoint_later() -> None:
    storage = MemoryStorage()
    policy = CompactionPolicy(delta_ratio=1000, max_deltas=2)  # only the count rule fires
    space = ObjectSpace(1, [0], storage=storage, policy=policy)
    counter = space.group(0).create_value("n", 0)
    compacted_at = []
    for batch in range(7):
        counter.set(batch)
        if space.checkpoint(batch).compacted:
            compacted_at.append(batch)
        assert len([n for n in storage.list_files(0) if n.startswith("delta")]) <= 2 + 2
    assert compacted_at == [0, 3, 6]
    # after the compaction at batch 6 the generation of base 3 is kept one more checkpoint
    assert storage.list_files(0) == [
        "base-00000003.json",
        "base-00000006.json",
        "delta-00000004.json",
        "delta-00000005.json",
    ]
    at5, report = ObjectSpace.load(storage, [0], max_parallelism=1, upto_batch=5)
    assert report.batches == {0: 5} and at5.group(0).get_value("n").get() == 5
    counter.set(7)
    assert space.checkpoint(7).files_deleted == 3
    assert storage.list_files(0) == ["base-00000006.json", "delta-00000007.json"]
    with pytest.raises(ObjectSpaceError, match="no checkpoint at or before batch 5"):
        ObjectSpace.load(storage, [0], max_parallelism=1, upto_batch=5)


# --------------------------------------------------------------------------------------------
# loading a subset reads only its key groups


def test_loading_a_subset_reads_only_its_key_groups(tmp_path: Path) -> None:
    storage = DirectoryStorage(tmp_path / "ckpt")
    space = counts_space(storage, 5_000, max_parallelism=32)
    space.checkpoint(0)
    for g in range(32):
        space.group(g).get_value("seen", create=True).set(g)
    space.checkpoint(1)

    spy = SpyStorage(storage)
    mine = key_group_ranges(32, 4)[1]  # task 1 of 4: key groups 8..15
    loaded, report = ObjectSpace.load(spy, mine, max_parallelism=32)
    assert spy.groups_touched() == set(mine)
    assert report.files_read == 2 * len(mine)
    assert report.bytes_read == folder_bytes(storage, mine)
    assert report.bytes_read < folder_bytes(storage, range(32)) / 3
    assert report.batches == {g: 1 for g in mine}
    assert loaded.snapshot() == {g: space.group(g).snapshot() for g in mine}


def test_rescaling_8_to_16_to_8_continues_each_key_groups_chain(tmp_path: Path) -> None:
    """Tasks own contiguous key-group ranges; after each rescale every task loads just its
    ranges and continues their chains; the result equals a single-process reference."""
    storage = DirectoryStorage(tmp_path / "ckpt", fsync=False)
    maxp = 64
    config = PipelineConfig(local_store_dir="", checkpoint_dir="", num_keys=300)
    reference: dict[str, list[int]] = {}
    batch = 0

    def run(parallelism: int, batches: int) -> None:
        nonlocal batch
        ranges = key_group_ranges(maxp, parallelism)
        tasks = []
        for owned in ranges:
            spy = SpyStorage(storage)
            task, _ = ObjectSpace.load(spy, owned, max_parallelism=maxp, upto_batch=batch - 1)
            assert spy.groups_touched() <= set(owned)
            tasks.append(task)
        for _ in range(batches):
            for key, value in generate_batch(batch, config):
                entry = reference.setdefault(key, [0, 0])
                entry[0] += 1
                entry[1] += value
                g = tasks[0].key_group_of(key)
                task = next(t for t, r in zip(tasks, ranges, strict=True) if g in r)
                counts = task.group(g).get_map("counts", create=True)
                count, total = pair(counts.get(key, [0, 0]))
                counts[key] = [count + 1, total + value]  # a new value: tracked
            for task in tasks:
                task.checkpoint(batch)
            batch += 1

    run(8, 3)
    run(16, 3)
    run(8, 2)
    final, report = ObjectSpace.load(storage, range(maxp), max_parallelism=maxp)
    state = {
        key: value
        for g in range(maxp)
        if "counts" in final.group(g)
        for key, value in final.group(g).get_map("counts").items()
    }
    assert state == reference
    assert max(report.batches.values()) == batch - 1


def test_extract_and_merge_hand_over_key_groups_with_their_changes() -> None:
    storage = MemoryStorage()
    parent = ObjectSpace(16, range(8), storage=storage)
    for g in range(8):
        parent.group(g).create_map("m", {"x": g})
    parent.checkpoint(0)
    parent.group(5).get_map("m")["x"] = 50  # not checkpointed yet: travels with key group 5
    child = parent.extract(range(4, 8))  # split: the child owns 4..7
    assert parent.key_groups == (0, 1, 2, 3) and child.key_groups == (4, 5, 6, 7)
    assert child.dirty_key_groups() == [5]
    report = child.checkpoint(1)
    assert report.key_groups_written == (5,)
    sibling, _ = ObjectSpace.load(storage, range(8, 16), max_parallelism=16)
    child.merge(sibling)  # merge: the union of two
    assert child.key_groups == tuple(range(4, 16)) and len(sibling) == 0
    with pytest.raises(ObjectSpaceError, match=r"both object spaces hold key groups \[0\]"):
        parent.merge(ObjectSpace(16, [0]))
    with pytest.raises(ObjectSpaceError, match="max_parallelism 8"):
        parent.merge(ObjectSpace(8))
    with pytest.raises(ObjectSpaceError, match=r"key groups \[9\] are not in this object space"):
        parent.extract([9])
    handle = parent.group(0).get_map("m")
    parent.drop([0])
    with pytest.raises(ObjectSpaceError, match="was deleted"):
        handle["x"] = 1


def test_a_serialized_space_keeps_its_dirty_tracking() -> None:
    storage = MemoryStorage()
    space = ObjectSpace(2, [0, 1], storage=storage)
    m = space.group(0).create_map("m", {f"k{i}": i for i in range(1000)})
    space.group(1).create_list("l", range(100))
    space.checkpoint(0)
    m["k1"] = "changed"
    del m["k2"]
    space.group(1).get_list("l").pop(0)
    copied = ObjectSpace.from_bytes(space.to_bytes(), storage=MemoryStorage())
    copied_storage = copied.storage
    assert isinstance(copied_storage, MemoryStorage)
    copied_storage.files = dict(storage.files)
    assert copied.checkpoint(1) == space.checkpoint(1)
    assert copied_storage.files == storage.files


# --------------------------------------------------------------------------------------------
# crash safety


def _eight_groups(
    storage: CheckpointStorage, policy: CompactionPolicy | None = None
) -> ObjectSpace:
    space = ObjectSpace(8, range(8), storage=storage, policy=policy)
    for g in range(8):
        space.group(g).create_map("m", {"batch": 0})
    space.checkpoint(0)
    for g in range(8):
        space.group(g).get_map("m")["batch"] = 1
    return space


@pytest.mark.parametrize("written", [0, 3, 7])
def test_a_crash_mid_checkpoint_leaves_each_key_group_at_a_consistent_batch(
    tmp_path: Path, written: int
) -> None:
    storage = DirectoryStorage(tmp_path / "ckpt")
    spy = SpyStorage(storage)
    space = _eight_groups(spy)
    spy.fail_after = written
    with pytest.raises(InjectedCrash):
        space.checkpoint(1)

    after_crash, report = ObjectSpace.load(storage, range(8), max_parallelism=8)
    for g in range(8):
        batch = 1 if g < written else 0
        assert report.batches[g] == batch
        assert after_crash.group(g).get_map("m").to_dict() == {"batch": batch}

    # recovering at the committed batch 0 ignores the half-written batch 1 ...
    recovered, report = ObjectSpace.load(storage, range(8), max_parallelism=8, upto_batch=0)
    assert report.batches == {g: 0 for g in range(8)}
    assert all(recovered.group(g).get_map("m")["batch"] == 0 for g in range(8))
    # ... and the retry of batch 1 deletes the abandoned files before writing its own
    for g in range(8):
        recovered.group(g).get_map("m")["batch"] = 1
    done = recovered.checkpoint(1)
    assert done.files_deleted == written and done.files_written == 8
    final, report = ObjectSpace.load(storage, range(8), max_parallelism=8)
    assert report.batches == {g: 1 for g in range(8)}
    assert all(final.group(g).get_map("m")["batch"] == 1 for g in range(8))


def test_abandoned_files_are_deleted_even_for_clean_key_groups() -> None:
    storage = SpyStorage(MemoryStorage())
    space = _eight_groups(storage)
    storage.fail_after = 2
    with pytest.raises(InjectedCrash):
        space.checkpoint(1)
    storage.fail_after = None
    recovered, _ = ObjectSpace.load(storage, range(8), max_parallelism=8, upto_batch=0)
    recovered.group(7).get_map("m")["batch"] = 1  # the retry touches only key group 7
    assert recovered.checkpoint(1).files_deleted == 2
    _, report = ObjectSpace.load(storage, range(8), max_parallelism=8)
    assert report.batches == {g: 1 if g == 7 else 0 for g in range(8)}


def test_a_torn_write_is_invisible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = DirectoryStorage(tmp_path / "ckpt")
    space = _eight_groups(storage)

    class PowerCut(BaseException):
        pass

    def cut(*_: object) -> None:
        raise PowerCut

    monkeypatch.setattr(os, "link", cut)
    with pytest.raises(PowerCut):
        space.checkpoint(1)
    monkeypatch.undo()
    assert storage.list_files(0) == ["base-00000000.json"]
    # a crash that leaves the temporary file behind: loaders ignore it
    (storage.folder(0) / ".delta-00000001.json.abc123.tmp").write_bytes(b'{"type":"del')
    loaded, report = ObjectSpace.load(storage, [0], max_parallelism=8)
    assert report.batches == {0: 0} and report.files_read == 1
    assert loaded.group(0).get_map("m")["batch"] == 0
    assert space.checkpoint(1).files_written == 8  # the retry writes everything


def test_a_second_writer_of_a_key_group_fails_instead_of_forking_the_chain(
    tmp_path: Path,
) -> None:
    storage = DirectoryStorage(tmp_path / "ckpt")
    never = CompactionPolicy(delta_ratio=1e9)  # both write deltas: the same file name
    space = _eight_groups(storage, never)
    twin, _ = ObjectSpace.load(storage, [3], max_parallelism=8, policy=never)
    twin.group(3).get_map("m")["batch"] = 99
    twin.checkpoint(1)
    with pytest.raises(FileExistsError, match=r"delta-00000001\.json already exists"):
        space.checkpoint(1)
    fresh = ObjectSpace(8, [3], storage=storage)
    fresh.group(3).create_value("v")
    with pytest.raises(ObjectSpaceError, match="key group 3 is new in this object space"):
        fresh.checkpoint(5)


# --------------------------------------------------------------------------------------------
# bad input and corrupt files


def _two_batches(tmp_path: Path) -> DirectoryStorage:
    storage = DirectoryStorage(tmp_path / "ckpt")
    space = ObjectSpace(4, range(4), storage=storage)
    for g in range(4):
        space.group(g).create_map("m", {f"k{i}": i for i in range(50)})
    space.checkpoint(0)
    for batch in (1, 2):
        for g in range(4):
            space.group(g).get_map("m")["k1"] = batch
        space.checkpoint(batch)
    return storage


def test_a_truncated_delta_is_named(tmp_path: Path) -> None:
    storage = _two_batches(tmp_path)
    path = storage.folder(2) / "delta-00000001.json"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CorruptCheckpointError, match="not valid JSON") as error:
        ObjectSpace.load(storage, [2], max_parallelism=4)
    assert error.value.location == str(path)
    assert str(path) in str(error.value)
    ObjectSpace.load(storage, [0, 1, 3], max_parallelism=4)  # the others are fine


def test_corrupt_and_misplaced_files_are_named(tmp_path: Path) -> None:
    storage = _two_batches(tmp_path)
    folder = storage.folder(1)
    # a file of another key group
    (folder / "delta-00000002.json").write_bytes(
        (storage.folder(3) / "delta-00000002.json").read_bytes()
    )
    with pytest.raises(CorruptCheckpointError, match="belongs to key group 3, not 1") as error:
        ObjectSpace.load(storage, [1], max_parallelism=4)
    assert error.value.location == str(folder / "delta-00000002.json")
    # a missing delta inside the chain
    (folder / "delta-00000001.json").unlink()
    with pytest.raises(CorruptCheckpointError, match="seq 1 is missing") as error:
        ObjectSpace.load(storage, [1], max_parallelism=4)
    assert error.value.location == str(folder / "delta-00000002.json")
    # a base written with another max_parallelism
    with pytest.raises(CorruptCheckpointError, match="max_parallelism 4, not 8"):
        ObjectSpace.load(storage, [0], max_parallelism=8)
    # a patch of an object the base does not have
    base = storage.folder(0) / "base-00000000.json"
    document = json.loads(base.read_bytes())
    document["objects"] = {}
    base.write_text(json.dumps(document))
    with pytest.raises(CorruptCheckpointError, match="'m' has no such object") as error:
        ObjectSpace.load(storage, [0], max_parallelism=4)
    assert error.value.location == str(storage.folder(0) / "delta-00000001.json")
    # two files with one sequence number (two writers that chose different kinds)
    (storage.folder(2) / "base-00000002.json").write_bytes(b"{}")
    with pytest.raises(CorruptCheckpointError, match="a second file with sequence number 2"):
        ObjectSpace.load(storage, [2], max_parallelism=4)
    # a serialized space that is not one
    with pytest.raises(CorruptCheckpointError, match="object space snapshot: not a version 1"):
        ObjectSpace.from_bytes(b'{"type": "something else"}')


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match=r"key group 8 is out of range \[0, 8\)"):
        ObjectSpace(8, [8])
    with pytest.raises(ValueError, match=r"key group -1 is out of range \[0, 8\)"):
        ObjectSpace.load(MemoryStorage(), [0, -1], max_parallelism=8)
    with pytest.raises(ValueError, match="max_parallelism must be an integer >= 1"):
        ObjectSpace(0)
    space = ObjectSpace(8, [1, 2, 3, 6], storage=MemoryStorage())
    with pytest.raises(
        ObjectSpaceError, match=r"key group 5 is not in this object space \(1-3, 6\)"
    ):
        space.group(5)
    counts = space.group(3).create_map("counts")
    with pytest.raises(TypeError, match=r"persisted map 'counts' of key group 3\['k'\]: a tuple"):
        counts["k"] = (1, 2)  # type: ignore[assignment]
    with pytest.raises(TypeError, match=r"\['k'\]\['a'\]\[1\]: nan is not JSON"):
        counts["k"] = {"a": [1, float("nan")]}
    with pytest.raises(TypeError, match="keys must be str"):
        counts[3] = 1  # type: ignore[index]
    with pytest.raises(ObjectSpaceError, match="'counts' of key group 3 is a map, not a list"):
        space.group(3).get_list("counts")
    with pytest.raises(KeyError, match="key group 3 has no object 'nope'"):
        space.group(3).get_value("nope")
    space.checkpoint(4)
    counts["k"] = 1
    with pytest.raises(ObjectSpaceError, match="already checkpointed at batch 4"):
        space.checkpoint(4)
    with pytest.raises(ValueError, match="delta_ratio must be a number > 0"):
        CompactionPolicy(delta_ratio=0)
    with pytest.raises(ObjectSpaceError, match="no storage"):
        ObjectSpace(8, [0]).checkpoint(0)


def test_in_place_mutation_needs_touch() -> None:
    storage = MemoryStorage()
    space = ObjectSpace(1, [0], storage=storage)
    counts = space.group(0).create_map("counts", {"a": [1, 1]})
    space.checkpoint(0)
    entry = counts["a"]
    assert isinstance(entry, list)
    entry[0] = 2  # invisible to dirty tracking ...
    assert space.checkpoint(1).bytes_written == 0
    counts.touch("a")  # ... until touched
    assert space.checkpoint(2).bytes_written > 0
    loaded, _ = ObjectSpace.load(storage, [0], max_parallelism=1)
    assert loaded.group(0).get_map("counts")["a"] == [2, 1]


def test_key_group_handle_types() -> None:
    group = ObjectSpace(4, [2]).group(2)
    assert isinstance(group, KeyGroup) and group.key_group == 2 and group.batch == -1
    group.create_value("v", 1)
    group.create_list("l", [1])
    group.create_map("m", {"a": 1})
    assert group.names() == ["l", "m", "v"]
    assert [group.kind(n) for n in group.names()] == ["list", "map", "value"]
    group.delete("v")
    assert "v" not in group
