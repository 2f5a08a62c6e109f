"""Where each row of a micro-batch goes, computed on the executors: its task and key group as
two columns, from the key's hash (``affinity.spark.KeyHash``, exactly
``groupers.keys.stable_hash`` of the key's JSON text, so the same as the driver's routing of
:class:`locality.spark.state.keyspace.KeySpace`).

For a hash ``h`` (``P`` partitions, elasticity factor ``f``, ``M`` = max_parallelism):

- key group ``pmod(h, M)``;
- task index: the task holding partition ``pmod(h div f, P)`` and SEP-32 bucket ``pmod(h, f)``,
  looked up in a literal array of ``P x f`` task indices (the tasks sorted by name are the pinned
  shuffle's partitions).

Key columns must be strings, booleans, integers or floating point (what a key's JSON text can
hold); anything else is refused on the driver before a batch runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locality.spark.jvm import register_key_hash
from locality.spark.state.keyspace import KeySpace
from locality.spark.state.pinned_task import (
    GROUP_COLUMN,
    INITIAL_COLUMN,
    RESULT_COLUMN,
    TASK_COLUMN,
)

__all__ = ["KEY_TYPES", "check_key_columns", "routed"]

#: Spark type names a key column may have.
KEY_TYPES = frozenset(
    {"string", "varchar", "char", "byte", "short", "integer", "long", "boolean", "float", "double"}
)
_RESERVED = (TASK_COLUMN, GROUP_COLUMN, RESULT_COLUMN, INITIAL_COLUMN)


def check_key_columns(schema: Any, key_columns: Sequence[str]) -> str | None:
    """What is wrong with the stream's ``schema`` (a StructType) for these key columns, or
    None: a key column missing or of a type a key cannot have, or a reserved column name."""
    fields = {f.name: f for f in schema.fields}
    missing = [c for c in key_columns if c not in fields]
    if missing:
        return f"key_columns {missing} are not columns of the stream (it has {list(fields)})"
    for name in key_columns:
        type_name = fields[name].dataType.typeName()
        if type_name not in KEY_TYPES:
            return (
                f"key column {name!r} has type {type_name}: a key may be a string, boolean, "
                "integer or floating-point column (cast it, e.g. a timestamp to long)"
            )
    taken = [c for c in _RESERVED if c in fields]
    if taken:
        return f"the stream has column(s) {taken}, which stateful_foreach_batch uses itself"
    return None


def routed(df: Any, keyspace: KeySpace, key_columns: Sequence[str], tasks: Sequence[str]) -> Any:
    """``df`` with :data:`TASK_COLUMN` (index into ``tasks``) and :data:`GROUP_COLUMN`."""
    from pyspark.sql import functions as F

    function = register_key_hash(df.sparkSession)
    quoted = ", ".join(f"`{c.replace('`', '``')}`" for c in key_columns)
    key_hash = f"{function}(struct({quoted}))"
    index = {task: i for i, task in enumerate(tasks)}
    slots = [
        index[keyspace.task_of[slot // keyspace.factor, slot % keyspace.factor]]
        for slot in range(keyspace.partitions * keyspace.factor)
    ]
    f, p, m = keyspace.factor, keyspace.partitions, keyspace.max_parallelism
    h = "_affinity_hash"
    slot = f"pmod({h} div {f}, {p}) * {f} + pmod({h}, {f})"
    lookup = f"element_at(array({', '.join(map(str, slots))}), cast({slot} as int) + 1)"
    return (
        df.withColumn(h, F.expr(key_hash))
        .withColumn(TASK_COLUMN, F.expr(lookup))
        .withColumn(GROUP_COLUMN, F.expr(f"pmod({h}, {m})"))
        .drop(h)
    )
