"""A user's code on the executors (issue 34, item 7): ``spark_session(python_modules=[...])``
puts the folder each module imports from on the executors' ``PYTHONPATH``, so a one-file module
and a module inside a package, neither installed anywhere, import on the 3-worker cluster's
executors. Their functions travel by name (pickled by reference, as any importable module's):
before the fix, the one-file module's grandparent was on the path and the executors failed with
``ModuleNotFoundError``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from affinity_pipeline.cluster import StandaloneCluster
from spark_app import stop_active_session

from coordinator.launchers.cluster import spark_session

pytestmark = pytest.mark.spark

MODULES = ("clicks_job_single", "clicks_job_pkg", "clicks_job_pkg.steps")


@pytest.fixture
def user_code(tmp_path: Path) -> Iterator[Path]:
    """``<tmp>/scripts/clicks_job_single.py`` and the package ``<tmp>/libs/clicks_job_pkg/``
    (folders apart: neither's import folder holds the other)."""
    scripts, libs = tmp_path / "scripts", tmp_path / "libs"
    (libs / "clicks_job_pkg").mkdir(parents=True)
    scripts.mkdir()
    (scripts / "clicks_job_single.py").write_text("def double(x):\n    return 2 * x\n")
    (libs / "clicks_job_pkg" / "__init__.py").write_text("")
    (libs / "clicks_job_pkg" / "steps.py").write_text("def plus_one(x):\n    return x + 1\n")
    sys.path[:0] = [str(scripts), str(libs)]
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(scripts))
        sys.path.remove(str(libs))
        for name in MODULES:
            sys.modules.pop(name, None)


def test_a_one_file_module_and_a_package_import_on_the_executors(
    spark_cluster: StandaloneCluster, user_code: Path
) -> None:
    single = importlib.import_module("clicks_job_single")
    package = importlib.import_module("clicks_job_pkg")
    steps = importlib.import_module("clicks_job_pkg.steps")
    stop_active_session()  # one SparkContext a process: the session's application stops
    session: Any = spark_session(
        spark_cluster.master_url,
        app_name="affinity-tests-user-modules",
        log4j_config=spark_cluster.quiet_log4j_config,
        python_modules=[single, package],
    )
    try:
        numbers = session.sparkContext.parallelize(range(6), 3)
        assert numbers.map(single.double).map(steps.plus_one).collect() == [1, 3, 5, 7, 9, 11]
        where = numbers.map(lambda _: single.__file__).distinct().collect()
        assert where == [
            str((user_code / "scripts" / "clicks_job_single.py").resolve())
        ]  # imported there
    finally:
        session.stop()
