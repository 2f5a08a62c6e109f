"""coordinator.dev: a local environment to try affinity in (``affinity dev up`` / ``down`` /
``status``): a private ZooKeeper and a Spark standalone cluster on loopback, started as daemons
that outlive the command, their process ids and ports in a state file, and the job config to
use. A script reaches them through :class:`DevEnvironment`::

    dev = DevEnvironment.load()        # what `affinity dev up` started (.affinity-dev/)
    spark = dev.spark_session()        # a SparkSession on its master
    config = dev.config()              # its job config (ZooKeeper, state directories)

Beside ``demo``, above :mod:`coordinator.launchers` (whose ZooKeeper and Spark cluster it
starts), below ``cli``. May import everything in ``coordinator`` but ``cli`` and ``demo``, and
the three other packages.
"""

from __future__ import annotations

from coordinator.dev.environment import (
    DEFAULT_DIR,
    DevEnvironment,
    DevError,
    dev_down,
    dev_up,
)

__all__ = ["DEFAULT_DIR", "DevEnvironment", "DevError", "dev_down", "dev_up"]
