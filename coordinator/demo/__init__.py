"""coordinator.demo: ``affinity demo``: the Spark demo (a private ZooKeeper, a real coordinator,
a 3-host Spark cluster, the reference pipeline placed by affinity against Spark's default), its
report (table, plot, progress), and the grouper-only simulation.

May import everything in ``coordinator`` and the three other packages, and the example pipeline
(``affinity_pipeline``, imported lazily).
"""
