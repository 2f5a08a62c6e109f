""":class:`ObjectSpace`: one task's state, key groups of persisted objects checkpointed
differentially; rescaling (extract, drop, merge) and a serialized local copy.

The checkpoint and load algorithms live in :mod:`.checkpointer` and :mod:`.loader`; this module
holds the space and its key groups. Imports the package's other modules only: a key's key group
is the caller's (``affinity_pipeline.objectspace`` adds :func:`groupers.keygroups.key_group`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from locality.spark.state.objectspace.checkpointer import CheckpointReport, checkpoint_groups
from locality.spark.state.objectspace.compaction import CompactionPolicy
from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    ObjectSpaceError,
    check_batch,
    dumps,
    int_field,
    parse,
    positive_int,
)
from locality.spark.state.objectspace.fileformat import garbage, scan
from locality.spark.state.objectspace.keygroup import KeyGroup
from locality.spark.state.objectspace.loader import LoadReport, load_groups
from locality.spark.state.objectspace.storage import CheckpointStorage

__all__ = ["ObjectSpace", "ranges_text"]

_SNAPSHOT_TYPE = "affinity-objectspace"
_SNAPSHOT_VERSION = 1


class ObjectSpace:
    """One task's state: key groups of persisted objects, checkpointed differentially.

    ``ObjectSpace(max_parallelism, key_groups, storage=...)`` starts *new* (empty) key groups:
    their first checkpoint fails if the storage already holds files for them (load those with
    :meth:`load` instead).
    """

    def __init__(
        self,
        max_parallelism: int,
        key_groups: Iterable[int] = (),
        *,
        storage: CheckpointStorage | None = None,
        policy: CompactionPolicy | None = None,
    ) -> None:
        self._max_parallelism = positive_int(max_parallelism, "max_parallelism")
        self._storage = storage
        self._policy = policy if policy is not None else CompactionPolicy()
        self._groups: dict[int, KeyGroup] = {}
        for group in self._check_groups(key_groups):
            if group in self._groups:
                raise ObjectSpaceError(f"key group {group} is listed twice")
            self._groups[group] = KeyGroup(group)

    # -- basics --
    @property
    def max_parallelism(self) -> int:
        return self._max_parallelism

    @property
    def storage(self) -> CheckpointStorage | None:
        return self._storage

    @property
    def policy(self) -> CompactionPolicy:
        return self._policy

    @property
    def key_groups(self) -> tuple[int, ...]:
        return tuple(sorted(self._groups))

    def __contains__(self, key_group: object) -> bool:
        return key_group in self._groups

    def __len__(self) -> int:
        return len(self._groups)

    def _check_group(self, group: object) -> int:
        if isinstance(group, bool) or not isinstance(group, int):
            raise TypeError(f"a key group must be an int, got {group!r}")
        if not 0 <= group < self._max_parallelism:
            raise ValueError(
                f"key group {group} is out of range [0, {self._max_parallelism}) "
                f"(max_parallelism {self._max_parallelism})"
            )
        return group

    def _check_groups(self, groups: Iterable[int]) -> list[int]:
        return [self._check_group(g) for g in groups]

    def group(self, key_group: int) -> KeyGroup:
        """The key group ``key_group`` (it must be one of this space's)."""
        self._check_group(key_group)
        try:
            return self._groups[key_group]
        except KeyError:
            raise ObjectSpaceError(
                f"key group {key_group} is not in this object space ({ranges_text(self._groups)})"
            ) from None

    def batches(self) -> dict[int, int]:
        """Key group -> the batch of its last checkpoint (-1: none)."""
        return {g: self._groups[g].batch for g in sorted(self._groups)}

    def dirty_key_groups(self) -> list[int]:
        return sorted(g for g, group in self._groups.items() if group._dirty)

    def snapshot(self) -> dict[int, dict[str, dict[str, JSON]]]:
        """Key group -> :meth:`KeyGroup.snapshot` (for inspection and comparisons)."""
        return {g: self._groups[g].snapshot() for g in sorted(self._groups)}

    # -- checkpoint --
    def checkpoint(self, batch: int, *, tag: str | None = None) -> CheckpointReport:
        """Write one file for each dirty key group (a delta, or a base if the policy says so),
        after deleting files abandoned by an ``upto_batch`` load; see the module docstring.

        If writing raises, the key groups written so far are committed and clean, the others
        still dirty. If the failure was before the file was published (the usual case: the
        storage raised while writing), calling ``checkpoint(batch)`` again finishes the job; if
        the file may have been published, the retry fails with ``FileExistsError`` rather than
        forking the chain: reload the key groups (:meth:`load`) instead.

        ``tag`` (an attempt's token, lowercase letters and digits): a *tagged* checkpoint of one
        attempt of a batch: its files carry the batch and the tag in their names and link to the
        file they follow, so attempts of one batch never touch each other's files, and it deletes
        nothing (:meth:`collect_garbage` does, once a commit decided); :meth:`heads` then names
        each key group's newest file, for the commit record.
        """
        batch = check_batch(batch)
        storage = self._storage
        if storage is None:
            raise ObjectSpaceError("this object space has no storage (pass storage=...)")
        groups = [self._groups[g] for g in sorted(self._groups)]
        if tag is not None and not (tag.isascii() and tag.isalnum() and tag == tag.lower()):
            raise ValueError(f"a checkpoint tag must be lowercase letters and digits, got {tag!r}")
        return checkpoint_groups(
            storage, groups, batch, self._policy, self._max_parallelism, tag=tag
        )

    def heads(self) -> dict[int, str]:
        """Key group -> the newest file of its chain (key groups never checkpointed: none)."""
        return {g: k._chain.files[-1] for g, k in sorted(self._groups.items()) if k._chain.files}

    def collect_garbage(self, decided_upto: int, *storages: CheckpointStorage) -> int:
        """Delete, in each key group's folder on ``storages`` (default: this space's storage),
        the tagged files no commit needs: written for a batch at or before ``decided_upto`` (the
        commit this space was loaded at decided every such batch) and not on the key group's
        chain here (:func:`.fileformat.garbage`). Files of later batches are left: an attempt of
        a later batch may still be running. Returns how many files were deleted."""
        targets = storages or ((self._storage,) if self._storage is not None else ())
        deleted = 0
        for g, group in sorted(self._groups.items()):
            keep = set(group._chain.files)
            for storage in targets:
                for name in garbage(storage.list_files(g), keep, decided_upto):
                    storage.delete_file(g, name)
                    deleted += 1
        return deleted

    # -- load --
    @classmethod
    def load(
        cls,
        storage: CheckpointStorage,
        key_groups: Iterable[int],
        *,
        max_parallelism: int,
        upto_batch: int | None = None,
        policy: CompactionPolicy | None = None,
        heads: Mapping[int, str] | None = None,
    ) -> tuple[ObjectSpace, LoadReport]:
        """Load exactly ``key_groups`` from ``storage`` (a key group without files is empty);
        reads nothing of any other key group. ``upto_batch``: the state at that batch (a
        committed batch; -1: before any), ignoring later checkpoints (they are deleted at the
        next checkpoint). ``heads`` (instead): each key group's chain is the one ending at the
        file named there (a commit's :meth:`heads`; a key group not named is empty), whatever
        else its folder holds.
        """
        if heads is not None and upto_batch is not None:
            raise ValueError("give upto_batch or heads, not both")
        space = cls(max_parallelism, storage=storage, policy=policy)
        groups = sorted(set(space._check_groups(key_groups)))
        if upto_batch is not None and (
            isinstance(upto_batch, bool) or not isinstance(upto_batch, int) or upto_batch < -1
        ):
            raise ValueError(f"upto_batch must be an integer >= -1, got {upto_batch!r}")
        loaded, report = load_groups(storage, groups, max_parallelism, upto_batch, heads)
        space._groups.update(loaded)
        return space, report

    # -- a local copy on other storage --
    def attach(self, storage: CheckpointStorage) -> None:
        """Write future checkpoints to ``storage`` (a space loaded from a local copy of the
        files, attached to the durable storage those files were copied from)."""
        self._storage = storage

    def abandoned(self) -> dict[int, list[str]]:
        """Key group -> the files past its loaded position (deleted before its next write)."""
        return {g: list(k._chain.abandoned) for g, k in sorted(self._groups.items())}

    def adopt_abandoned(self) -> int:
        """List this space's key groups on its storage and mark every file past a key group's
        position as abandoned (deleted, newest first, before its next write): files another
        attempt wrote after the state this space holds (a space from a local copy has not seen
        them). Reads no file; returns how many it marked."""
        storage = self._storage
        if storage is None:
            raise ObjectSpaceError("this object space has no storage (pass storage=...)")
        marked = 0
        for g in sorted(self._groups):
            chain = self._groups[g]._chain
            bases, deltas = scan(storage, g)
            every = {**bases, **deltas}
            later = sorted((s for s in every if s >= chain.next_seq), reverse=True)
            chain.abandoned = [every[s] for s in later]
            chain.known = chain.known or bool(every)
            marked += len(later)
        return marked

    # -- rescaling --
    def extract(self, key_groups: Iterable[int]) -> ObjectSpace:
        """Move ``key_groups`` (state, dirty tracking, chain positions) to a new space."""
        groups = sorted(set(self._check_groups(key_groups)))
        missing = [g for g in groups if g not in self._groups]
        if missing:
            raise ObjectSpaceError(
                f"key groups {missing} are not in this object space ({ranges_text(self._groups)})"
            )
        other = type(self)(self._max_parallelism, storage=self._storage, policy=self._policy)
        for g in groups:
            other._groups[g] = self._groups.pop(g)
        return other

    def drop(self, key_groups: Iterable[int]) -> None:
        """Forget ``key_groups`` (changes not checkpointed are lost; their handles stop
        working). Missing key groups are ignored."""
        for g in set(self._check_groups(key_groups)):
            group = self._groups.pop(g, None)
            if group is not None:
                group._detach()

    def merge(self, other: ObjectSpace) -> None:
        """Move every key group of ``other`` into this space (``other`` ends up empty)."""
        if other is self:
            raise ObjectSpaceError("cannot merge an object space with itself")
        if other._max_parallelism != self._max_parallelism:
            raise ObjectSpaceError(
                f"cannot merge an object space with max_parallelism {other._max_parallelism} "
                f"into one with {self._max_parallelism}"
            )
        if (
            self._storage is not None
            and other._storage is not None
            and other._storage is not self._storage
            and other._storage != self._storage
        ):
            raise ObjectSpaceError(
                f"cannot merge object spaces of different storages "
                f"({self._storage!r}, {other._storage!r})"
            )
        overlap = sorted(set(self._groups) & set(other._groups))
        if overlap:
            raise ObjectSpaceError(f"both object spaces hold key groups {overlap}")
        if self._storage is None:
            self._storage = other._storage
        self._groups.update(other._groups)
        other._groups = {}

    # -- serialization (a local copy) --
    def to_bytes(self) -> bytes:
        """The whole space: state, dirty tracking and chain positions (not the storage)."""
        return dumps(
            {
                "type": _SNAPSHOT_TYPE,
                "version": _SNAPSHOT_VERSION,
                "max_parallelism": self._max_parallelism,
                "policy": {
                    "delta_ratio": self._policy.delta_ratio,
                    "max_deltas": self._policy.max_deltas,
                },
                "groups": [self._groups[g]._to_json() for g in sorted(self._groups)],
            }
        )

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        storage: CheckpointStorage | None = None,
        location: str = "object space snapshot",
    ) -> ObjectSpace:
        """The space :meth:`to_bytes` wrote, attached to ``storage``."""
        document = parse(data, location)
        if document.get("type") != _SNAPSHOT_TYPE or document.get("version") != _SNAPSHOT_VERSION:
            raise CorruptCheckpointError(
                location, f"not a version {_SNAPSHOT_VERSION} {_SNAPSHOT_TYPE} snapshot"
            )
        max_parallelism = int_field(document, "max_parallelism", location, minimum=1)
        policy_doc = document.get("policy")
        if not isinstance(policy_doc, dict):
            raise CorruptCheckpointError(location, "field 'policy' must be a JSON object")
        try:
            policy = CompactionPolicy(
                delta_ratio=policy_doc.get("delta_ratio", 1.0),
                max_deltas=policy_doc.get("max_deltas"),
            )
        except ValueError as exc:
            raise CorruptCheckpointError(location, str(exc)) from None
        space = cls(max_parallelism, storage=storage, policy=policy)
        groups = document.get("groups")
        if not isinstance(groups, list):
            raise CorruptCheckpointError(location, "field 'groups' must be a list")
        for group_doc in groups:
            group = KeyGroup._from_json(group_doc, max_parallelism, location)
            if group.key_group in space._groups:
                raise CorruptCheckpointError(location, f"key group {group.key_group} twice")
            space._groups[group.key_group] = group
        return space

    def __repr__(self) -> str:
        return (
            f"ObjectSpace(max_parallelism={self._max_parallelism}, "
            f"key_groups={ranges_text(self._groups)}, dirty={self.dirty_key_groups()})"
        )


def ranges_text(groups: Iterable[int]) -> str:
    """``0-3, 7, 9-10`` (or ``none``)."""
    ordered = sorted(groups)
    if not ordered:
        return "none"
    parts: list[str] = []
    start = prev = ordered[0]
    for g in [*ordered[1:], None]:
        if g is not None and g == prev + 1:
            prev = g
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if g is not None:
            start = prev = g
    return ", ".join(parts)
