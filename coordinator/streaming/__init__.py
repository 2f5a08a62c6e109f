"""coordinator.streaming: ``stateful_foreach_batch``, a user's ``applyInPandasWithState`` function
run in ``foreachBatch`` with each key's state kept on the executor its job model names
(DESIGN.md "Spark streaming"); ``stateful_processor_foreach_batch``, the same for a Spark 4
``StatefulProcessor`` (``transformWithStateInPandas``'s class).

- :mod:`~coordinator.streaming.query`: the ``foreachBatch`` handler (:class:`StatefulQuery`);
- :mod:`~coordinator.streaming.runtime`: what every query's driver keeps, and the two ends of a
  batch (begin: the plan; finish: sink, commit, locality, standbys);
- :mod:`~coordinator.streaming.commits`: the commit log's rules (where a batch starts, one live
  driver, the fenced commit, pruning);
- :mod:`~coordinator.streaming.stage`, :mod:`~coordinator.streaming.routing`: the pinned stage
  (one shuffle) and the routing columns it computes on the executors;
- :mod:`~coordinator.streaming.kafka_stage`: a batch of the pinned Kafka source
  (``format("affinity-kafka")``) run with no shuffle, each task where its partition is read;
- :mod:`~coordinator.streaming.standby`: the standby stage after each commit;
- :mod:`~coordinator.streaming.reports`, :mod:`~coordinator.streaming.history`: a batch's
  report, and its entry in the job's history in ZooKeeper;
- :mod:`~coordinator.streaming.kafka_query` (``stateful_kafka_query``: tasks that own their Kafka
  partitions), with :mod:`~coordinator.streaming.kafka_layout` (partitions to tasks),
  :mod:`~coordinator.streaming.kafka_offsets` (where a batch starts reading) and
  :mod:`~coordinator.streaming.kafka_output` (exactly-once or at-least-once output).

The streaming runtime is a coordinator member (a Spark driver following job models for its
executors, optionally with a coordinator replica embedded), so it sits above ``member`` and
``leader`` and below ``demo``. Its executor side is :mod:`locality.spark.state`; placement (pinned
stages, the pinned shuffle) is :mod:`locality.spark`. May import ``coordinator.member``,
``coordinator.leader``, ``groupers``, ``locality`` and ``metadata``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from coordinator.config import JobConfig
from coordinator.streaming.initial_state import InitialState, InitialStateError
from coordinator.streaming.query import StatefulQuery
from coordinator.streaming.runtime import BatchReport, StreamingBatchError, StreamingUsageError
from locality.spark.state.processor import ProcessorFunction
from locality.spark.state.processor_state import ProcessorUsageError

__all__ = [
    "BatchReport",
    "StatefulQuery",
    "StreamingBatchError",
    "StreamingUsageError",
    "stateful_foreach_batch",
    "stateful_processor_foreach_batch",
]


def stateful_foreach_batch(
    func: Callable[..., Any],
    *,
    key_columns: Iterable[str],
    output_schema: Any,
    state_schema: Any,
    sink: Callable[[Any, int], None] | None = None,
    config: JobConfig,
    **options: Any,
) -> StatefulQuery:
    """A ``foreachBatch`` handler running ``func`` (an ``applyInPandasWithState`` function:
    ``(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]``) per key,
    each key's state kept local on the executor its job model names; each batch's output
    DataFrame goes to ``sink(df, batch_id)``, and/or with ``output_topic=`` and ``kafka=`` to a
    Kafka topic, exactly once by default (``delivery``, ``output_key_column``,
    ``output_value_column``: as for the Kafka query). ``config``: the job config
    (:func:`coordinator.config.load_config`). ``options``: ``timeout`` (``"NoTimeout"``,
    ``"ProcessingTimeTimeout"`` or ``"EventTimeTimeout"``), ``event_time`` (``(column,
    delay)``, as ``withWatermark(column, delay)``: the batch's watermark, event-time timeouts,
    late rows dropped with ``EventTimeTimeout``), ``storage`` (a
    :class:`locality.spark.state.Storage`),
    ``coordinator`` (``"embedded"``, the default: a coordinator replica in the driver; or
    ``"external"``: ``affinity coordinator run``), ``locality_wait``. See ``docs/spark.md``.
    """
    return StatefulQuery(
        func,
        key_columns=key_columns,
        output_schema=output_schema,
        state_schema=state_schema,
        sink=sink,
        config=config,
        **options,
    )


#: The processor APIs of pyspark a query may follow: pandas DataFrames in and out, or Rows
#: (``transformWithState``: :mod:`locality.spark.state.processor_rows`).
PROCESSOR_APIS = ("transformWithStateInPandas", "transformWithState")

#: The state schema a processor's query declares to the runtime: its state variables carry
#: their own schemas (the function path's per-key state map is not used).
_PROCESSOR_STATE = "_processor_state long"


def stateful_processor_foreach_batch(
    processor: Any,
    *,
    key_columns: Iterable[str],
    output_schema: Any,
    time_mode: str = "None",
    sink: Callable[[Any, int], None],
    config: JobConfig,
    initial_state: Any = None,
    api: str = "transformWithStateInPandas",
    **options: Any,
) -> StatefulQuery:
    """A ``foreachBatch`` handler running ``processor`` (a Spark 4 ``StatefulProcessor``, the
    one ``transformWithStateInPandas(processor, output_schema, "Append", time_mode)`` takes)
    per key, its state variables kept local on the executor its job model names
    (:mod:`locality.spark.state.processor`). ``time_mode``: ``"None"``, ``"ProcessingTime"``
    or ``"EventTime"`` (with ``event_time=(column, delay)`` in ``options``: event-time timers,
    late rows dropped). ``api``: ``"transformWithStateInPandas"`` (pandas DataFrames in and out)
    or ``"transformWithState"`` (pyspark's Row-based API: Rows in and out, the initial state one
    Row per ``handleInitialState`` call). ``initial_state``: ``transformWithStateInPandas``'s
    ``initialState``, a ``df.groupBy(columns)`` matching ``key_columns``, handed to
    ``handleInitialState`` per key in the first batch, once
    (:mod:`coordinator.streaming.initial_state`); what affinity does not run is refused here,
    before the query starts. ``options`` as for :func:`stateful_foreach_batch` (``timeout``
    excepted: timers replace it)."""
    if "timeout" in options:
        raise StreamingUsageError("a processor query takes no timeout: register timers instead")
    if api not in PROCESSOR_APIS:
        raise StreamingUsageError(f"api must be one of {PROCESSOR_APIS}, got {api!r}")
    function = ProcessorFunction(
        processor, time_mode, options.get("event_time") is not None, api == "transformWithState"
    )
    try:
        function.check()
    except ProcessorUsageError as exc:
        raise StreamingUsageError(str(exc)) from None
    keys = tuple(key_columns)
    initial = None
    if initial_state is not None:
        try:
            initial = InitialState.of(initial_state, keys)
        except InitialStateError as exc:
            raise StreamingUsageError(str(exc)) from None
    return StatefulQuery(
        function,
        key_columns=keys,
        initial_state=initial,
        output_schema=output_schema,
        state_schema=_PROCESSOR_STATE,
        sink=sink,
        config=config,
        **options,
    )
