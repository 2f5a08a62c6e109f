"""An executor killed in the middle of a batch, for the Spark tests: :func:`stalls_once` wraps an
``applyInPandasWithState`` function so that, once ``armed`` exists, the first call to create
``marker`` writes its executor id there and sleeps; :func:`kill_when_marked` kills that
executor meanwhile. The retried task (and every other call) runs at once. Importable by the
test modules (``from stalls import ...``); its functions travel to the executors by value."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

Function = Callable[[tuple[Any, ...], Iterator[Any], Any], Iterator[Any]]


def stalls_once(function: Function, armed: str, marker: str) -> Function:
    """``function``, stalled once (module docstring)."""

    def stalled(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import os
        import time as clock

        from locality.spark import current_executor_id

        if os.path.exists(armed):
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, (current_executor_id() or "").encode())
                os.close(fd)
                clock.sleep(60)
        yield from function(key, pdfs, state)

    return stalled


def kill_when_marked(
    marker: Path, cluster: Any, app_id: str, killed: list[str]
) -> threading.Thread:
    """Kill the executor named in ``marker`` once it appears (in a thread); its id goes to
    ``killed``."""

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.05)
        time.sleep(0.2)
        executor = marker.read_text().strip() if marker.exists() else ""
        if executor:
            cluster.kill_executor(app_id, executor)
            killed.append(executor)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread
