"""coordinator.protocol: every rule of the barrier protocol, as state machines with no I/O.

``leader`` is the coordinator's machine (when to rebalance, what to publish, who loses a task,
when a barrier is decided, when old versions go); ``member`` is a processor's (stop what you
lose, join, start on DONE, retry, stop everything on session loss). Adapters in
``coordinator.leader`` and ``coordinator.member`` drive them. May import ``metadata.model`` and
``groupers`` (the grouper contract); never kazoo, ``metadata.zk``, threads or clocks.
"""
