"""Attempts of one batch never touch each other's files (issue: Spark's real failure modes).

Two attempts of a task's batch (speculation, a zombie stage attempt, a retry while the first
still runs) write tagged files of their own; whichever attempt the commit names is loaded along
its chain heads; the files no commit needs are removed once a later batch's start decided them,
never a file of a batch still open. Pure: the object space on in-memory storage, with hypothesis
drawing the interleavings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locality.spark.state.objectspace import (
    CompactionPolicy,
    CorruptCheckpointError,
    MemoryStorage,
    ObjectSpace,
)
from locality.spark.state.objectspace.fileformat import garbage, parse_name

GROUPS = (0, 1, 2)


def _space_at(
    storage: MemoryStorage, heads: dict[int, str], policy: CompactionPolicy
) -> ObjectSpace:
    space, _ = ObjectSpace.load(storage, GROUPS, max_parallelism=4, heads=heads, policy=policy)
    return space


def _apply(space: ObjectSpace, batch: int, updates: dict[int, int]) -> None:
    for key, value in updates.items():
        counts = space.group(key % len(GROUPS)).get_map("counts", create=True)
        counts[str(key)] = int(counts.get(str(key), 0) or 0) + value + batch


def _state(space: ObjectSpace) -> dict[int, dict[str, object]]:
    return {g: dict(space.group(g).get_map("counts", create=True).items()) for g in GROUPS}


BATCHES = st.lists(
    st.tuples(
        st.dictionaries(st.integers(0, 11), st.integers(1, 5), max_size=6),  # the batch's rows
        st.integers(1, 3),  # attempts of the batch
        st.integers(0, 2),  # which attempt the commit names
        st.booleans(),  # a late attempt of the batch writes after the next batch began
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(BATCHES, st.sampled_from([None, 1, 2]))
def test_the_committed_attempt_is_the_state_whatever_the_others_wrote(
    batches: list[tuple[dict[int, int], int, int, bool]], max_deltas: int | None
) -> None:
    storage = MemoryStorage()
    policy = CompactionPolicy(delta_ratio=1.0, max_deltas=max_deltas)
    heads: dict[int, str] = {}
    reference = ObjectSpace(4, GROUPS)
    late: list[tuple[ObjectSpace, int]] = []
    for batch, (updates, attempts, chosen, straggle) in enumerate(batches):
        runs = []
        for attempt in range(attempts):
            space = _space_at(storage, heads, policy)
            space.collect_garbage(batch - 1)
            _apply(space, batch, updates)
            space.checkpoint(batch, tag=f"b{batch}a{attempt}")
            runs.append(space)
        for space, old_batch in late:  # a zombie of the batch before writes only now
            space.checkpoint(old_batch, tag="zombie")
        late = []
        if straggle:  # an attempt that started with the others and stalls past the commit
            zombie = _space_at(storage, heads, policy)
            _apply(zombie, batch, {**updates, 99: 1})
            late = [(zombie, batch)]
        heads = runs[chosen % attempts].heads()
        _apply(reference, batch, updates)
        loaded = _space_at(storage, heads, policy)
        assert _state(loaded) == _state(reference)
        for g in GROUPS:  # every file of the committed chains is still there
            names = set(storage.list_files(g))
            assert set(loaded.group(g)._chain.files) <= names
    final = _space_at(storage, heads, policy)
    final.collect_garbage(len(batches) - 1)
    for g in GROUPS:  # nothing is left but the committed chain
        assert set(storage.list_files(g)) == set(final.group(g)._chain.files)


def test_garbage_is_only_decided_batches_off_the_chain() -> None:
    names = [
        "base-00000000-0-aa.json",
        "delta-00000001-1-bb.json",  # on the chain
        "delta-00000001-1-cc.json",  # the attempt of batch 1 that lost
        "delta-00000002-2-dd.json",  # batch 2: not decided yet
        "base-00000000.json",  # untagged (a format 1 chain): never garbage here
    ]
    keep = {"base-00000000-0-aa.json", "delta-00000001-1-bb.json"}
    assert garbage(names, keep, 1) == ["delta-00000001-1-cc.json"]
    assert garbage(names, keep, 2) == ["delta-00000002-2-dd.json", "delta-00000001-1-cc.json"]
    parsed = parse_name("delta-00000002-2-dd.json")
    assert parsed is not None and (parsed.kind, parsed.seq, parsed.batch, parsed.tag) == (
        "delta",
        2,
        2,
        "dd",
    )


def test_a_missing_committed_file_names_the_file() -> None:
    storage = MemoryStorage()
    space = ObjectSpace(4, GROUPS, storage=storage)
    _apply(space, 0, {0: 1})
    space.checkpoint(0, tag="t0")
    _apply(space, 1, {0: 1})
    space.checkpoint(1, tag="t1")
    heads = space.heads()
    storage.delete_file(0, space.group(0)._chain.files[0])
    with pytest.raises(CorruptCheckpointError, match="committed chain of key group 0 needs it"):
        _space_at(storage, heads, CompactionPolicy())


def test_a_tag_must_be_name_safe() -> None:
    space = ObjectSpace(4, GROUPS, storage=MemoryStorage())
    _apply(space, 0, {0: 1})
    with pytest.raises(ValueError, match="lowercase letters and digits"):
        space.checkpoint(0, tag="../x")
