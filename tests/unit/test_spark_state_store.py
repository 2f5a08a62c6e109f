"""The executor-side keyed state store of ``stateful_foreach_batch`` (locality.spark.state):
local copies used only when they match the latest commit, restores counted, replays from the
batch before, crashes mid-checkpoint, timeouts and clear errors; a hypothesis state machine
drives batches, replays, crashes, lost workers and lost hosts against a model."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from locality.spark.state import (
    NO_TIMEOUT,
    PROCESSING_TIME_TIMEOUT,
    CommitRecord,
    DirectoryStateStorage,
    KeyState,
    QuerySpec,
    SchemaError,
    StatefulFunctionError,
    StoreSpec,
    TaskBatch,
    TaskOutcome,
    forget_memory,
    latest_commit,
    local_root,
    parse_schema,
    run_task_batch,
    write_commit,
    write_pending,
)
from locality.spark.state.standby import StandbyWork, refresh_standby

MAXP = 8
TASKS = {"t0": (0, 2, 4, 6), "t1": (1, 3, 5, 7)}
HOSTS = ("h1", "h2", "h3")  # the state machine's; h3 often only holds standby copies


class InjectedCrash(Exception):
    """A simulated crash while checkpointing."""


class CrashingStorage(DirectoryStateStorage):
    """Raises :class:`InjectedCrash` at the n-th file creation (``budget``; None: never)."""

    budget: int | None = None

    def create_file(self, key_group: int, name: str, data: bytes) -> None:
        if CrashingStorage.budget is not None:
            if CrashingStorage.budget <= 0:
                raise InjectedCrash(name)
            CrashingStorage.budget -= 1
        super().create_file(key_group, name, data)


def count_clicks(
    key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState
) -> Iterator[pd.DataFrame]:
    """An applyInPandasWithState function: running sum per key; reset past 40."""
    total = state.get[0] if state.exists else 0
    for pdf in pdfs:
        total += int(pdf["v"].sum())
    if state.hasTimedOut:
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "n": [-1]})
        return
    if total > 40:
        state.remove()
    else:
        state.update((total,))
        if state._timeout_conf == PROCESSING_TIME_TIMEOUT:
            state.setTimeoutDuration(1000)
    yield pd.DataFrame({"k": [key[0]], "n": [total]})


def group_of(key: int) -> int:
    return key % MAXP


def query(root: Path, *, timeout: str = NO_TIMEOUT, func: Any = count_clicks) -> QuerySpec:
    store = StoreSpec(
        CrashingStorage(root / "durable", fsync=False), str(root / "local"), "q-1", MAXP
    )
    return QuerySpec(
        func=func,
        key_columns=("k",),
        output_columns=("k", "n"),
        state_fields=parse_schema("n long", "state_schema"),
        timeout=timeout,
        store=store,
    )


def task_rows(
    task: str, updates: dict[int, int]
) -> tuple[tuple[int, tuple[Any, ...], pd.DataFrame], ...]:
    return tuple(
        (group_of(k), (k,), pd.DataFrame({"k": [k], "v": [v]}))
        for k, v in sorted(updates.items())
        if group_of(k) in TASKS[task]
    )


def run_batch(
    spec: QuerySpec, batch: int, updates: dict[int, int], hosts: dict[str, str], time_ms: int = 0
) -> dict[str, TaskOutcome]:
    """The driver's part, in miniature: start from the latest commit before ``batch``, run every
    task, commit."""
    storage = spec.store.storage
    start = latest_commit(storage, before=batch)
    time_ms = write_pending(storage, batch, time_ms)
    outcomes = {}
    for task, groups in TASKS.items():
        work = TaskBatch(
            task=task,
            batch=batch,
            start_batch=start.batch if start else -1,
            token=start.tokens.get(task) if start else None,
            key_groups=groups,
            batch_time_ms=time_ms,
            rows=task_rows(task, updates),
            heads=start.heads if start else {},
        )
        outcomes[task] = run_task_batch(spec, work, hosts[task])
    for name in storage.list_records():  # the pointer moves: a replayed batch's record replaced
        if name.startswith("commit-") and int(name.split("-")[1]) >= batch:
            storage.delete_record(name)
    write_commit(storage, CommitRecord.of(batch, outcomes, MAXP, start))
    return outcomes


def output_of(outcomes: dict[str, TaskOutcome]) -> list[tuple[int, int]]:
    frames = [o.output for o in outcomes.values() if len(o.output)]
    if not frames:
        return []
    rows = pd.concat(frames, ignore_index=True)
    return sorted((int(k), int(n)) for k, n in zip(rows["k"], rows["n"], strict=True))


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    forget_memory()
    CrashingStorage.budget = None
    yield
    forget_memory()
    CrashingStorage.budget = None


def test_warm_in_memory_then_local_then_restored_elsewhere(tmp_path: Path) -> None:
    spec = query(tmp_path)
    hosts = {"t0": "h1", "t1": "h2"}
    first = run_batch(spec, 0, {k: 1 for k in range(16)}, hosts)
    assert {o.source for o in first.values()} == {"new"}
    second = run_batch(spec, 1, {k: 2 for k in range(16)}, hosts)
    assert {o.source for o in second.values()} == {"memory"}
    forget_memory()  # a new Python worker / executor JVM on the same host
    third = run_batch(spec, 2, {k: 3 for k in range(16)}, hosts)
    assert {o.source for o in third.values()} == {"local"}
    assert all(o.bytes_restored == 0 and o.bytes_local > 0 for o in third.values())
    moved = run_batch(spec, 3, {k: 1 for k in range(16)}, {"t0": "h2", "t1": "h2"})
    assert moved["t0"].source == "restored" and moved["t0"].bytes_restored > 0
    assert moved["t1"].source == "memory"
    assert output_of(moved) == [(k, 7) for k in range(16)]


def test_stale_local_copy_is_not_used(tmp_path: Path) -> None:
    """t0 runs on h1, then on h2 (state moves on), then back on h1: h1's copy is older than the
    latest commit, so the task restores."""
    spec = query(tmp_path)
    run_batch(spec, 0, {0: 1}, {"t0": "h1", "t1": "h1"})
    run_batch(spec, 1, {0: 5}, {"t0": "h2", "t1": "h1"})
    back = run_batch(spec, 2, {0: 1}, {"t0": "h1", "t1": "h1"})
    assert back["t0"].source == "restored"
    assert output_of(back) == [(0, 7)]


def test_replayed_batch_starts_from_the_batch_before(tmp_path: Path) -> None:
    spec = query(tmp_path)
    hosts = {"t0": "h1", "t1": "h2"}
    run_batch(spec, 0, {k: 1 for k in range(8)}, hosts)
    once = run_batch(spec, 1, {k: 4 for k in range(8)}, hosts)
    again = run_batch(spec, 1, {k: 4 for k in range(8)}, hosts)  # Spark re-runs batch 1
    assert output_of(again) == output_of(once) == [(k, 5) for k in range(8)]
    assert {o.source for o in again.values()} == {"local"}  # the copy still holds batch 0
    after = run_batch(spec, 2, {k: 1 for k in range(8)}, hosts)
    assert output_of(after) == [(k, 6) for k in range(8)]
    assert {o.source for o in after.values()} == {"memory"}


def test_crash_mid_checkpoint_then_retry_on_the_same_host_is_warm(tmp_path: Path) -> None:
    spec = query(tmp_path)
    hosts = {"t0": "h1", "t1": "h1"}
    run_batch(spec, 0, {k: 1 for k in range(16)}, hosts)
    CrashingStorage.budget = 2  # two key groups of t0 written, then the crash
    with pytest.raises(InjectedCrash):
        run_batch(spec, 1, {k: 2 for k in range(16)}, hosts)
    CrashingStorage.budget = None
    forget_memory()
    retry = run_batch(spec, 1, {k: 2 for k in range(16)}, hosts)
    assert {o.source for o in retry.values()} == {"local"}
    assert output_of(retry) == [(k, 3) for k in range(16)]
    forget_memory()
    shutil.rmtree(tmp_path / "local")  # the host is gone: restore everything
    later = run_batch(spec, 2, {k: 1 for k in range(16)}, hosts)
    assert {o.source for o in later.values()} == {"restored"}
    assert output_of(later) == [(k, 4) for k in range(16)]


def test_processing_time_timeouts(tmp_path: Path) -> None:
    spec = query(tmp_path, timeout=PROCESSING_TIME_TIMEOUT)
    hosts = {"t0": "h1", "t1": "h1"}
    assert output_of(run_batch(spec, 0, {0: 1, 1: 1}, hosts, time_ms=0)) == [(0, 1), (1, 1)]
    assert output_of(run_batch(spec, 1, {1: 1}, hosts, time_ms=600)) == [(1, 2)]
    out = run_batch(spec, 2, {2: 1}, hosts, time_ms=1200)  # key 0 expired at 1000, key 1 at 1600
    assert output_of(out) == [(0, -1), (2, 1)]
    assert sum(o.timed_out for o in out.values()) == 1
    assert output_of(run_batch(spec, 3, {0: 3}, hosts, time_ms=1300)) == [(0, 3)]  # state gone


def test_replayed_batch_keeps_its_processing_time(tmp_path: Path) -> None:
    storage = DirectoryStateStorage(tmp_path)
    assert write_pending(storage, 4, 1000) == 1000
    assert write_pending(storage, 4, 9999) == 1000


def test_a_function_that_raises_fails_the_task_and_commits_nothing(tmp_path: Path) -> None:
    def boom(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState
    ) -> Iterator[pd.DataFrame]:
        if key == (3,):
            raise ZeroDivisionError("bad key")
        yield from count_clicks(key, pdfs, state)

    good = query(tmp_path)
    run_batch(good, 0, {k: 1 for k in range(8)}, {"t0": "h1", "t1": "h1"})
    with pytest.raises(
        StatefulFunctionError,
        match=r"key \(3,\): the stateful function raised ZeroDivisionError: bad key",
    ):
        run_batch(query(tmp_path, func=boom), 1, {k: 1 for k in range(8)}, {"t0": "h1", "t1": "h1"})
    assert latest_commit(good.store.storage).batch == 0  # type: ignore[union-attr]
    assert output_of(run_batch(good, 1, {k: 1 for k in range(8)}, {"t0": "h1", "t1": "h1"})) == [
        (k, 2) for k in range(8)
    ]


def test_a_state_that_does_not_fit_the_schema_is_named(tmp_path: Path) -> None:
    def wrong(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState
    ) -> Iterator[pd.DataFrame]:
        state.update(("many",))
        yield pd.DataFrame({"k": [key[0]], "n": [0]})

    with pytest.raises(StatefulFunctionError, match="field 'n' is long, got str 'many'"):
        run_batch(query(tmp_path, func=wrong), 0, {1: 1}, {"t0": "h1", "t1": "h1"})


def test_output_without_the_schema_columns_is_named(tmp_path: Path) -> None:
    def wrong(
        key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: KeyState
    ) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"k": [key[0]]})

    with pytest.raises(
        StatefulFunctionError, match=r"without the output_schema column\(s\) \['n'\]"
    ):
        run_batch(query(tmp_path, func=wrong), 0, {1: 1}, {"t0": "h1", "t1": "h1"})


def test_schemas() -> None:
    fields = parse_schema("user string, clicks long, avg double, ok boolean", "state_schema")
    assert [(f.name, f.kind) for f in fields] == [
        ("user", "string"),
        ("clicks", "integer"),
        ("avg", "double"),
        ("ok", "boolean"),
    ]
    with pytest.raises(SchemaError, match="field 'at' has type 'timestamp'"):
        parse_schema("at timestamp", "state_schema")
    with pytest.raises(SchemaError, match="cannot parse 'clicks'"):
        parse_schema("clicks", "state_schema")
    state = KeyState(None, fields, batch_time_ms=0)
    with pytest.raises(ValueError, match="got 1 value"):
        state.update(("x",))
    with pytest.raises(RuntimeError, match="ProcessingTimeTimeout"):
        state.setTimeoutDuration(10)
    with pytest.raises(ValueError, match="does not exist"):
        _ = state.get


# -------------------------------------------------------------------------- state machine


@settings(max_examples=20, stateful_step_count=10, deadline=None)
class StoreMachine(RuleBasedStateMachine):
    """Batches on two hosts with crashes mid-checkpoint, replays of the last batch, lost Python
    workers and lost hosts. Every batch's output is the model's (a replay's is the first run's),
    and a task is warm exactly when its host still holds the state of the commit it starts from.
    """

    def __init__(self) -> None:
        super().__init__()
        forget_memory()
        CrashingStorage.budget = None
        self.root = Path(tempfile.mkdtemp(prefix="store-machine-"))
        self.spec = query(self.root)
        self.states: list[dict[int, int]] = []  # the model's state after each committed batch
        self.updates: list[dict[int, int]] = []
        self.outputs: list[list[tuple[int, int]]] = []
        self.holders: list[dict[str, str]] = []  # batch -> task -> host that ran it
        self.wiped: dict[str, int] = {"h1": -1, "h2": -1}  # host -> step it was lost at
        self.ran_at: list[int] = []  # batch -> step it was committed at
        self.step = 0
        # host -> task -> (batch, step) a standby refresh brought the host's copy to
        self.copies: dict[str, dict[str, tuple[int, int]]] = {}
        self.wiped["h3"] = -1

    def teardown(self) -> None:
        forget_memory()
        CrashingStorage.budget = None
        shutil.rmtree(self.root, ignore_errors=True)

    def _model(self, batch: int) -> tuple[dict[int, int], list[tuple[int, int]]]:
        state = dict(self.states[batch - 1]) if batch else {}
        out = []
        for k, v in sorted(self.updates[batch].items()):
            total = state.get(k, 0) + v
            if total > 40:
                state.pop(k, None)
            else:
                state[k] = total
            out.append((k, total))
        return state, out

    def _run(self, batch: int, hosts: tuple[str, str], crash: int | None) -> None:
        self.step += 1
        placement = dict(zip(TASKS, hosts, strict=True))
        CrashingStorage.budget = crash
        try:
            outcomes = run_batch(self.spec, batch, self.updates[batch], placement)
        except InjectedCrash:
            return
        finally:
            CrashingStorage.budget = None
        state, expected = self._model(batch)
        assert output_of(outcomes) == expected
        for task, outcome in outcomes.items():
            assert outcome.source == self._expected_source(batch, task, placement[task])
        replay = batch < len(self.outputs)
        for copies in self.copies.values():  # a copy refreshed to a batch that ran again
            for task in [t for t, (b, _) in copies.items() if replay and b >= batch]:
                del copies[task]
        del self.states[batch:], self.outputs[batch:], self.holders[batch:], self.ran_at[batch:]
        self.states.append(state)
        self.outputs.append(expected)
        self.holders.append(placement)
        self.ran_at.append(self.step)

    def _expected_source(self, batch: int, task: str, host: str) -> str:
        if batch == 0:
            return "new"
        start = batch - 1
        held = self.holders[start][task] == host and self.wiped[host] < self.ran_at[start]
        copy = self.copies.get(host, {}).get(task)
        refreshed = copy is not None and copy[0] == start and self.wiped[host] < copy[1]
        if copy is not None and batch < len(self.outputs) and not held:
            return _ANY  # a replay where a standby copy was refreshed: its earlier batch may stay
        return _WARM if held or refreshed else "restored"

    @rule(
        updates=st.dictionaries(st.integers(0, 15), st.integers(1, 9), min_size=1, max_size=8),
        hosts=st.tuples(st.sampled_from(HOSTS), st.sampled_from(HOSTS)),
        crash=st.none() | st.integers(0, 5),
    )
    def next_batch(
        self, updates: dict[int, int], hosts: tuple[str, str], crash: int | None
    ) -> None:
        del self.updates[len(self.outputs) :]
        self.updates.append(updates)
        self._run(len(self.outputs), hosts, crash)

    @rule(
        hosts=st.tuples(st.sampled_from(HOSTS), st.sampled_from(HOSTS)),
        crash=st.none() | st.integers(0, 5),
    )
    def replay_last_batch(self, hosts: tuple[str, str], crash: int | None) -> None:
        if self.outputs:
            self._run(len(self.outputs) - 1, hosts, crash)

    @rule(host=st.sampled_from(["h1", "h2", "h3"]))
    def refresh_standby_copies(self, host: str) -> None:
        """Bring ``host``'s copies of every task to the latest commit (the driver's standby
        stage after a commit)."""
        storage = self.spec.store.storage
        commit = latest_commit(storage)
        if commit is None:
            return
        self.step += 1
        before = latest_commit(storage, before=commit.batch)
        for task in TASKS:
            previous = (before.batch, before.tokens[task]) if before is not None else None
            work = StandbyWork(
                task, commit.batch, commit.tokens[task], commit.key_groups[task], previous
            )
            refresh_standby(self.spec.store, work, host)
            self.copies.setdefault(host, {})[task] = (commit.batch, self.step)

    @rule()
    def lose_worker(self) -> None:
        forget_memory()

    @rule(host=st.sampled_from(HOSTS))
    def lose_host(self, host: str) -> None:
        self.step += 1
        forget_memory()
        shutil.rmtree(local_root(self.spec.store, host), ignore_errors=True)
        self.wiped[host] = self.step

    @invariant()
    def the_latest_commit_is_the_models(self) -> None:
        commit = latest_commit(self.spec.store.storage)
        assert (commit.batch if commit else -1) == len(self.outputs) - 1


class _Warm(str):
    """Equal to either warm source."""

    def __eq__(self, other: object) -> bool:
        return other in ("memory", "local")

    def __hash__(self) -> int:
        return hash("warm")


_WARM = _Warm("warm")


class _Any(str):
    """Equal to warm or restored (not new)."""

    def __eq__(self, other: object) -> bool:
        return other in ("memory", "local", "restored")

    def __hash__(self) -> int:
        return hash("any")


_ANY = _Any("any")

TestStoreMachine = StoreMachine.TestCase


def test_the_store_imports_on_an_executor_without_the_coordinator() -> None:
    """No kazoo, structlog, groupers or coordinator on the executor's import path."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('kazoo', 'structlog', 'groupers', 'coordinator', 'metadata.zk'):\n"
        "    sys.modules[name] = None\n"
        "import locality.spark.state, locality.spark.state.runner\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
