"""Where a Kafka query's output goes: ``delivery="exactly-once"`` (the default for
``output_topic``) or ``"at-least-once"``.

- **at least once**: each task writes its output in one transaction per task and batch while it
  runs (:class:`locality.spark.state.task_output.KafkaTaskOutput`); a batch run again after a
  failure before its commit writes it again.
- **exactly once** (*publish after commit*): each task keeps its output with its checkpoint,
  durable and named for its attempt (:class:`~locality.spark.state.task_output.KeptOutput`);
  once the driver committed the batch, one pinned Spark task per affinity task publishes the
  committed attempt's output in one transaction together with the task's publish mark
  (:func:`locality.spark.kafka.publish.publish_once`): a publish retried after any failure, or
  after an application restart, finds the mark and writes nothing. A publish that fails after
  the commit is logged and counted, and done again before the next batch runs (so batches are
  published in order). A ``read_committed`` reader sees each batch's output exactly once.

Plain Kafka transactions only (KIP-939's two-phase commit is not in the clients), and why this
shape rather than Kafka Streams' or Flink's: docs/kafka.md, "Exactly once".

One home for both queries with ``output_topic=``: the Kafka query (``stateful_kafka_query``) and
``stateful_foreach_batch``. :meth:`KafkaOutput.to_topic` checks the options and makes the
output; each query gives its tasks :attr:`KafkaOutput.deliver`, adds
:meth:`KafkaOutput.after_commit_steps` to its own and calls :meth:`KafkaOutput.publish_owed`
before each batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.streaming.reports import StreamingBatchError, StreamingUsageError, failure_cause
from locality.spark import run_pinned
from locality.spark.kafka import KafkaClientConfig, as_client_config
from locality.spark.state import CommitRecord, Storage
from locality.spark.state.durable import prune_outputs
from locality.spark.state.task_output import KafkaTaskOutput, KeptOutput, Publisher

__all__ = ["DELIVERIES", "KafkaOutput"]

#: The output modes of a Kafka query with ``output_topic``.
DELIVERIES = ("exactly-once", "at-least-once")


@dataclass
class KafkaOutput:
    """A Kafka query's output to a topic (module docstring); :meth:`of` makes one."""

    delivery: str
    deliver: KafkaTaskOutput | KeptOutput
    publisher: Publisher | None
    storage: Storage
    published: int = -1  # the latest batch this driver published (or found published)

    @classmethod
    def of(
        cls,
        client: KafkaClientConfig,
        topic: str,
        *,
        query: str,
        key_column: str | None,
        value_column: str | None,
        transactional: bool,
        delivery: str,
        storage: Storage,
    ) -> KafkaOutput:
        if delivery not in DELIVERIES:
            raise ValueError(f"delivery must be one of {DELIVERIES}, got {delivery!r}")
        if delivery == "at-least-once":
            writer = KafkaTaskOutput(client, topic, query, key_column, value_column, transactional)
            return cls(delivery, writer, None, storage)
        keeper = KeptOutput(storage, key_column, value_column)
        publisher = Publisher(storage, client, topic, query, key_column, value_column)
        return cls(delivery, keeper, publisher, storage)

    @classmethod
    def to_topic(
        cls,
        kafka: KafkaClientConfig | str | None,
        topic: str,
        *,
        query: str,
        columns: Sequence[str],
        storage: Storage,
        key_column: str | None = "key",
        value_column: str | None = None,
        transactional: bool = True,
        delivery: str = "exactly-once",
    ) -> KafkaOutput:
        """Query ``query``'s output (``columns``) to ``topic`` (records keyed by ``key_column``,
        valued by ``value_column`` or the row as JSON), kept in ``storage``; a
        :class:`StreamingUsageError` names a wrong option before anything runs."""
        if kafka is None:
            raise StreamingUsageError(f"output_topic={topic!r} needs kafka= (bootstrap servers)")
        for what, column in (("key", key_column), ("value", value_column)):
            if column is not None and column not in columns:
                raise StreamingUsageError(
                    f"output_{what}_column {column!r} is not a column of output_schema "
                    f"{list(columns)} (None: {'no key' if what == 'key' else 'the row as JSON'})"
                )
        try:
            return cls.of(
                as_client_config(kafka),
                topic,
                query=query,
                key_column=key_column,
                value_column=value_column,
                transactional=transactional,
                delivery=delivery,
                storage=storage,
            )
        except ValueError as exc:
            raise StreamingUsageError(str(exc)) from None

    def after_commit_steps(
        self, sc: Any, commit: CommitRecord
    ) -> list[tuple[str, Callable[[], Any]]]:
        """The publish of ``commit``'s output, as a step after the commit (exactly once only)."""
        if self.publisher is None:
            return []
        return [("publish", lambda: self.publish(sc, commit))]

    def publish_owed(self, sc: Any, latest: CommitRecord | None) -> None:
        """Publish ``latest`` (the latest commit) if this driver has not: a publish that failed
        after the commit, or an application restart; called before a later batch runs, so
        batches are published in order."""
        if self.publisher is None or latest is None or latest.batch <= self.published:
            return
        try:
            self.publish(sc, latest)
        except Exception as exc:
            raise StreamingBatchError(
                f"publishing batch {latest.batch}'s output failed (it is committed; the next "
                f"batch publishes it again before going on): {failure_cause(exc)}"
            ) from exc

    def publish(self, sc: Any, commit: CommitRecord) -> int:
        """Publish ``commit``'s kept outputs (one pinned Spark task per task); records made
        visible now (0: all published before). Kept outputs up to the batch are then removed."""
        if self.publisher is None or commit.batch <= self.published:
            return 0
        payloads = {task: (commit.batch, token) for task, token in commit.tokens.items()}
        run = run_pinned(
            sc,
            payloads,
            {},
            self.publisher,
            locality_wait=None,
            description=f"affinity publish batch {commit.batch}",
        )
        self.published = commit.batch
        prune_outputs(self.storage, commit.batch)
        return sum(int(ran.result) for ran in run.tasks.values())
