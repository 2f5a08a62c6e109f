"""The ZooKeeper recipes of one job, one module and one class each, in the manner of kazoo's
``kazoo/recipe/``; :class:`~metadata.zk.ZkMetadataStore` holds one of each as an attribute.

=================  =====================  ==================================================
module             class                  job
=================  =====================  ==================================================
``processors``     ``ProcessorRegistry``  ``store.processors``: live processors and where
``locality``       ``TaskLocalityStore``  ``store.locality``: task -> location, per run (I7)
``jobmodels``      ``JobModelStore``      ``store.job_models``: publish, read, retention
``barriers``       ``Barriers``           ``store.barriers``: join, watch, decide
``epoch``          ``LeaderEpochs``       ``store.epochs``: acquire, fence leader writes
``checkpoints``    ``CheckpointStore``    ``store.checkpoints``: input offsets (SEP-32)
``batches``        ``BatchHistory``       ``store.batches``: the last streaming batches
``standby_lag``    ``StandbyLagStore``    ``store.standby_lag``: standby copies' lag, per
                                          processor, written differentially
``streaming_       ``StreamingCommits``   ``store.streaming_commits``: a streaming query's
commits``                                 driver epoch and commit pointer
=================  =====================  ==================================================

Every ZooKeeper call goes through :class:`~metadata.zk.ops.ZkOps` (bounded tenacity retries,
error mapping). Recipes store and read; they decide nothing about the protocol. They may import
the plumbing of :mod:`metadata.zk` (never :mod:`metadata.zk.store`), ``metadata.model``,
``metadata.serde``, ``metadata.checkpoints``, ``metadata.errors`` and one another (job models
create and remove barriers; barriers and job models fence through the epoch).
"""

from metadata.zk.recipe.barriers import Barriers
from metadata.zk.recipe.batches import BatchEntry, BatchHistory, TaskPlace
from metadata.zk.recipe.checkpoints import CheckpointStore
from metadata.zk.recipe.epoch import LeaderEpoch, LeaderEpochs
from metadata.zk.recipe.jobmodels import JobModelStore
from metadata.zk.recipe.locality import TaskLocalityStore
from metadata.zk.recipe.processors import ProcessorRegistration, ProcessorRegistry
from metadata.zk.recipe.standby_lag import StandbyLagStore
from metadata.zk.recipe.streaming_commits import (
    CommitPointer,
    DriverFenced,
    DriverLease,
    StreamingCommits,
)

__all__ = [
    "Barriers",
    "BatchEntry",
    "BatchHistory",
    "CheckpointStore",
    "JobModelStore",
    "LeaderEpoch",
    "LeaderEpochs",
    "ProcessorRegistration",
    "ProcessorRegistry",
    "CommitPointer",
    "DriverFenced",
    "DriverLease",
    "StandbyLagStore",
    "StreamingCommits",
    "TaskLocalityStore",
    "TaskPlace",
]
