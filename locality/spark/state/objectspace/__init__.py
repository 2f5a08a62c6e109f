"""Differential checkpoints of a task's state: a persisted object space, keyed by key group.

Theory of operation
===================

The state of one task is an :class:`ObjectSpace`: a set of **key groups** (ints in
``[0, max_parallelism)``, Flink's atomic unit of keyed state; a key's group is
:func:`groupers.keygroups.key_group`), and in each key group a few **named persisted objects**
(Nuqleon's operator local storage): a :class:`PersistedValue` (one JSON value), a
:class:`PersistedList` (a list of JSON values) or a :class:`PersistedMap` (``str`` -> JSON
value). JSON values are ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` and
``dict`` with ``str`` keys; anything else is refused when it is stored, with the place named.

Dirty tracking
--------------
Every mutation records, in the object, what it changed since the last checkpoint of its key
group, and the name of the object in its key group's dirty set:

- a value: replaced (the whole value is written);
- a map: the set of keys set or deleted (each is written as its new value or as a deletion);
- a list: ``low``, the smallest length the list had since the checkpoint (``pop``, ``insert``
  and ``clear`` lower it; ``append`` and ``extend`` do not), and the indices below ``low``
  that were assigned. The delta is "truncate to ``low``, assign those indices, append
  ``items[low:]``", so appending ``k`` items writes ``k`` items, however long the list;
- an object created (or replaced: deleted and created again) since the checkpoint is written in
  full, an object deleted is written as a deletion (``null``).

Stored values are not copied: a value must not be mutated in place after it was stored (store
a new one, or call ``touch`` to mark it changed). A key group with an empty dirty set is
**clean**: a checkpoint writes nothing for it.

On-disk format (:class:`CheckpointStorage`; :class:`DirectoryStorage` is the filesystem one)
------------------------------------------------------------------------------------------
Checkpoints are keyed by **key group, not by task instance** (Heron's storage proposal): each
key group has its own folder and its own chain of files, numbered by a per-key-group sequence
number ``seq`` (0, 1, 2, ... for every file written, whatever its kind)::

    <root>/kg-<group:05d>/base-<seq:08d>.json     the full state of the key group
    <root>/kg-<group:05d>/delta-<seq:08d>.json    the changes since file seq - 1

All files are compact JSON objects (keys sorted)::

    base:  {"type": "base", "key_group": g, "seq": s, "batch": b, "max_parallelism": m,
            "objects": {name: FULL, ...}}
    delta: {"type": "delta", "key_group": g, "seq": s, "base": <seq of its base>, "batch": b,
            "objects": {name: FULL | PATCH | null, ...}}
    FULL:  {"kind": "value", "data": v} | {"kind": "list", "data": [...]}
           | {"kind": "map", "data": {...}}
    PATCH: {"kind": "map", "patch": {"set": {k: v, ...}, "del": [k, ...]}}
           | {"kind": "list", "patch": {"from": low, "tail": [...], "set": [[i, v], ...]}}

(empty ``set``/``del``/``tail`` members are left out). ``batch`` is the batch (or input offset)
the checkpoint covers; it strictly increases along a key group's chain. A *generation* is a
base and the deltas that follow it (``base`` = the base's seq, consecutive seqs).

Checkpoint (:meth:`ObjectSpace.checkpoint`)
-------------------------------------------
For each key group, in order: if it is dirty, write **one** file, then mark it clean:

- a delta holding only the dirty objects (a map's changed entries, a list's changed range...);
- or, when the compaction policy says so (or the key group has no base yet), a new base holding
  the whole key group instead of the delta.

A file is **created** atomically and never overwritten (:meth:`DirectoryStorage.create_file`
writes a temporary ``.<name>.*.tmp`` file, fsyncs it and publishes it with ``link``, which fails
if the name exists; a second writer of the same key group therefore fails instead of silently
forking the chain, and if it wrote the other kind of file for the same seq, loaders refuse the
key group: two files with one seq). A torn write leaves only a temporary file, which loaders
ignore (and nothing deletes: a crash can leave a few behind).

Compaction policy (:class:`CompactionPolicy`)
---------------------------------------------
Let ``B`` be the size of the current base and ``C`` the bytes of its deltas *including the one
about to be written*. The checkpoint writes a new base instead of that delta when
``C > delta_ratio * B`` (default ``delta_ratio = 1``: "the deltas outgrew the base"), or, if
``max_deltas`` is set, when the generation would hold more than ``max_deltas`` deltas.

Amortized cost, size rule alone. Call the bytes a pure delta would have written the *changes*
(:attr:`CheckpointReport.delta_bytes`). A generation ends when its changes ``C`` exceed
``r * B`` (``r = delta_ratio``); the new base is at most ``B + C`` (the state grew at most by what
the deltas wrote), so the generation wrote at most ``C + B + C < (2 + 1/r) * C``: the total bytes
written are at most ``(2 + 1/r)`` times the changes, plus the first base (3x for ``r = 1``), and a
load reads at most ``(1 + r) * B``. ``max_deltas`` bounds the number of files a load replays, at
the price of ``B / max_deltas`` amortized bytes per checkpoint of a changing key group (not
proportional to the changes when ``B`` is large: it is off by default).

Deletion: the files of a generation are deleted (base first, then its deltas in order) only at
the key group's *first checkpoint after* the one that superseded them, so the state before a
compaction stays loadable (``upto_batch``) until the next batch is checkpointed.

Load (:meth:`ObjectSpace.load`) and crash safety
------------------------------------------------
A load lists and reads the folders of the requested key groups only. Per key group: take the
newest base (with ``upto_batch``: the newest whose batch is ``<= upto_batch``), replay the deltas
with consecutive seqs after it (with ``upto_batch``: while their batch is ``<= upto_batch``).
Files of older generations are stale (deleted at the next checkpoint of the key group); files
past the loaded position are *abandoned* (a checkpoint that was not committed): the next
checkpoint of the space deletes them (newest first) before it writes anything for that key
group, dirty or not (until then, a load without ``upto_batch`` still sees them as the newest
state). A missing delta inside a chain, a delta of another base, a batch that does
not increase, a wrong key group or ``max_parallelism``, or unparseable JSON is an error naming
the file (:class:`CorruptCheckpointError`).

A key group's state on storage therefore only ever moves from one complete checkpoint to the
next: a crash in the middle of :meth:`ObjectSpace.checkpoint` leaves each key group either at
the new batch (its file was published) or at its previous checkpoint (it was not), never in
between; :attr:`LoadReport.batches` says which, per key group. A key group that was clean at
a checkpoint keeps the batch of its last write (its state at the later batch is the same). A
caller that commits batches (like the pipeline's driver) loads with
``upto_batch=<committed batch>`` (-1: none yet) and gets every key group exactly at the
committed batch, even if a later, uncommitted checkpoint was half written.

Attempts of one batch: tagged checkpoints
-----------------------------------------
A runtime where one batch can be checkpointed by several attempts at once (Spark's speculation,
zombie stage attempts) checkpoints with ``tag`` (the attempt's token): each file is named
``<kind>-<seq:08d>-<batch>-<tag>.json`` and a delta names the file it follows (``prev``), so
attempts never write one name and nothing is deleted by a checkpoint. The commit that decides
records :meth:`ObjectSpace.heads` (each key group's newest file); a load with ``heads`` follows
each chain back from its head and reads no other file; :meth:`ObjectSpace.collect_garbage`
deletes, once a later commit decided their batches, the files that lost (and generations a
compaction superseded), never a file of a batch that may still be open.

Rescaling
---------
A key group's chain does not depend on which task wrote it, so whoever owns a key group next
just continues its chain. After a split (8 -> 16 tasks) a task owns a subset of its parent's key
groups: load them (reading nothing else), or take them from a local copy with
:meth:`ObjectSpace.extract` (and :meth:`ObjectSpace.drop` the rest). After a merge (16 -> 8) a
task owns the union of two: :meth:`ObjectSpace.merge`. Dirty tracking and chain positions travel
with the key groups. :meth:`ObjectSpace.to_bytes` / :meth:`ObjectSpace.from_bytes` serialize a
whole space (state, dirty tracking and chain positions), e.g. for a local copy.

One writer per key group (the coordinator's job); an object space is not thread-safe.

Modules
-------
``encoding`` (JSON values, errors), ``objects`` / ``lists`` / ``maps`` (the persisted objects and
their dirty tracking), ``chain`` (a key group's position on storage), ``keygroup``, ``storage``,
``fileformat`` (file names and documents), ``compaction`` (the policy), ``checkpointer`` and
``loader`` (the two algorithms), ``space`` (:class:`ObjectSpace`). Dependencies point one way, in
that order; nothing outside the package is imported (the package runs on Spark executors:
standard library only). A key's key group is the caller's to compute:
``affinity_pipeline.objectspace.ObjectSpace`` adds ``key_group_of`` / ``group_for_key`` with
:func:`groupers.keygroups.key_group`; ``locality.spark.state`` gets it from the driver with each
row group.
"""

from __future__ import annotations

from locality.spark.state.objectspace.checkpointer import CheckpointReport
from locality.spark.state.objectspace.compaction import CompactionPolicy
from locality.spark.state.objectspace.encoding import (
    JSON,
    CorruptCheckpointError,
    ObjectKind,
    ObjectSpaceError,
)
from locality.spark.state.objectspace.keygroup import KeyGroup
from locality.spark.state.objectspace.lists import PersistedList
from locality.spark.state.objectspace.loader import LoadReport
from locality.spark.state.objectspace.maps import PersistedMap
from locality.spark.state.objectspace.objects import PersistedValue
from locality.spark.state.objectspace.space import ObjectSpace
from locality.spark.state.objectspace.storage import (
    CheckpointStorage,
    DirectoryStorage,
    MemoryStorage,
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
