"""The streaming parts of a pinned task (:mod:`.pinned_task`), each holding one Arrow batch or
one output chunk at a time:

- :class:`EventScan`: the largest event time of the rows as they pass, and the late rows
  dropped (:func:`.eventtime.scan`, :func:`.eventtime.drop_late` per Arrow batch);
- :class:`CountedRuns`: the key runs as they pass, counting their rows;
- :class:`CheckedOutput`: the function's output frames gathered into chunks of about
  :data:`OUTPUT_CHUNK_ROWS` rows, each checked and converted (``prepare``) and yielded as Arrow
  batches as soon as it is full; the frames are kept only when the task delivers its whole
  output at the end (a Kafka output).

Imports pandas and pyarrow lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from locality.spark.state.eventtime import Watermark, drop_late, scan
from locality.spark.state.keyruns import KeyRun
from locality.spark.state.runner import QuerySpec, Ran, TaskSteps

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["OUTPUT_CHUNK_ROWS", "CheckedOutput", "CountedRuns", "EventScan"]

#: Output rows gathered before they are checked and handed to Spark.
OUTPUT_CHUNK_ROWS = 10_000


class EventScan:
    """The event-time scan of a task's rows, batch by batch (no event time: rows as they are)."""

    def __init__(self, spec: QuerySpec, watermark: Watermark | None) -> None:
        self.column = spec.event_time.column if spec.event_time is not None else None
        self.watermark = watermark
        self.drops = spec.drops_late_rows
        self.largest: int | None = None
        self.late = 0

    @property
    def figures(self) -> tuple[int | None, int]:
        """(the largest event time read, late rows dropped)."""
        return self.largest, self.late

    def filtered(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` without the late rows when the operator drops them, scanned on the way."""
        import pyarrow as pa

        column, watermark = self.column, self.watermark
        for batch in batches:
            if column is None or watermark is None or batch.num_rows == 0:
                yield batch
                continue
            table = pa.Table.from_batches([batch])
            largest = scan(table, column)
            if largest is not None:
                self.largest = largest if self.largest is None else max(self.largest, largest)
            if not self.drops:
                yield batch
                continue
            kept, late = drop_late(table, column, watermark)
            self.late += late
            if kept is not None:
                yield from kept.to_batches()


class CountedRuns(Iterator[KeyRun]):
    """Key runs passed on one by one, their rows counted (``rows``)."""

    def __init__(self, runs: Iterator[KeyRun]) -> None:
        self._runs = runs
        self.rows = 0

    def __iter__(self) -> CountedRuns:
        return self

    def __next__(self) -> KeyRun:
        run = next(self._runs)
        self.rows += len(run[2])
        return run


class CheckedOutput:
    """A task's output, checked and yielded chunk by chunk (module docstring)."""

    def __init__(self, prepare: Callable[[pd.DataFrame], pa.Table | None], *, keep: bool) -> None:
        self.prepare = prepare
        self.keep = keep
        self.kept: list[pd.DataFrame] = []  # every output frame (``keep`` only)
        self.rows = 0  # output rows checked
        self._pending: list[pd.DataFrame] = []
        self._pending_rows = 0

    def stream(self, steps: TaskSteps) -> Generator[pa.RecordBatch, None, Ran]:
        """Run ``steps`` to the end, yielding each full chunk's Arrow batches as it fills and the
        last chunk's at the end; returns how the calls went."""
        while True:
            try:
                frame: Any = next(steps)
            except StopIteration as stop:
                ran: Ran = stop.value
                break
            if not len(frame):
                continue
            self._pending.append(frame)
            self._pending_rows += len(frame)
            if self.keep:
                self.kept.append(frame)
            if self._pending_rows >= OUTPUT_CHUNK_ROWS:
                yield from self._flush()
        yield from self._flush()
        return ran

    def _flush(self) -> Iterator[pa.RecordBatch]:
        import pandas as pd

        if not self._pending:
            return
        frames, self._pending, self._pending_rows = self._pending, [], 0
        chunk = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        table = self.prepare(chunk)
        if table is not None:
            self.rows += table.num_rows
            yield from table.to_batches()
