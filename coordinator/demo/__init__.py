"""coordinator.demo: ``affinity demo``: the Spark demo (a private ZooKeeper, a 3-host Spark
cluster, a stateful file-source query run by Spark's RocksDB state store and by
``stateful_foreach_batch`` with a real coordinator: the streaming race, also run by
``benchmarks/spark_streaming.py``), its report (table, plot, progress), and the grouper-only
simulation.

May import everything in ``coordinator`` and the three other packages, and the example pipeline
(``affinity_pipeline``, imported lazily).
"""
