"""Kafka's own view of a stateful query's progress, for both Kafka paths (the Kafka query, and
``stateful_foreach_batch`` over ``format("affinity-kafka")`` given ``kafka=``).

A commit record keeps each input partition's next offset (``topic-p`` -> offset). After each
commit, :meth:`KafkaProgress.after_commit_step` sets those offsets as the committed offsets of
the consumer group ``affinity-<job name>-<job id>`` (metadata only: the commit record stays the
truth), so Kafka's tools (``kafka-consumer-groups --describe``, lag exporters) show the query;
:meth:`KafkaProgress.lag` gives the records behind per partition for the job's history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.config import JobConfig
from locality.spark.kafka import (
    KafkaClientConfig,
    KafkaPartition,
    commit_group_offsets,
    end_offsets,
)
from locality.spark.state import CommitRecord

__all__ = ["KafkaProgress", "consumer_group", "partition_of"]


def consumer_group(config: JobConfig) -> str:
    """The consumer group a job's committed offsets are shown under."""
    return f"affinity-{config.job.name}-{config.job.id}"


def partition_of(name: str) -> KafkaPartition:
    """``topic-3`` (a commit record's key) -> its :class:`KafkaPartition`."""
    topic, _, number = name.rpartition("-")
    return KafkaPartition(topic, int(number))


@dataclass(frozen=True)
class KafkaProgress:
    """A query's committed offsets shown to Kafka (module docstring)."""

    client: KafkaClientConfig
    group: str
    topics: tuple[str, ...]

    @classmethod
    def of(
        cls, client: KafkaClientConfig, config: JobConfig, topics: Iterable[str]
    ) -> KafkaProgress:
        return cls(client, consumer_group(config), tuple(sorted(set(topics))))

    def after_commit_step(self, commit: CommitRecord) -> tuple[str, Callable[[], Any]]:
        """The step after ``commit`` that commits its offsets to the consumer group."""
        offsets = {partition_of(name): end for name, end in commit.offsets.items()}

        def show_offsets() -> None:
            if offsets:
                metadata = f"affinity batch {commit.batch}"
                commit_group_offsets(self.client, self.group, offsets, metadata=metadata)

        return ("consumer-group", show_offsets)

    def lag(self, commit: CommitRecord) -> Mapping[str, int]:
        """Records behind per partition: its end offset (last stable) minus the committed one."""
        if not commit.offsets:
            return {}
        ends = end_offsets(self.client, self.topics)
        lag: dict[str, int] = {}
        for name, done in commit.offsets.items():
            end = ends.get(partition_of(name))
            if end is not None:
                lag[name] = max(0, end - done)
        return lag
