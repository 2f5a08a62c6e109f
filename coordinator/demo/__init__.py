"""coordinator.demo: ``affinity demo``: the Spark demo (a private ZooKeeper, a 3-host Spark
cluster, a stateful file-source query run by Spark's RocksDB state store and by
``stateful_foreach_batch`` with a real coordinator: the streaming race, also run by
``benchmarks/spark_streaming.py``), its report (table, plot, progress), and the grouper-only
simulation; and the local daemons every try-out, test and benchmark starts: the one ZooKeeper
launcher (:mod:`~coordinator.demo.zookeeper`), the one Kafka launcher
(:mod:`~coordinator.demo.kafka`), the Spark standalone cluster on loopback
(:mod:`~coordinator.demo.cluster`) and their process helpers (:mod:`~coordinator.demo.processes`).

May import everything in ``coordinator`` below ``cli`` and ``dev``, and the three other packages.
"""
