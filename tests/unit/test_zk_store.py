"""The store's deprecated names (``DEPRECATED_NAMES``) resolve to existing recipe members, and
``metadata.zk`` keeps exporting what it exported before the recipes became attributes."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

import metadata.zk
from metadata.model import BarrierState
from metadata.zk import ZkMetadataStore
from metadata.zk.store import DEPRECATED_NAMES

#: ``metadata.zk.__all__`` before the package split: every name must still be importable.
OLD_EXPORTS = (
    "DEFAULT_CHUNK_SIZE",
    "DONE",
    "NEW",
    "REQUEST_LIMIT",
    "TIMED_OUT",
    "CorruptDataError",
    "FencedOut",
    "JobLayout",
    "LeaderEpoch",
    "Manifest",
    "NodeExists",
    "NodeTooLarge",
    "NotFound",
    "PartitionCheckpoint",
    "PermissionDenied",
    "ProcessorRegistration",
    "SessionLost",
    "StoreUnavailable",
    "TransactionRejected",
    "VersionMismatch",
    "Watch",
    "WriteConflict",
    "ZkMetadataStore",
    "ZkStoreError",
    "connect",
    "job_acl",
    "SAFE_REQUEST_BYTES",
)

RECIPES = ("processors", "locality", "job_models", "barriers", "epochs", "checkpoints")


@pytest.fixture
def store() -> Iterator[ZkMetadataStore]:
    client = KazooClient(hosts="127.0.0.1:1")  # never started: nothing here talks to ZooKeeper
    store = ZkMetadataStore(client, "/affinity/clicks-1", run_id="r1")
    yield store
    store.close()


@pytest.mark.parametrize("old", sorted(DEPRECATED_NAMES))
def test_every_deprecated_name_resolves_to_a_recipe_member(
    store: ZkMetadataStore, old: str
) -> None:
    owner, member = DEPRECATED_NAMES[old].split(".")
    assert owner in (*RECIPES, "layout")
    assert old not in vars(ZkMetadataStore), f"{old} shadows the table"
    recipe = getattr(store, owner)
    found = inspect.getattr_static(type(recipe), member, None)  # a mixin's method too
    assert found is not None or member in type(recipe).__slots__
    if owner in RECIPES:
        assert inspect.isfunction(found), f"{owner}.{member} is no method"
    with pytest.warns(DeprecationWarning, match=f"store.{owner}.{member}"):
        resolved = getattr(store, old)
    assert resolved == getattr(recipe, member)


def test_unknown_names_are_still_attribute_errors(store: ZkMetadataStore) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="no_such_method"):
            store.no_such_method  # noqa: B018
        assert not hasattr(store, "read_job_models")


def test_recipes_are_attributes(store: ZkMetadataStore) -> None:
    assert [type(getattr(store, name)).__name__ for name in RECIPES] == [
        "ProcessorRegistry",
        "TaskLocalityStore",
        "JobModelStore",
        "Barriers",
        "LeaderEpochs",
        "CheckpointStore",
    ]
    assert store.election_path == "/affinity/clicks-1/leader/election"
    assert (store.ops, store.reads, store.transactions) == (0, 0, 0)


@pytest.mark.parametrize("name", OLD_EXPORTS)
def test_metadata_zk_keeps_its_exports(name: str) -> None:
    assert getattr(metadata.zk, name) is not None


def test_barrier_state_aliases_are_the_enum_members() -> None:
    assert metadata.zk.NEW is BarrierState.NEW
    assert metadata.zk.DONE is BarrierState.DONE
    assert metadata.zk.TIMED_OUT is BarrierState.TIMED_OUT
    assert [s.value for s in BarrierState] == ["NEW", "DONE", "TIMED_OUT"]
    assert BarrierState.DONE == "DONE"
    assert BarrierState("TIMED_OUT") is BarrierState.TIMED_OUT
