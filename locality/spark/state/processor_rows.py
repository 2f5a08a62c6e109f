"""The Row-based ``transformWithState`` (pyspark's, over ``Row`` objects) on the machinery of
:mod:`.processor`: what converts a key's rows to Rows and a processor's Rows to the output.

As pyspark 4.3's worker (``SQL_TRANSFORM_WITH_STATE_PYTHON_ROW_UDF``): ``handleInputRows`` gets
an iterator of ``Row`` objects with the stream's column names, values as Python values (``None``
for null); ``handleInitialState`` gets one ``Row`` of the initial state per call (one call per
row); ``handleInputRows`` and ``handleExpiredTimer`` yield ``Row`` objects, turned into the
output's columns by name (``row.asDict(True)``). The rows reach the task as a pandas DataFrame
made with ``integer_object_nulls`` (``QuerySpec.row_values``), so an integer column with nulls
keeps ints and None, as Spark's Rows do. Imports pandas and pyspark lazily (both are on the
executors).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["frame_of_rows", "rows_of"]


def rows_of(frame: pd.DataFrame) -> list[Any]:
    """``frame``'s rows as pyspark ``Row`` objects with its column names."""
    from pyspark.sql import Row

    make = Row(*[str(c) for c in frame.columns])
    values = frame.astype(object).where(frame.notna(), None)
    return [make(*(_python(v) for v in row)) for row in values.itertuples(index=False, name=None)]


def _python(value: Any) -> Any:
    """A pandas or numpy scalar as the Python value an Arrow ``as_py`` gives."""
    to_datetime = getattr(value, "to_pydatetime", None)
    if callable(to_datetime):
        return to_datetime()
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def frame_of_rows(rows: Iterable[Any], columns: Sequence[str]) -> pd.DataFrame:
    """The ``Row`` objects a processor yielded as a DataFrame of ``columns`` (by field name);
    anything but a Row, or a Row without one of the columns, raises a one-line TypeError."""
    import pandas as pd
    from pyspark.sql import Row

    records = []
    for row in rows:
        if not isinstance(row, Row):
            raise TypeError(f"it must yield pyspark Rows, got {type(row).__name__}")
        try:
            record = row.asDict(True)
        except TypeError:
            raise TypeError(f"it yielded a Row without field names: {row!r:.60}") from None
        missing = [c for c in columns if c not in record]
        if missing:
            raise TypeError(
                f"it yielded a Row without the output_schema field(s) {missing} "
                f"(it has {list(record)})"
            )
        records.append({c: record[c] for c in columns})
    return pd.DataFrame(records, columns=list(columns))
