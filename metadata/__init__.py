"""metadata: the data model, the job-model serde and the MetadataStore (ZooKeeper through kazoo).

The bottom layer: it imports nothing from ``groupers``, ``locality`` or ``coordinator``; they all
import ``metadata.model``. See DESIGN.md "Data model" and "ZooKeeper layout".
"""
