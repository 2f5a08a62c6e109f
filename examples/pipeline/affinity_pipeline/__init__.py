"""affinity's reference stateful pipeline on PySpark (the main job of ``affinity demo``).

- :mod:`affinity_pipeline.events`: the deterministic input, the key -> task split, and the
  single-process reference computation;
- :mod:`affinity_pipeline.store`: a task's local store and checkpoints (warm / cold);
- :mod:`affinity_pipeline.standby`: standby copies kept warm on their hosts from each batch's
  checkpoint delta, and their lags reported to ZooKeeper;
- :mod:`affinity_pipeline.job`: :class:`StatefulPipeline` (driver) and :func:`process_task`
  (executor);
- :mod:`affinity_pipeline.cluster`: a standalone Spark cluster with workers on loopback
  addresses, and a lean :func:`spark_session`.
"""

from affinity_pipeline.events import (
    INPUT_STREAM,
    INPUT_SYSTEM,
    PipelineConfig,
    generate_batch,
    reference_outputs,
    split_by_task,
    task_names,
    task_of_key,
)
from affinity_pipeline.job import BatchReport, StatefulPipeline, TaskOutcome, process_task

__all__ = [
    "INPUT_STREAM",
    "INPUT_SYSTEM",
    "BatchReport",
    "PipelineConfig",
    "StatefulPipeline",
    "TaskOutcome",
    "generate_batch",
    "process_task",
    "reference_outputs",
    "split_by_task",
    "task_names",
    "task_of_key",
]
