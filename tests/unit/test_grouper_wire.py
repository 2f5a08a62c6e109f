"""The grouper's wire to its worker process carries everything of issue 13 both ways: the
metadata's ``processor_capacity`` and ``task_state`` on the way in, each container's
``standby_tasks`` on the way back (they were dropped). The pipe pickles, so the round trip here
pickles too; tests/integration/test_grouper_worker.py runs the real process."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.leader.grouper_wire import (
    decode_answer,
    decode_metadata,
    decode_tasks,
    encode_answer,
    encode_metadata,
    encode_tasks,
)
from groupers import get_grouper
from groupers.testing import GrouperInput, grouper_inputs


def _through_pipe(value: object) -> object:
    return pickle.loads(pickle.dumps(value))


@settings(max_examples=100, deadline=None)
@given(grouper_inputs(replicas=True, min_processors=2), st.integers(1, 2))
def test_standbys_capacity_and_state_cross_the_wire(data: GrouperInput, replicas: int) -> None:
    tasks = tuple(data.tasks)
    known = {task.name: task for task in tasks}
    sent = _through_pipe(encode_tasks(tasks))
    worker_tasks = decode_tasks(sent)  # type: ignore[arg-type]
    worker_known = {task.name: task for task in worker_tasks}
    metadata = decode_metadata(
        _through_pipe(encode_metadata(data.metadata, known)),  # type: ignore[arg-type]
        worker_known,
    )
    assert metadata == data.metadata
    assert metadata.processor_capacity == data.metadata.processor_capacity
    assert metadata.task_state == data.metadata.task_state
    answer = get_grouper("host-affinity", standby_replicas=replicas).group(worker_tasks, metadata)
    kind, payload = _through_pipe(encode_answer(answer, worker_known))  # type: ignore[misc]
    assert kind == "containers"
    back = decode_answer(kind, payload, known)
    assert back == answer
    assert {c.processor_id: dict(c.standby_tasks) for c in back} == {  # type: ignore[attr-defined]
        c.processor_id: dict(c.standby_tasks) for c in answer
    }
    if len(data.metadata.processor_locality) > 1 and tasks:
        assert any(c.standby_tasks for c in back)  # type: ignore[attr-defined]


def test_a_standby_that_is_not_a_job_task_travels_raw() -> None:
    from metadata.model import ContainerModel, SystemStreamPartition, TaskModel

    task = TaskModel("Partition 0", frozenset({SystemStreamPartition("kafka", "e", 0)}), 0)
    stranger = TaskModel("Partition 9", frozenset({SystemStreamPartition("kafka", "e", 9)}), 9)
    answer = {ContainerModel("p-0", "h", {task.name: task}, {stranger.name: stranger})}
    kind, payload = encode_answer(answer, {task.name: task})
    assert kind == "raw" and payload is answer
