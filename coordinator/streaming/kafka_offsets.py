"""A Kafka query's offsets (Spark's option names), checked before Spark reads them.

- ``starting_offsets`` (Spark's ``startingOffsets``): ``"earliest"`` (the default),
  ``"latest"``, or per partition as Spark's JSON (``{"clicks": {"0": 23, "1": -2}}``, text or a
  dict; -2 earliest, -1 latest; a partition not named: earliest), parsed and checked against the
  input topics (:class:`StartingOffsets`).
- Each batch reads at most ``max_records_per_batch`` records in all (:func:`batch_cap`, Spark's
  ``maxOffsetsPerTrigger``); the default, ``"default"``, is :data:`DEFAULT_MAX_RECORDS` (read
  when the query is built), which keeps a first batch on a topic with days of retention from
  loading all of it at once; ``None``: no cap.

Spark plans each batch's offsets over its Kafka source (``format("affinity-kafka")``);
:func:`spark_batch_offsets` checks them against the commit the batch starts from and gives the
offsets its commit records.

Pure: the offsets come in, the checked ones go out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from locality.spark.kafka import KafkaPartition

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "StartingOffsets",
    "OffsetsBehindError",
    "batch_cap",
    "spark_batch_offsets",
]

#: Records one batch reads at most unless ``max_records_per_batch`` says otherwise.
DEFAULT_MAX_RECORDS = 5_000_000

_EARLIEST, _LATEST = -2, -1


def batch_cap(option: int | Literal["default"] | None) -> int | None:
    """The records a batch reads at most for ``max_records_per_batch`` = ``option``:
    :data:`DEFAULT_MAX_RECORDS` for ``"default"``, None (no cap) for None; ``ValueError`` for
    anything else below 1."""
    if option == "default":
        return DEFAULT_MAX_RECORDS
    if option is not None and (isinstance(option, bool) or not isinstance(option, int)):
        raise ValueError(f"max_records_per_batch must be a number of records, got {option!r}")
    if option is not None and option < 1:
        raise ValueError(f"max_records_per_batch must be at least 1, got {option}")
    return option


@dataclass(frozen=True)
class StartingOffsets:
    """``starting_offsets``: a default for every partition, or offsets per partition."""

    default: int = _EARLIEST  # -2 earliest, -1 latest
    per_partition: Mapping[KafkaPartition, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: str | Mapping[str, Any], topics: Iterable[str]) -> StartingOffsets:
        """From ``"earliest"``, ``"latest"`` or Spark's JSON (text or dict); ``ValueError``."""
        if value in ("earliest", "latest"):
            return cls(_EARLIEST if value == "earliest" else _LATEST)
        document: Any = value
        if isinstance(value, str):
            try:
                document = json.loads(value)
            except ValueError:
                document = None
        if not isinstance(document, Mapping):
            raise ValueError(
                "starting_offsets must be 'earliest', 'latest' or offsets per partition as "
                f'Spark writes them ({{"topic": {{"0": 23, "1": -2}}}}), got {value!r}'
            )
        known = set(topics)
        per: dict[KafkaPartition, int] = {}
        for topic, offsets in document.items():
            if topic not in known:
                raise ValueError(f"starting_offsets names topic {topic!r}, not an input topic")
            if not isinstance(offsets, Mapping):
                raise ValueError(f"starting_offsets[{topic!r}] must map partitions to offsets")
            for partition, offset in offsets.items():
                if not str(partition).isdigit() or not isinstance(offset, int) or offset < -2:
                    raise ValueError(
                        f"starting_offsets[{topic!r}][{partition!r}] = {offset!r}: a partition "
                        "number and an offset (-2 earliest, -1 latest) are expected"
                    )
                per[KafkaPartition(str(topic), int(partition))] = offset
        return cls(_EARLIEST, per)


class OffsetsBehindError(RuntimeError):
    """A batch Spark planned starts before offsets the state has counted already."""


def spark_batch_offsets(
    done: Mapping[str, int],
    ranges: Mapping[KafkaPartition, tuple[int, int]],
    log: Any,
) -> dict[str, int]:
    """The next offset of every partition after a batch Spark planned over its Kafka source:
    ``done`` (the commit the batch starts from, ``topic-p`` -> next offset) carried forward, each
    partition the batch reads at its ``until``.

    A partition whose batch starts *before* the commit's offset would count records twice: the
    Spark checkpoint's offsets are behind the state (``OffsetsBehindError``, nothing is run).
    One that starts after it skips records Spark chose to skip (``failOnDataLoss=false`` over
    records deleted by retention, or a partition's offsets moved), logged ``kafka.data_lost``."""
    offsets = dict(done)
    behind = {
        str(p): (start, done[str(p)])
        for p, (start, _) in ranges.items()
        if str(p) in done and start < done[str(p)]
    }
    if behind:
        named = ", ".join(f"{p} from {s} (state counted to {d})" for p, (s, d) in behind.items())
        raise OffsetsBehindError(
            f"the batch reads {named}: the records before the state's offsets would be counted "
            "twice; the Spark checkpointLocation is not the one this state ran with (restart "
            "with that one, or start the state again with a new job.run_id)"
        )
    for p, (start, until) in sorted(ranges.items()):
        expected = done.get(str(p))
        if expected is not None and start > expected:
            log.warning("kafka.data_lost", partition=str(p), expected=expected, first=start)
        offsets[str(p)] = until
    return offsets
