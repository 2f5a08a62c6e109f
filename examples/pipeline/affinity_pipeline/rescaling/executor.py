"""The executor side: one virtual task for one batch, its slots warm from the local copies or
cold from the checkpoints, then a differential checkpoint and fresh local copies.

Runs on executors: imports no ZooKeeper client (only ``locality.spark``'s executor helpers).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from affinity_pipeline.events import Output
from affinity_pipeline.objectspace import JSON, DirectoryStorage, ObjectSpace
from affinity_pipeline.rescaling.slots import ElasticConfig, slot_of
from locality.spark import (
    EXECUTOR_LOCATION_ENV,
    SparkExecutorLocationIdProvider,
    current_executor_id,
)

__all__ = ["ElasticInput", "SlotOutcome", "process_elastic_task"]


@dataclass(frozen=True)
class ElasticInput:
    config: ElasticConfig
    batch: int
    resume_offset: int
    factor: int
    slots: tuple[int, ...]
    events: tuple[tuple[str, int], ...]
    location_env: str = EXECUTOR_LOCATION_ENV


@dataclass(frozen=True)
class SlotOutcome:
    """What one task did in one batch."""

    task: str
    batch: int
    location: str
    executor_id: str | None
    outputs: tuple[Output, ...]
    warm_slots: tuple[int, ...]
    cold_slots: tuple[int, ...]
    bytes_restored: int
    checkpoint_bytes: int
    full_snapshot_bytes: int
    seconds: float


def _local_path(config: ElasticConfig, location: str, slot: int) -> Path:
    return Path(config.local_store_dir) / quote(location, safe="") / "slots" / f"slot-{slot:06d}"


def _read_local(path: Path) -> tuple[int, bytes] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header, _, body = data.partition(b"\n")
    return (int(header), body) if header.strip().lstrip(b"-").isdigit() else None


def _write_local(path: Path, batch: int, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(str(batch).encode() + b"\n" + data)
    tmp.replace(path)


def _pair(value: JSON) -> tuple[int, int]:
    if (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], int)
        and isinstance(value[1], int)
    ):
        return value[0], value[1]
    raise ValueError(f"a state entry should be [count, sum], got {value!r:.60}")


def process_elastic_task(task: str, payload: ElasticInput) -> SlotOutcome:
    """Run one virtual task for one batch (on an executor): its slots warm from the local
    copies or cold from the checkpoints, the events, a differential checkpoint, local copies."""
    start = time.perf_counter()
    config, batch = payload.config, payload.batch
    if payload.resume_offset != batch:
        raise RuntimeError(
            f"{task}: the checkpointed offset is {payload.resume_offset}, the batch is {batch}"
        )
    location = SparkExecutorLocationIdProvider(payload.location_env).location_id()
    storage = DirectoryStorage(Path(config.checkpoint_dir) / "slots", fsync=False)
    space, warm, cold, restored = _gather_slots(payload, location, storage)
    outputs = _count(space, payload.events, config)
    checkpoint = space.checkpoint(batch)
    full = len(json.dumps(space.snapshot(), separators=(",", ":")))
    for slot in payload.slots:
        _write_local(_local_path(config, location, slot), batch, space.extract([slot]).to_bytes())
    return SlotOutcome(
        task=task,
        batch=batch,
        location=location,
        executor_id=current_executor_id(),
        outputs=tuple(outputs),
        warm_slots=tuple(warm),
        cold_slots=tuple(cold),
        bytes_restored=restored,
        checkpoint_bytes=checkpoint.bytes_written,
        full_snapshot_bytes=full,
        seconds=time.perf_counter() - start,
    )


def _gather_slots(
    payload: ElasticInput, location: str, storage: DirectoryStorage
) -> tuple[ObjectSpace, list[int], list[int], int]:
    """The task's slots in one space: (space, warm slots, cold slots, bytes restored). A slot
    whose local copy is at the previous batch is warm; the others load from the checkpoints at
    the committed batch."""
    config, batch = payload.config, payload.batch
    space = ObjectSpace(config.slots, storage=storage)
    warm: list[int] = []
    cold: list[int] = []
    if batch == 0:
        space.merge(ObjectSpace(config.slots, payload.slots, storage=storage))
        return space, warm, cold, 0
    for slot in payload.slots:
        local = _read_local(_local_path(config, location, slot))
        if local is not None and local[0] == batch - 1:
            space.merge(ObjectSpace.from_bytes(local[1], storage=storage))
            warm.append(slot)
        else:
            cold.append(slot)
    restored = 0
    if cold:
        loaded, report = ObjectSpace.load(
            storage, cold, max_parallelism=config.slots, upto_batch=batch - 1
        )
        space.merge(loaded)
        restored = report.bytes_read
    return space, warm, cold, restored


def _count(
    space: ObjectSpace, events: tuple[tuple[str, int], ...], config: ElasticConfig
) -> list[Output]:
    """Apply the events to the running ``[count, sum]`` per key; the keys' new values."""
    touched: dict[str, tuple[int, int]] = {}
    for key, value in events:
        counts = space.group(slot_of(key, config)).get_map("counts", create=True)
        count, total = _pair(counts.get(key, [0, 0]))
        counts[key] = [count + 1, total + value]  # a new value: stored values are not mutated
        touched[key] = (count + 1, total + value)
    return [(key, count, total) for key, (count, total) in sorted(touched.items())]
