"""coordinator: the barrier protocol and the processes that play it.

- ``protocol``: every rule that decides, as machines with no I/O (the leader's, the member's,
  and the rules they share);
- ``leader``: a coordinator replica (election, fencing, the grouper run, publishes, barriers);
- ``member``: processors following the job models (one processor, or a Spark driver's
  executors), executor registration;
- ``streaming``: ``stateful_foreach_batch``, the Structured Streaming runtime (a Spark driver
  member, optionally embedding a coordinator replica);
- ``cli``: the ``affinity`` command; ``dev``: ``affinity dev up``; ``demo``: ``affinity demo``;
- ``launchers``: the local daemons (ZooKeeper, an ensemble, Kafka, a Spark standalone cluster)
  that ``dev``, ``demo``, the tests and the benchmarks start;
- ``config`` (the job config) and ``observability`` (logging, metrics, health endpoints).

The top layer: may import ``metadata``, ``groupers`` and ``locality``; nothing imports it.
Inside, roles point one way: cli > dev | demo > launchers > streaming > leader | member | status
> protocol, and no cycle between modules (import-linter).
"""
