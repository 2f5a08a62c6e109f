"""How to reach a Kafka cluster, and names for its partitions and offset ranges.

:class:`KafkaClientConfig` is the bootstrap address plus any librdkafka settings (security,
timeouts); it is a small frozen value, so it pickles to the executors with a task. It builds the
settings of each kind of client: a consumer that only reads what it is told (no group, no
commits), an idempotent or transactional producer, an admin client. librdkafka's own log lines go
to the standard ``logging`` logger :data:`LIBRDKAFKA_LOGGER`.

:class:`KafkaPartition` names one partition of a topic; :class:`OffsetRange` is the records
``[start, end)`` of one partition. Standard library only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "LIBRDKAFKA_LOGGER",
    "KafkaClientConfig",
    "KafkaPartition",
    "OffsetRange",
    "as_client_config",
]

#: Where librdkafka's log lines go (standard ``logging``).
LIBRDKAFKA_LOGGER = "locality.spark.kafka.librdkafka"


class KafkaPartition(NamedTuple):
    """One partition of a topic (sorts by topic, then partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records of one partition with ``start <= offset < end`` (``end`` excluded)."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not self.topic:
            raise ValueError("an offset range needs a topic name")
        if self.partition < 0:
            raise ValueError(f"{self.topic}: partition {self.partition} is negative")
        if not 0 <= self.start <= self.end:
            raise ValueError(
                f"{self.topic}-{self.partition}: offsets [{self.start}, {self.end}) are not a "
                "range (need 0 <= start <= end)"
            )

    @property
    def key(self) -> KafkaPartition:
        return KafkaPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """Offsets in the range; records can be fewer (compaction, transaction markers)."""
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}[{self.start}, {self.end})"


@dataclass(frozen=True)
class KafkaClientConfig:
    """The bootstrap servers (``host:port,...``) and extra librdkafka settings."""

    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ValueError("bootstrap_servers is empty: give host:port[,host:port...]")
        object.__setattr__(self, "options", dict(self.options))

    def _base(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": logging.getLogger(LIBRDKAFKA_LOGGER),
        }
        settings.update(self.options)
        return settings

    def admin(self) -> dict[str, Any]:
        return self._base()

    def consumer(self) -> dict[str, Any]:
        """A consumer that reads assigned partitions only: no group membership, no commits,
        committed records only, an error (not a silent jump) past the log's ends."""
        settings = {
            "group.id": "affinity-range-reader",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "isolation.level": "read_committed",
        }
        return {**settings, **self._base()}

    def producer(self, transactional_id: str | None = None) -> dict[str, Any]:
        """An idempotent producer (``acks=all``, no duplicates from retries), transactional when
        ``transactional_id`` is given."""
        settings: dict[str, Any] = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}
        if transactional_id is not None:
            if not transactional_id:
                raise ValueError("transactional_id is empty")
            settings["transactional.id"] = transactional_id
        return {**settings, **self._base()}


def as_client_config(client: KafkaClientConfig | str) -> KafkaClientConfig:
    """``client`` itself, or a config for the bootstrap servers it names."""
    return client if isinstance(client, KafkaClientConfig) else KafkaClientConfig(client)
