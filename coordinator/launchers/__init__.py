"""coordinator.launchers: the local daemons every try-out, test, demo and benchmark starts, each
a real server on loopback: the one ZooKeeper launcher (:mod:`~coordinator.launchers.zookeeper`)
and its 3-server ensemble (:mod:`~coordinator.launchers.ensemble`), the one Kafka launcher
(:mod:`~coordinator.launchers.kafka`), the Spark standalone cluster
(:mod:`~coordinator.launchers.cluster`) and their process helpers
(:mod:`~coordinator.launchers.processes`).

Used by ``dev``, ``demo`` and ``cli`` (and the tests, benchmarks and examples); imports nothing
else of ``coordinator`` (the import-linter contracts in pyproject.toml), only ``locality.spark``
(the jar, the Maven jars, the Kafka admin calls), kazoo and the standard library.
"""
