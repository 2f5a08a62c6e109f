"""The reference pipeline's object space: :mod:`locality.spark.state.objectspace` (the product's
differential checkpoints keyed by key group, documented there), with a key's key group.

The product package imports nothing outside the standard library (it runs on Spark executors
and ``locality`` may not import ``groupers``), so :class:`ObjectSpace` here adds
:meth:`~ObjectSpace.key_group_of` and :meth:`~ObjectSpace.group_for_key` with
:func:`groupers.keygroups.key_group`. Everything else is re-exported unchanged.
"""

from __future__ import annotations

from groupers.keygroups import key_group as _key_group_of_key
from groupers.keys import Key
from locality.spark.state import objectspace as _product
from locality.spark.state.objectspace import (
    JSON,
    CheckpointReport,
    CheckpointStorage,
    CompactionPolicy,
    CorruptCheckpointError,
    DirectoryStorage,
    KeyGroup,
    LoadReport,
    MemoryStorage,
    ObjectKind,
    ObjectSpaceError,
    PersistedList,
    PersistedMap,
    PersistedValue,
)

__all__ = [
    "JSON",
    "CheckpointReport",
    "CheckpointStorage",
    "CompactionPolicy",
    "CorruptCheckpointError",
    "DirectoryStorage",
    "KeyGroup",
    "LoadReport",
    "MemoryStorage",
    "ObjectKind",
    "ObjectSpace",
    "ObjectSpaceError",
    "PersistedList",
    "PersistedMap",
    "PersistedValue",
]


class ObjectSpace(_product.ObjectSpace):
    """:class:`locality.spark.state.objectspace.ObjectSpace` with a key's key group."""

    def key_group_of(self, key: Key) -> int:
        """``key``'s key group (:func:`groupers.keygroups.key_group`)."""
        return _key_group_of_key(key, self.max_parallelism)

    def group_for_key(self, key: Key) -> KeyGroup:
        return self.group(self.key_group_of(key))
