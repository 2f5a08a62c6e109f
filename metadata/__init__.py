"""metadata: the data model, the job-model serde and the MetadataStore (ZooKeeper through kazoo).

- ``model``: the frozen data model (DESIGN.md "Data model") and ``BarrierState``;
- ``serde``: the job-model JSON format (format 1); ``columns`` and ``column_checks``: format 2,
  the tasks as columns (also how they cross to the grouper's process); ``checkpoints``: pure
  input-offset logic (SEP-32); ``bulk``: the garbage collector paused while a million objects
  are built;
- ``errors``: the errors of the package;
- ``zk``: the store on ZooKeeper (``connect``, ``ZkMetadataStore``) and, in ``zk.recipe``, its
  recipes (processors, locality, job models, barriers, epoch, checkpoints).

The bottom layer: it imports nothing from ``groupers``, ``locality`` or ``coordinator``; they all
import ``metadata.model``. See DESIGN.md "Data model" and "ZooKeeper layout".
"""
