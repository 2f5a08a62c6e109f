"""A processor query's initial state (``initial_state=``, ``transformWithStateInPandas``'s
``initialState``): a grouped DataFrame, ``df.groupBy(key columns)``, applied once.

As Spark (pyspark 4.3, ``TransformWithStateInPandasUdfUtils.transformWithStateWithInitStateUDF``
and ``IncrementalExecution``: ``hasInitialState = currentBatchId == 0``), the initial state is
read in the query's first batch only, and there, per key, ``handleInitialState(key, rows,
timerValues)`` runs before that key's ``handleInputRows``; a key of the initial state without
input rows gets ``handleInitialState`` only. affinity applies it when the batch starts from no
commit (the job has no committed state): a replay of a committed first batch starts from no
commit again and so rebuilds the same state, a later batch or a restarted application starts
from a commit and never sees it, so the committed state holds it exactly once.

The initial state's rows travel with the batch's rows through the pinned shuffle
(:func:`with_initial_rows`): its grouping columns renamed to the query's key columns (routed by
the same key hash, so a key reaches the task owning its key group), its own columns under
:data:`~locality.spark.state.pinned_task.INITIAL_PREFIX` and the marker
:data:`~locality.spark.state.pinned_task.INITIAL_COLUMN`; the task splits them off again
(:mod:`locality.spark.state.pinned_task`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.streaming.routing import KEY_TYPES
from locality.spark.state.pinned_task import INITIAL_COLUMN, INITIAL_PREFIX

__all__ = ["InitialState", "InitialStateError", "with_initial_rows"]

_INTEGRAL = frozenset({"byte", "short", "integer", "long"})


class InitialStateError(ValueError):
    """The initial state cannot be served (the message names what is wrong)."""


@dataclass(frozen=True)
class InitialState:
    """The initial state's DataFrame and its grouping columns, checked on the driver."""

    frame: Any  # the grouped DataFrame (``GroupedData``'s)
    grouping: tuple[str, ...]  # its grouping columns, in order (the key's values)

    @classmethod
    def of(cls, grouped: Any, key_columns: Sequence[str]) -> InitialState:
        """``grouped`` (a ``GroupedData``: ``df.groupBy(columns)``) checked against the query's
        key columns: as many grouping columns, plain columns of a key's types."""
        from pyspark.sql import GroupedData

        if not isinstance(grouped, GroupedData):
            raise InitialStateError(
                "initial_state must be a grouped DataFrame (df.groupBy(key columns)), as "
                f"transformWithStateInPandas's initialState; got {type(grouped).__name__}"
            )
        frame = grouped._df
        if frame.isStreaming:
            raise InitialStateError(
                "initial_state must be a batch DataFrame grouped by key, not a stream (as "
                "Spark's initialState)"
            )
        grouping = tuple(_grouping_columns(grouped, frame.columns))
        if len(grouping) != len(key_columns):
            raise InitialStateError(
                f"initial_state is grouped by {list(grouping)} but the query's key is "
                f"{list(key_columns)}: group it by as many columns, in the key's order"
            )
        fields = {f.name: f.dataType.typeName() for f in frame.schema.fields}
        for name in grouping:
            if fields[name] not in KEY_TYPES:
                raise InitialStateError(
                    f"initial_state grouping column {name!r} has type {fields[name]}: a key may "
                    "be a string, boolean, integer or floating-point column"
                )
        if INITIAL_COLUMN in fields or any(n.startswith(INITIAL_PREFIX) for n in fields):
            raise InitialStateError(
                f"initial_state has a column named {INITIAL_COLUMN!r} or starting "
                f"{INITIAL_PREFIX!r}, which affinity uses itself"
            )
        return cls(frame, grouping)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns ``handleInitialState`` gets, as in the initial state's DataFrame."""
        return tuple(self.frame.columns)

    def check_keys(self, stream_schema: Any, key_columns: Sequence[str]) -> str | None:
        """Why the initial state's key cannot be the stream's (None: it can): the same type per
        key column (integers of any width count as one, a key's JSON text is the same)."""
        stream = {f.name: f.dataType.typeName() for f in stream_schema.fields}
        mine = {f.name: f.dataType.typeName() for f in self.frame.schema.fields}
        for grouping, key in zip(self.grouping, key_columns, strict=True):
            theirs, ours = stream.get(key), mine[grouping]
            if theirs == ours or (theirs in _INTEGRAL and ours in _INTEGRAL):
                continue
            return (
                f"initial_state grouping column {grouping!r} is {ours} but the stream's key "
                f"column {key!r} is {theirs}: cast one so a key has one type"
            )
        return None


def _grouping_columns(grouped: Any, columns: Sequence[str]) -> list[str]:
    """The plain column names ``grouped`` groups by; an expression is refused."""
    expressions = grouped._jgd.groupingExprs()
    names = []
    for i in range(expressions.size()):
        expression = expressions.apply(i)
        kind = expression.getClass().getSimpleName()
        name = (
            str(expression.name())
            if kind in ("UnresolvedAttribute", "AttributeReference")
            else None
        )
        if name is None or name not in columns:
            raise InitialStateError(
                f"initial_state must be grouped by plain columns of its DataFrame {list(columns)}; "
                f"found {expression.sql()} (add it with withColumn first)"
            )
        names.append(name)
    return names


def with_initial_rows(df: Any, initial: InitialState, key_columns: Sequence[str]) -> Any:
    """``df`` (the batch's rows) and the initial state's rows in one DataFrame: the initial
    rows with their grouping columns as ``key_columns``, their own columns prefixed and
    :data:`INITIAL_COLUMN` true; the batch's rows with those null (module docstring)."""
    from pyspark.sql import functions as F

    stream_types = {f.name: f.dataType for f in df.schema.fields}
    keys = [
        F.col(_quoted(g)).cast(stream_types[k]).alias(k)
        for g, k in zip(initial.grouping, key_columns, strict=True)
    ]
    own = [F.col(_quoted(c)).alias(INITIAL_PREFIX + c) for c in initial.columns]
    rows = initial.frame.select(*keys, *own, F.lit(True).alias(INITIAL_COLUMN))
    return df.unionByName(rows, allowMissingColumns=True)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
