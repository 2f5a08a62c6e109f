"""coordinator: leader election, job-model generation, the barrier, the processor client, the
long-running service and the ``affinity`` command line.

The top layer: may import ``metadata``, ``groupers`` and ``locality``; nothing imports it.
"""
