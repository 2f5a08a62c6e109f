"""Driver-side questions to the cluster: topics, partition counts, beginning and end offsets.

Each function opens a short-lived confluent-kafka ``AdminClient`` and waits for its answers
(``timeout_s``). A topic that does not exist is an :class:`UnknownTopic` error naming it.
:func:`end_offsets` gives, by default, the last stable offsets (``read_committed``): the end of
what a reader can see, so a range up to it never waits for an open transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewPartitions, NewTopic

from locality.spark.kafka.client import KafkaClientConfig, KafkaPartition, as_client_config
from locality.spark.kafka.clients import new_client

__all__ = [
    "KafkaAdminError",
    "UnknownTopic",
    "add_partitions",
    "beginning_offsets",
    "commit_group_offsets",
    "create_topic",
    "end_offsets",
    "group_offsets",
    "partition_counts",
]


class KafkaAdminError(RuntimeError):
    """The cluster refused or did not answer an admin request."""


class UnknownTopic(KafkaAdminError):
    """A topic named in a request does not exist."""


def _result(future: Future[Any], what: str, timeout_s: float) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaAdminError(f"{what}: {exc.args[0]}") from None
    except TimeoutError:
        raise KafkaAdminError(f"{what}: no answer within {timeout_s}s") from None


def create_topic(
    client: KafkaClientConfig | str,
    name: str,
    partitions: int,
    *,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create topic ``name`` with ``partitions`` partitions (``config``: topic settings, e.g.
    ``{"cleanup.policy": "compact"}``)."""
    if partitions < 1:
        raise ValueError(f"topic {name}: partitions must be at least 1 (got {partitions})")
    admin = new_client(AdminClient, as_client_config(client).admin())
    topic = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
    futures = admin.create_topics([topic], operation_timeout=timeout_s)
    _result(futures[name], f"creating topic {name}", timeout_s)


def add_partitions(
    client: KafkaClientConfig | str, name: str, total: int, *, timeout_s: float = 30.0
) -> None:
    """Grow topic ``name`` to ``total`` partitions (Kafka never removes partitions)."""
    admin = new_client(AdminClient, as_client_config(client).admin())
    futures = admin.create_partitions([NewPartitions(name, total)], operation_timeout=timeout_s)
    _result(futures[name], f"growing topic {name} to {total} partitions", timeout_s)


def partition_counts(
    client: KafkaClientConfig | str, topics: Iterable[str], *, timeout_s: float = 30.0
) -> dict[str, int]:
    """Each topic's number of partitions; :class:`UnknownTopic` if one does not exist."""
    wanted = sorted(set(topics))
    admin = new_client(AdminClient, as_client_config(client).admin())
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaAdminError(f"listing topics: {exc.args[0]}") from None
    counts: dict[str, int] = {}
    for name in wanted:
        topic = metadata.topics.get(name)
        if topic is None or (
            topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            raise UnknownTopic(f"topic {name} does not exist")
        if topic.error is not None:
            raise KafkaAdminError(f"topic {name}: {topic.error}")
        counts[name] = len(topic.partitions)
    return counts


def _offsets(
    client: KafkaClientConfig | str,
    topics: Iterable[str],
    spec: OffsetSpec,
    isolation: IsolationLevel,
    timeout_s: float,
) -> dict[KafkaPartition, int]:
    config = as_client_config(client)
    counts = partition_counts(config, topics, timeout_s=timeout_s)
    request = {
        TopicPartition(topic, p): spec for topic, count in counts.items() for p in range(count)
    }
    if not request:
        return {}
    admin = new_client(AdminClient, config.admin())
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout_s)
    return {
        KafkaPartition(tp.topic, tp.partition): int(
            _result(future, f"offsets of {tp.topic}-{tp.partition}", timeout_s).offset
        )
        for tp, future in futures.items()
    }


def end_offsets(
    client: KafkaClientConfig | str,
    topics: Iterable[str],
    *,
    committed_only: bool = True,
    timeout_s: float = 30.0,
) -> dict[KafkaPartition, int]:
    """The end offset of every partition of ``topics``: the last stable offset (the first
    offset that may still belong to an open transaction), or with ``committed_only=False`` the
    high watermark."""
    isolation = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    return _offsets(client, topics, latest, isolation, timeout_s)


def beginning_offsets(
    client: KafkaClientConfig | str, topics: Iterable[str], *, timeout_s: float = 30.0
) -> dict[KafkaPartition, int]:
    """The first offset still in the log of every partition of ``topics`` (0 until retention
    deletes records)."""
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    return _offsets(client, topics, earliest, IsolationLevel.READ_UNCOMMITTED, timeout_s)


def commit_group_offsets(
    client: KafkaClientConfig | str,
    group: str,
    offsets: Mapping[KafkaPartition, int],
    *,
    metadata: str = "",
    timeout_s: float = 30.0,
) -> None:
    """Set consumer group ``group``'s committed offset of each partition (the next offset to
    read), as a consumer's commit would, so Kafka's tools (``kafka-consumer-groups
    --describe``, lag exporters) see it. The group must have no live member (affinity's group
    has none: it commits offsets only)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    if not offsets:
        return
    partitions = [
        TopicPartition(p.topic, p.partition, int(o), metadata=metadata)
        for p, o in sorted(offsets.items())
    ]
    admin = new_client(AdminClient, as_client_config(client).admin())
    futures = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, partitions)], request_timeout=timeout_s
    )
    for future in futures.values():
        result = _result(future, f"committing offsets of consumer group {group}", timeout_s)
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise KafkaAdminError(
                f"committing offsets of consumer group {group}: {failed[0].topic}-"
                f"{failed[0].partition}: {failed[0].error}"
            )


def group_offsets(
    client: KafkaClientConfig | str, group: str, *, timeout_s: float = 30.0
) -> dict[KafkaPartition, int]:
    """Consumer group ``group``'s committed offsets (partitions without one left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = new_client(AdminClient, as_client_config(client).admin())
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
    )
    found: dict[KafkaPartition, int] = {}
    for future in futures.values():
        result = _result(future, f"reading offsets of consumer group {group}", timeout_s)
        for tp in result.topic_partitions:
            if tp.offset >= 0:
                found[KafkaPartition(tp.topic, tp.partition)] = int(tp.offset)
    return found
