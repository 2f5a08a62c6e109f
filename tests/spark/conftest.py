"""One real Spark standalone cluster for the whole test session, and one application on it.

- ``spark_cluster``: a master on 127.0.0.1 and one worker on each of 127.0.0.2, 127.0.0.3 and
  127.0.0.4 (1 core, executors of 512 MB), so executors sit on different hosts;
- ``spark_app``: a :class:`SparkApp` (one SparkSession, ``spark.locality.wait=30s``) that tests
  may restart (``restart()``) or damage (kill executors); ``spark_app.ready()`` waits until
  every worker host has a live executor again and returns them.

Every JVM is stopped at the end of the session, also when a test fails (and at interpreter exit).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import affinity_pipeline  # noqa: F401  (installed: pip install -e examples/pipeline)
except ImportError:  # not installed: use it from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "pipeline"))

from affinity_pipeline.cluster import StandaloneCluster
from spark_app import WORKER_HOSTS, SparkApp


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), WORKER_HOSTS)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def spark_app(spark_cluster: StandaloneCluster) -> Iterator[SparkApp]:
    app = SparkApp(spark_cluster, WORKER_HOSTS)
    try:
        app.start()
        yield app
    finally:
        app.stop()


@pytest.fixture
def app(spark_app: SparkApp) -> SparkApp:
    """The session's application, with an executor on every worker host (started again if it
    was stopped, e.g. by a module that ran an application of its own)."""
    if not spark_app.running:
        spark_app.session = None
        spark_app.start()
    spark_app.ready()
    return spark_app


@pytest.fixture
def store_dirs(tmp_path: Path) -> tuple[str, str]:
    """(local_store_dir, checkpoint_dir) of a fresh pipeline."""
    return str(tmp_path / "local"), str(tmp_path / "checkpoints")
