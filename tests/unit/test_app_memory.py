"""The benchmarks' memory measure (:class:`benchmarks._rss.AppPeaks`) counts one application's
processes only: stand-in processes named as Spark names them (an executor JVM's command line
carries its application's id; its Python daemon is its child, a worker the daemon's) for the
application measured and for another one on the same machine."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._rss import LARGEST_WORKER, AppPeaks  # noqa: E402

#: An "executor JVM" (argv names the class and the app) that starts a "daemon" child, which
#: starts a "worker" holding ``hold`` MiB; each sleeps until killed.
EXECUTOR = """
import subprocess, sys, time
mib = sys.argv[3]
code = (
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import time; b = bytearray(%s * 2**20); "
    "time.sleep(600)', 'pyspark.daemon'])" % mib + ";time.sleep(600)"
)
subprocess.Popen([sys.executable, "-c", code, "-m", "pyspark.daemon"])
time.sleep(600)
"""


@pytest.fixture
def executors() -> Iterator[None]:
    started = [
        subprocess.Popen(
            [sys.executable, "-c", EXECUTOR, "CoarseGrainedExecutorBackend", app, str(mib)],
            start_new_session=True,
        )
        for app, mib in (("app-measured-0001", 64), ("app-other-0002", 128))
    ]
    time.sleep(2.0)  # both grandchildren started and allocated
    yield
    for process in started:
        subprocess.run(["pkill", "-KILL", "-s", str(process.pid)], check=False)
        process.wait()


def test_only_the_application_s_executors_and_their_pythons_count(executors: None) -> None:
    sizes = AppPeaks("app-measured-0001", driver_jvm=-1).sizes()
    assert len(sizes["executor jvm"]) == 1
    assert len(sizes["executor python"]) == 2  # the daemon and its worker, not the other app's
    assert 64 * 2**20 < max(sizes["executor python"]) < 128 * 2**20
    assert len(sizes["driver python"]) == 1 and sizes["driver jvm"] == []


def test_peaks_keep_the_largest_worker_and_the_sums(executors: None) -> None:
    peaks = AppPeaks("app-measured-0001", driver_jvm=-1).start()
    time.sleep(0.5)
    found = peaks.stop()
    assert 64 * 2**20 < found[LARGEST_WORKER] < 128 * 2**20
    assert found["executor python"] >= found[LARGEST_WORKER]
    assert found["driver python"] > 0 and found["driver jvm"] == 0
