"""coordinator.member: the member (processor) role: what a processor, or a Spark driver acting
for its executors, does towards the leader. Holds :mod:`~coordinator.member.executors` (one
processor registration per live Spark executor).

May import ``metadata``, ``groupers`` and ``locality``.
"""
