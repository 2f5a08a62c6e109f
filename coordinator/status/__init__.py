"""coordinator.status: what an operator sees of a running job, read-only.

- :mod:`~coordinator.status.data`: the status document read from ZooKeeper (leader, versions,
  barrier, processors on the location tree, the last rebalances, the warm ratio when known);
  ``affinity status --json`` prints it, ``/status.json`` serves it.
- :mod:`~coordinator.status.page`: the self-contained HTML page served at ``/status`` (inline CSS
  and JavaScript only: nothing is loaded from outside the pod), refreshing itself from
  ``/status.json``.
"""

from coordinator.status.data import STATUS_FORMAT, JobStatusReader, location_tree

__all__ = ["STATUS_FORMAT", "JobStatusReader", "location_tree"]
