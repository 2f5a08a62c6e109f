"""ZooKeeper recipes of one job, one module and one class each (as kazoo's recipes)."""
