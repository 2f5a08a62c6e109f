"""Building many long-lived objects at once: the cyclic garbage collector paused meanwhile.

CPython's collector runs after every few hundred new container objects, and its older
generations are walked again and again while a million tasks are built: at 1,000,000 tasks that
doubled the cost of decoding a job model, of building the job's tasks from its config, and of
handing them to the grouper's process. The model's objects hold no reference cycles, so nothing
is left for the collector to find; it runs again as usual afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the ``with`` block (nested blocks: the outermost
    one turns it back on; a collector that was off stays off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
