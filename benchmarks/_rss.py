"""The one home of the streaming benchmarks' memory measure: :class:`AppPeaks`, the peak resident
memory of one Spark application's processes while sampling, read from ``/proc`` every 0.1 s.

The processes are the application's only (other applications and test runs on the machine are
left out): this Python process (the driver's Python), the driver's JVM (its py4j gateway's
process), the executor JVMs whose command line names the application's id, and the executors'
Python processes (``pyspark.daemon`` and its workers) under those JVMs. Per kind, the peak of the
sum over its processes; and the largest single executor Python process (a worker running tasks).

Imports only the standard library. Linux only (``/proc``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["KINDS", "LARGEST_WORKER", "AppPeaks"]

KINDS = ("driver python", "driver jvm", "executor jvm", "executor python")
LARGEST_WORKER = "largest executor python"


@dataclass
class AppPeaks:
    """Peak RSS (bytes) of application ``app_id``'s processes while sampling (module docstring);
    ``driver_jvm``: the driver JVM's pid (``sc._gateway.proc.pid``)."""

    app_id: str
    driver_jvm: int
    peaks: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> AppPeaks:
        self.peaks = dict.fromkeys((*KINDS, LARGEST_WORKER), 0)
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        """Stop sampling; the peaks by kind (and :data:`LARGEST_WORKER`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return dict(self.peaks)

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            now = self.sizes()
            for kind, sizes in now.items():
                self.peaks[kind] = max(self.peaks[kind], sum(sizes))
            workers = now["executor python"]
            self.peaks[LARGEST_WORKER] = max([self.peaks[LARGEST_WORKER], *workers])

    def sizes(self) -> dict[str, list[int]]:
        """The RSS of each of the application's processes now, by kind."""
        found: dict[str, list[int]] = {kind: [] for kind in KINDS}
        executors, pythons = set(), []
        for pid, cmdline in _processes():
            if pid == os.getpid():
                found["driver python"].append(_rss(pid))
            elif pid == self.driver_jvm:
                found["driver jvm"].append(_rss(pid))
            elif "CoarseGrainedExecutorBackend" in cmdline and self.app_id in cmdline:
                executors.add(pid)
                found["executor jvm"].append(_rss(pid))
            elif "pyspark.daemon" in cmdline or "pyspark/daemon.py" in cmdline:
                pythons.append(pid)
        parent = {pid: _parent(pid) for pid in pythons}
        for pid in pythons:  # the daemon's parent is an executor JVM; a worker's, the daemon
            if parent[pid] in executors or parent.get(parent[pid], -1) in executors:
                found["executor python"].append(_rss(pid))
        return found


def _processes() -> Iterator[tuple[int, str]]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            yield int(entry), raw.replace(b"\0", b" ").decode(errors="replace")


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
