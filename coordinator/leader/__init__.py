"""coordinator.leader: the coordinator replica, the adapter that drives the leader machine
(:mod:`coordinator.protocol.leader`) over ZooKeeper: election, epoch fencing, watches turned
into events, the grouper run under a time limit, publishes and barrier decisions.

May import ``coordinator.protocol``, ``coordinator.config``, ``coordinator.observability``,
``metadata`` and ``groupers``.
"""
