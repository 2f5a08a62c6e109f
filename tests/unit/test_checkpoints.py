"""Checkpoints of SEP-32 key buckets (metadata/checkpoints.py): split inherits, merge takes the
minimum, serde, and a model of consumers crashing across splits and merges that checks that no
message is ever skipped (at least once)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupers.keys import Key, key_bucket
from metadata.checkpoints import (
    MAX_FACTOR,
    MAX_OFFSET,
    PartitionCheckpoint,
    dump_checkpoint,
    load_checkpoint,
    lowest,
    offset_for,
    rescale,
    with_offset,
)
from metadata.errors import CorruptDataError, MetadataError
from metadata.zk.layout import JobLayout, checkpoint_name, parse_checkpoint_name

FACTORS = [1, 2, 4, 8, 16]
offsets_st = st.one_of(st.none(), st.integers(0, 1000), st.just(MAX_OFFSET))


@st.composite
def checkpoints(draw: st.DrawFn, factor: int | None = None) -> PartitionCheckpoint:
    f = draw(st.sampled_from(FACTORS)) if factor is None else factor
    return PartitionCheckpoint(f, tuple(draw(st.lists(offsets_st, min_size=f, max_size=f))))


def at_most(a: PartitionCheckpoint, b: PartitionCheckpoint) -> bool:
    """Every offset of ``a`` is at most ``b``'s (None, no checkpoint, is the lowest)."""
    assert a.factor == b.factor
    return all(
        x is None or (y is not None and x <= y) for x, y in zip(a.offsets, b.offsets, strict=True)
    )


# ---------------------------------------------------------------- the rules


def test_split_inherits_and_merge_takes_the_minimum() -> None:
    cp = PartitionCheckpoint(2, (10, 7))
    assert rescale(cp, 4) == PartitionCheckpoint(4, (10, 7, 10, 7))
    assert rescale(cp, 8).offsets == (10, 7) * 4
    assert rescale(cp, 1) == PartitionCheckpoint.whole(7)
    assert rescale(PartitionCheckpoint(4, (40, 10, 30, 20)), 2).offsets == (30, 10)
    assert rescale(PartitionCheckpoint(4, (40, 10, None, 20)), 2).offsets == (None, 10)
    assert rescale(PartitionCheckpoint(4, (40, 10, None, 20)), 1).offsets == (None,)
    assert rescale(cp, 2) is cp


def test_offset_for_the_whole_partition_and_for_buckets() -> None:
    assert offset_for(None, -1, 1) is None
    assert offset_for(PartitionCheckpoint.whole(5), -1, 1) == 5
    assert offset_for(PartitionCheckpoint.whole(5), 0, 1) == 5  # bucket 0 of 1 = whole
    assert offset_for(PartitionCheckpoint.whole(5), 3, 4) == 5  # split: inherited
    assert offset_for(PartitionCheckpoint(4, (40, 10, 30, 20)), -1, 1) == 10  # merge: min
    assert offset_for(PartitionCheckpoint(4, (40, 10, 30, 20)), 0, 2) == 30


def test_with_offset_converts_then_sets() -> None:
    assert with_offset(None, -1, 1, 9) == PartitionCheckpoint.whole(9)
    assert with_offset(None, 1, 2, 9) == PartitionCheckpoint(2, (None, 9))
    assert with_offset(PartitionCheckpoint.whole(5), 1, 2, 9).offsets == (5, 9)
    assert with_offset(PartitionCheckpoint(4, (40, 10, 30, 20)), 0, 2, 50).offsets == (50, 10)
    # lower than stored is allowed: a replay or a deliberate rewind
    assert with_offset(PartitionCheckpoint.whole(50), -1, 1, 3) == PartitionCheckpoint.whole(3)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: offset_for(None, -1, 2), "key_bucket -1 is the whole partition"),
        (lambda: offset_for(None, 2, 2), "key_bucket must be in 0..1 for factor 2, got 2"),
        (lambda: offset_for(None, -2, 1), "key_bucket must be in 0..0"),
        (lambda: offset_for(None, 0, 3), "power of two"),
        (lambda: offset_for(None, 0, 0), "power of two"),
        (lambda: offset_for(None, 0, MAX_FACTOR * 2), "power of two in 1..4096"),
        (lambda: offset_for(None, 0, True), "integer power of two"),
        (lambda: with_offset(None, 0, 1, -1), "offset must be in 0.."),
        (lambda: with_offset(None, 0, 1, MAX_OFFSET + 1), "offset must be in 0.."),
        (lambda: with_offset(None, 0, 1, 1.0), "offset must be an integer"),
        (lambda: rescale(PartitionCheckpoint.whole(1), 6), "new_factor must be a power of two"),
        (lambda: PartitionCheckpoint(2, (1,)), "factor 2 needs 2 offsets, got 1"),
        (lambda: PartitionCheckpoint(1, (-1,)), "offsets[0] must be in 0.."),
        (lambda: PartitionCheckpoint(1, "1"), "offsets must be a sequence"),
        (lambda: lowest([]), "no offsets"),
    ],
)
def test_bad_arguments_are_value_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        call()
    assert message in str(error.value)


def test_checkpoints_are_hashable_values() -> None:
    a = PartitionCheckpoint(2, [1, None])  # type: ignore[arg-type]  # lists are accepted
    assert a == PartitionCheckpoint(2, (1, None))
    assert hash(a) == hash(PartitionCheckpoint(2, (1, None)))
    assert PartitionCheckpoint.empty(4).offsets == (None,) * 4


# ---------------------------------------------------------------- properties


@given(checkpoints(), st.integers(1, 3))
def test_split_then_merge_back_is_the_original(cp: PartitionCheckpoint, times: int) -> None:
    assert rescale(rescale(cp, cp.factor << times), cp.factor) == cp


@given(checkpoints(), st.sampled_from(FACTORS))
def test_merge_then_split_back_never_claims_more(cp: PartitionCheckpoint, g: int) -> None:
    if g > cp.factor:
        cp, g = rescale(cp, g), cp.factor  # make cp the finer one
    back = rescale(rescale(cp, g), cp.factor)
    assert at_most(back, cp)
    siblings_agree = all(len(set(cp.offsets[b::g])) == 1 for b in range(g))
    assert (back == cp) == siblings_agree


@given(st.data(), checkpoints(), st.integers(1, 3))
def test_children_that_progress_merge_to_their_minimum(
    data: st.DataObject, cp: PartitionCheckpoint, times: int
) -> None:
    children = rescale(cp, cp.factor << times)
    advanced = list(children.offsets)
    for b in data.draw(st.sets(st.integers(0, children.factor - 1))):
        start = advanced[b] or 0
        advanced[b] = data.draw(st.integers(start, max(start, 2000)))  # progress, never back
    merged = rescale(PartitionCheckpoint(children.factor, tuple(advanced)), cp.factor)
    assert at_most(cp, merged)  # progress is kept as far as every child made it
    for c, offset in enumerate(advanced):
        parent = merged.offsets[c % cp.factor]
        assert parent is None or (offset is not None and parent <= offset)  # never beyond a child


@given(checkpoints(), st.sampled_from(FACTORS), st.sampled_from(FACTORS))
def test_rescale_composes_never_claiming_more(cp: PartitionCheckpoint, g: int, h: int) -> None:
    via = rescale(rescale(cp, g), h)
    direct = rescale(cp, h)
    assert at_most(via, direct)
    if g >= min(cp.factor, h):  # no coarser factor on the way: nothing is lost
        assert via == direct


@given(checkpoints(), st.sampled_from(FACTORS))
def test_offset_for_agrees_with_rescale(cp: PartitionCheckpoint, g: int) -> None:
    assert [offset_for(cp, b, g) for b in range(g)] == list(rescale(cp, g).offsets)


@given(st.one_of(st.none(), checkpoints()), st.data())
def test_with_offset_sets_one_bucket_at_the_writers_factor(
    cp: PartitionCheckpoint | None, data: st.DataObject
) -> None:
    g = data.draw(st.sampled_from(FACTORS))
    b = data.draw(st.integers(0, g - 1))
    x = data.draw(st.integers(0, MAX_OFFSET))
    written = with_offset(cp, b, g, x)
    before = PartitionCheckpoint.empty(g) if cp is None else rescale(cp, g)
    assert written.factor == g
    assert offset_for(written, b, g) == x
    assert [o for i, o in enumerate(written.offsets) if i != b] == [
        o for i, o in enumerate(before.offsets) if i != b
    ]
    assert with_offset(written, b, g, x) == written  # idempotent: a retried write is a no-op


# ---------------------------------------------------------------- JSON


@given(checkpoints())
def test_json_round_trip(cp: PartitionCheckpoint) -> None:
    assert load_checkpoint(dump_checkpoint(cp)) == cp


def test_json_document() -> None:
    cp = PartitionCheckpoint(4, (120, None, 98, 130))
    assert dump_checkpoint(cp) == b'{"format":1,"factor":4,"offsets":[120,null,98,130]}'
    assert load_checkpoint(b'{"offsets": [3], "factor": 1, "format": 1, "by": "p-1"}') == (
        PartitionCheckpoint.whole(3)  # unknown fields are ignored
    )


def doc(**fields: Any) -> bytes:
    return json.dumps({"format": 1, "factor": 2, "offsets": [1, None], **fields}).encode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "checkpoint is empty"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b'{"format": 1,', "not valid JSON"),
        (b'{"format": 1, "format": 1, "factor": 1, "offsets": [0]}', "duplicate field 'format'"),
        (b"[1, 2]", "should be a JSON object, got list"),
        (b'{"factor": 1, "offsets": [0]}', "has no 'format' field"),
        (b'{"format": 1, "offsets": [0]}', "has no 'factor' field"),
        (b'{"format": 1, "factor": 1}', "has no 'offsets' field"),
        (doc(format=2), "format: expected 1, got 2"),
        (doc(format="1"), "format: expected 1, got '1'"),
        (doc(factor=3), "factor must be a power of two in 1..4096, got 3"),
        (doc(factor=True), "factor must be an integer power of two >= 1, got True"),
        (doc(factor=8192), "factor must be a power of two in 1..4096, got 8192"),
        (doc(offsets={"0": 1}), "offsets: expected a list"),
        (doc(offsets=[1]), "offsets: factor 2 needs 2 offsets, got 1"),
        (doc(offsets=[1, -1]), "offsets[1]: expected null or an integer"),
        (
            doc(offsets=[1.5, 1]),
            "offsets[0]: expected null or an integer in 0..9223372036854775807, got 1.5",
        ),
        (doc(offsets=[True, 1]), "offsets[0]: expected null or an integer"),
        (doc(offsets=["7", 1]), "offsets[0]: expected null or an integer"),
        (doc(offsets=[MAX_OFFSET + 1, 1]), "offsets[0]: expected null or an integer"),
        (b'{"format": 1, "factor": 1, "offsets": [NaN]}', "offsets[0]: expected null"),
    ],
)
def test_corrupt_documents_name_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptDataError) as error:
        load_checkpoint(data, "/job/checkpoints/kafka.events.0")
    assert error.value.path == "/job/checkpoints/kafka.events.0"
    assert problem in error.value.problem


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@given(
    st.one_of(
        st.binary(max_size=60),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.fixed_dictionaries(
            {"format": json_values | st.just(1), "factor": json_values | st.sampled_from(FACTORS)},
            optional={"offsets": json_values | st.lists(offsets_st, max_size=4)},
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_bytes_load_or_raise_corrupt_data(data: bytes) -> None:
    try:
        cp = load_checkpoint(data)
    except CorruptDataError as error:
        assert isinstance(error, MetadataError) and error.problem
    else:
        assert load_checkpoint(dump_checkpoint(cp)) == cp


# ---------------------------------------------------------------- node names


def test_checkpoint_paths() -> None:
    layout = JobLayout("/affinity/clicks-1")
    assert (
        layout.checkpoint("kafka", "events", 3) == "/affinity/clicks-1/checkpoints/kafka.events.3"
    )
    assert layout.checkpoints in layout.containers()  # ensure_layout creates the folder
    assert checkpoint_name("my.sys", "page views", 0) == "my%2Esys.page%20views.0"
    assert checkpoint_name("a.b", "c", 1) != checkpoint_name("a", "b.c", 1)
    for bad in (("", "s", 0), ("k", "", 0), ("k", "s", -1), ("k", "s", True)):
        with pytest.raises(ValueError):
            checkpoint_name(*bad)  # type: ignore[arg-type]


@given(st.text(min_size=1), st.text(min_size=1), st.integers(0, 10**6))
def test_checkpoint_names_round_trip(system: str, stream: str, partition: int) -> None:
    name = checkpoint_name(system, stream, partition)
    assert "/" not in name and name.count(".") == 2
    assert parse_checkpoint_name(name, "/p") == (system, stream, partition)


@pytest.mark.parametrize(
    "name",
    [
        "kafka.events",
        "kafka.events.01",
        "kafka.events.-1",
        "a.b.c.1",
        "kafka.ev%zz.1",
        "kafka.ev%2eents.1",
        "kafka.ev%FF.1",
        ".events.1",
        "kafka..1",
        "kafka.ev ents.1",
    ],
)
def test_foreign_checkpoint_names_are_corrupt(name: str) -> None:
    with pytest.raises(CorruptDataError) as error:
        parse_checkpoint_name(name, f"/job/checkpoints/{name}")
    assert error.value.path == f"/job/checkpoints/{name}"
    assert name in error.value.problem


# ---------------------------------------------------------------- no message skipped


class Checkpointer(Protocol):
    """Where consumers of one stream partition read and write their bucket's checkpoint."""

    def read(self, bucket: int, factor: int) -> int | None: ...

    def write(self, bucket: int, factor: int, offset: int) -> None: ...


class PureCheckpointer:
    def __init__(self) -> None:
        self.stored: PartitionCheckpoint | None = None

    def read(self, bucket: int, factor: int) -> int | None:
        return offset_for(self.stored, bucket, factor)

    def write(self, bucket: int, factor: int, offset: int) -> None:
        self.stored = with_offset(self.stored, bucket, factor, offset)


class MaxMergeCheckpointer(PureCheckpointer):
    """Deliberately wrong: a merge resumes at the *maximum* of the merged buckets."""

    def read(self, bucket: int, factor: int) -> int | None:
        if self.stored is None or factor >= self.stored.factor:
            return super().read(bucket, factor)
        known = [o for o in self.stored.offsets[bucket::factor] if o is not None]
        return max(known) if known else None


Choose = Callable[[int, int], int]  # an integer in lo..hi (inclusive)


@dataclass
class Consumer:
    """A task reading key bucket ``bucket`` of ``factor`` of the partition: it resumes at the
    checkpoint (no checkpoint: the earliest offset, 0), reads on to a crash point, processing the
    messages of its bucket, and checkpoints a few positions on the way; its checkpoint writes may
    land late (after a rescale, as a stale writer of the old factor)."""

    factor: int
    bucket: int
    writes: list[int] = field(default_factory=list)
    started: bool = False

    def step(
        self, keys: Sequence[Key], store: Checkpointer, choose: Choose, drain: bool
    ) -> list[int]:
        """Run one step; returns the offsets processed in it."""
        if self.started:
            store.write(self.bucket, self.factor, self.writes.pop(0))
            return []
        self.started = True
        resume = store.read(self.bucket, self.factor) or 0
        stop = len(keys) if drain else choose(resume, len(keys))
        positions = {choose(resume, stop) for _ in range(choose(0, 3))}
        self.writes = sorted(positions | ({stop} if drain else set()))
        return [o for o in range(resume, stop) if key_bucket(keys[o], self.factor) == self.bucket]

    @property
    def done(self) -> bool:
        return self.started and not self.writes


def simulate(
    keys: Sequence[Key], factors: Sequence[int], store: Checkpointer, choose: Choose
) -> set[int]:
    """Run one consumer per bucket for each factor in turn (the last one drains the partition);
    each epoch ends at a random step, consumers that started and have writes left carry on into
    the next epoch as stale writers. Returns the offsets that were never processed."""
    processed: set[int] = set()
    stale: list[Consumer] = []
    for epoch, factor in enumerate(factors):
        drain = epoch == len(factors) - 1
        active = stale + [Consumer(factor, b) for b in range(factor)]
        budget = None if drain else choose(0, 4 * len(active))
        steps = 0
        while active and (budget is None or steps < budget):
            consumer = active[choose(0, len(active) - 1)]
            for offset in consumer.step(keys, store, choose, drain):
                assert key_bucket(keys[offset], consumer.factor) == consumer.bucket  # its own key
                processed.add(offset)
            if consumer.done:
                active.remove(consumer)
            steps += 1
        stale = [c for c in active if c.started]  # never started: it processed nothing
    return set(range(len(keys))) - processed


keys_st = st.lists(st.one_of(st.integers(0, 2**40), st.text(max_size=4)), max_size=80)
factor_runs = st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=7)


@given(keys_st, factor_runs, st.data())
def test_no_message_is_skipped_across_splits_merges_and_crashes(
    keys: list[Key], factors: list[int], data: st.DataObject
) -> None:
    def choose(lo: int, hi: int) -> int:
        return data.draw(st.integers(lo, hi))

    assert simulate(keys, factors, PureCheckpointer(), choose) == set()


def test_the_model_catches_a_merge_that_skips() -> None:
    """The model has teeth: resuming a merge at the maximum skips messages, and it notices."""
    skipped = 0
    for seed in range(200):
        rng = random.Random(seed)
        keys = [rng.randrange(2**32) for _ in range(60)]
        factors = [rng.choice([2, 4, 8]), 1]
        skipped += bool(simulate(keys, factors, MaxMergeCheckpointer(), rng.randint))
        assert simulate(keys, factors, PureCheckpointer(), random.Random(seed).randint) == set()
    assert skipped > 20
