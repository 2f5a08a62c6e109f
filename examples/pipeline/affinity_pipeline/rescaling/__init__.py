"""The reference pipeline, elastic: SEP-32 virtual tasks that split and merge while it runs.

The input is the same generated events (:func:`affinity_pipeline.events.generate_batch`) on
``partitions`` input partitions: a key's partition is ``crc32(key) mod partitions`` (the
producer's partitioner). Tasks are the virtual tasks of ``group-by-partition`` with an
elasticity factor ``f`` (``Partition p-b-f``; ``Partition p`` for ``f = 1``): task ``(p, b, f)``
runs the keys of partition ``p`` with ``key_bucket(key, f) == b``, filtered at run time
(:func:`split_events`).

**State** is kept per *slot*, ``p * M + key_group(key, M)`` (``M`` key groups per partition), in
an :class:`affinity_pipeline.objectspace.ObjectSpace` (a map ``key -> [count, sum]`` per slot).
For a power of two ``f <= M`` a key's bucket is its key group mod ``f``, so a slot lies wholly in
one task at every factor, and a rescaled task owns exactly a set of slots
(:func:`task_slots`): a split child a subset of its parent's, a merged task the union of its
parents'. Checkpoints are differential and keyed by slot (one shared
:class:`~affinity_pipeline.objectspace.DirectoryStorage` under ``<checkpoint_dir>/slots``), so
whoever owns a slot next continues its chain.

**Locality.** After each batch a task leaves a local copy of each of its slots at its location
(``<local_store_dir>/<location>/slots/slot-<n>``, the batch it is at and the slot's serialized
space). Running batch ``b``, a slot whose local copy is at ``b - 1`` is **warm**; any other slot is
**cold** and is loaded from the checkpoints at the committed batch (its bytes count as restored).

**Offsets** (``metadata.checkpoints``): after batch ``b`` every task's stream partition and key
bucket gets offset ``b + 1`` in ZooKeeper (``ZkMetadataStore.write_checkpoints``); before a batch
the driver reads each task's resume offset at the current factor (a split child inherits its
parent's, a merged task the minimum of its parents') and the task checks that it is the batch it
runs: in this lockstep pipeline they agree, so no event is skipped or counted twice.

**Placement**: the ``host-affinity`` grouper over the executors registered in ZooKeeper, with
the previous job model's tasks and stream partitions, so split children start where their
parent ran and a merged task goes where most of its parents' state is.

Modules: ``slots`` (slots and virtual tasks, pure), ``executor`` (the task function, run on
executors: no ZooKeeper client), ``driver`` (:class:`ElasticPipeline`); each imports only those
before it.
"""

from __future__ import annotations

from affinity_pipeline.rescaling.driver import ElasticBatch, ElasticPipeline
from affinity_pipeline.rescaling.executor import ElasticInput, SlotOutcome, process_elastic_task
from affinity_pipeline.rescaling.slots import (
    ElasticConfig,
    elastic_tasks,
    partition_of,
    slot_of,
    split_events,
    task_slots,
)

__all__ = [
    "ElasticBatch",
    "ElasticConfig",
    "ElasticInput",
    "ElasticPipeline",
    "SlotOutcome",
    "elastic_tasks",
    "partition_of",
    "process_elastic_task",
    "slot_of",
    "split_events",
    "task_slots",
]
