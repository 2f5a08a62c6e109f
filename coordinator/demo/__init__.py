"""coordinator.demo: ``affinity demo``: the Spark demo (a private ZooKeeper, a 3-host Spark
cluster, a stateful file-source query run by Spark's RocksDB state store and by
``stateful_foreach_batch`` with a real coordinator: the streaming race, also run by
``benchmarks/spark_streaming.py``), its report (table, plot, progress), and the grouper-only
simulation. The daemons it starts come from :mod:`coordinator.launchers`.

May import everything in ``coordinator`` below ``cli`` and ``dev``, and the three other packages.
"""
