"""Per-batch offset ranges: from where each partition stands to its end offset, under a cap.

Pure (no I/O). The driver takes the end offsets of a batch (:func:`locality.spark.kafka.admin.
end_offsets`) and where each partition stands (the last commit record's ends, or the log's
beginning for a partition it has not read yet), and :func:`plan_ranges` cuts the batch:

- every partition reads ``[start, end)``;
- with ``max_records`` (like Spark's ``maxOffsetsPerTrigger``), a batch takes at most that many
  offsets in all, shared in proportion to each partition's lag (largest remainders get the
  leftover offsets, ties to the lower partition), so the sum is exactly the cap when the lag
  exceeds it;
- a start past the end (the topic was recreated or truncated) is an error naming the partition,
  never a silent skip.
"""

from __future__ import annotations

from collections.abc import Mapping

from locality.spark.kafka.client import KafkaPartition, OffsetRange

__all__ = ["OffsetsWentBack", "plan_ranges"]


class OffsetsWentBack(ValueError):
    """A partition's start is past its end offset (its records were deleted or replaced)."""


def _capped_sizes(lags: list[int], cap: int) -> list[int]:
    total = sum(lags)
    if total <= cap:
        return lags
    sizes = [lag * cap // total for lag in lags]
    leftover = cap - sum(sizes)
    by_remainder = sorted(range(len(lags)), key=lambda i: (-(lags[i] * cap % total), i))
    for i in by_remainder[:leftover]:
        sizes[i] += 1
    return sizes


def plan_ranges(
    starts: Mapping[KafkaPartition, int],
    ends: Mapping[KafkaPartition, int],
    max_records: int | None = None,
) -> list[OffsetRange]:
    """One range per partition of ``ends`` (sorted), from ``starts`` toward ``ends``.

    ``starts`` must name every partition of ``ends`` (a new partition starts at its beginning
    offset). Raises ``ValueError`` for a partition without a start, a negative offset or a cap
    below 1, :class:`OffsetsWentBack` for a start past its end.
    """
    if max_records is not None and max_records < 1:
        raise ValueError(f"max_records must be at least 1 (got {max_records})")
    partitions = sorted(ends)
    missing = [str(p) for p in partitions if p not in starts]
    if missing:
        raise ValueError(f"no start offset for partition(s) {', '.join(missing)}")
    for p in partitions:
        if starts[p] < 0 or ends[p] < 0:
            raise ValueError(
                f"{p}: offsets must be non-negative (start {starts[p]}, end {ends[p]})"
            )
        if starts[p] > ends[p]:
            raise OffsetsWentBack(
                f"{p}: the batch would start at offset {starts[p]}, past the partition's end "
                f"offset {ends[p]} (was the topic deleted, recreated or truncated?)"
            )
    lags = [ends[p] - starts[p] for p in partitions]
    sizes = lags if max_records is None else _capped_sizes(lags, max_records)
    return [
        OffsetRange(p.topic, p.partition, starts[p], starts[p] + size)
        for p, size in zip(partitions, sizes, strict=True)
    ]
