"""locality.spark.state: the executor side of ``stateful_foreach_batch``: a keyed state store
whose local copy stays on the executor's host.

- :mod:`~locality.spark.state.objectspace`: differential checkpoints of persisted values, lists
  and maps per key group (the object space, moved here from the reference pipeline);
- :mod:`~locality.spark.state.durable`: the durable directory (key-group chains and batch
  records) behind the :class:`Storage` protocol, where an object store plugs in;
- :mod:`~locality.spark.state.store`: one task's state on an executor: in memory, the host's local
  copy at a stable path, or restored from the latest committed checkpoint (bytes counted);
- :mod:`~locality.spark.state.schema` / :mod:`~locality.spark.state.groupstate`: the state
  schema and the ``state`` argument of an ``applyInPandasWithState`` function;
- :mod:`~locality.spark.state.eventtime`: the event-time column, each batch's watermark and
  late rows, as Spark's;
- :mod:`~locality.spark.state.keyspace`: which task and key group a key belongs to;
- :mod:`~locality.spark.state.runner`: one task's micro-batch;
- :mod:`~locality.spark.state.standby`: a standby copy on another host brought to each commit.

Runs on executors: imports only the standard library (pandas lazily) and its own modules; no
kazoo, structlog, ``groupers`` or ``coordinator``. The driver side is
``coordinator.streaming``.
"""

from __future__ import annotations

from locality.spark.state.durable import (
    CommitRecord,
    DirectoryStateStorage,
    Storage,
    latest_commit,
    read_pending,
    write_commit,
    write_pending,
)
from locality.spark.state.eventtime import EventTime, EventTimeError, Watermark
from locality.spark.state.groupstate import (
    EVENT_TIME_TIMEOUT,
    NO_TIMEOUT,
    PROCESSING_TIME_TIMEOUT,
    TIMEOUTS,
    KeyState,
)
from locality.spark.state.runner import (
    QuerySpec,
    StatefulFunctionError,
    TaskBatch,
    TaskOutcome,
    run_task_batch,
)
from locality.spark.state.schema import Field, SchemaError, StateValueError, parse_schema
from locality.spark.state.store import (
    OpenReport,
    StoreSpec,
    forget_memory,
    local_root,
    open_task_state,
    save_task_state,
)

__all__ = [
    "EVENT_TIME_TIMEOUT",
    "NO_TIMEOUT",
    "PROCESSING_TIME_TIMEOUT",
    "TIMEOUTS",
    "CommitRecord",
    "DirectoryStateStorage",
    "EventTime",
    "EventTimeError",
    "Field",
    "KeyState",
    "OpenReport",
    "QuerySpec",
    "SchemaError",
    "StateValueError",
    "StatefulFunctionError",
    "Storage",
    "StoreSpec",
    "TaskBatch",
    "TaskOutcome",
    "Watermark",
    "forget_memory",
    "latest_commit",
    "local_root",
    "open_task_state",
    "parse_schema",
    "read_pending",
    "run_task_batch",
    "save_task_state",
    "write_commit",
    "write_pending",
]
