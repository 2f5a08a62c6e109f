"""Fixtures shared by the integration tests (the ZooKeeper ones are in ``tests/conftest.py``).

- ``job_factory``: a :class:`~jobharness.JobHarness` class bound to the test's own ZooKeeper
  server and work directory; every job made with it is stopped after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobharness import JobHarness

from coordinator.launchers.zookeeper import EmbeddedZooKeeper


@pytest.fixture
def job_factory(zk_private_server: EmbeddedZooKeeper, tmp_path: Path) -> Iterator[type[JobHarness]]:
    made: list[JobHarness] = []

    class Factory(JobHarness):
        def __init__(self, **kw: object) -> None:
            super().__init__(zk_private_server, tmp_path / f"job{len(made)}", **kw)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for job in made:
        job.stop_all()
