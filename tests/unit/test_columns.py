"""metadata.columns: job-model format 2 (columns), as the store writes it; readers take 1 and 2."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serde import _nodes, job_models, json_values, maybe_text, mutation_keys, task

from metadata.columns import COLUMNS_FORMAT, ModelColumns, task_columns, tasks_from_columns
from metadata.errors import JobModelFormatError
from metadata.model import ContainerModel, JobModel, SystemStreamPartition, TaskModel
from metadata.serde import (
    FORMATS,
    JobModelDocument,
    dump_job_model,
    load_container,
    load_job_model,
    load_job_model_document,
)


def encode(model: JobModel, run_id: str = "", grouper: str = "") -> bytes:
    return orjson.dumps(ModelColumns(model, run_id=run_id, grouper=grouper).document())


def valid_document() -> dict[str, Any]:
    return {
        "format": 2,
        "version": 7,
        "run_id": "r1",
        "grouper": "host-affinity",
        "config": {"a": "b"},
        "streams": [["kafka", "events"], ["kafka", "clicks"]],
        "containers": [
            {"processor_id": "p-1", "location_id": "zone-a/node-1", "tasks": 2},
            {"processor_id": "p-2", "location_id": None, "tasks": 1},
        ],
        "tasks": {
            "name": ["Partition 0", "Partition 3", "Partition 1"],
            "changelog_partition": [0, 3, 1],
            "partitions": [1, 2, 1],
        },
        "partitions": {
            "stream": [0, 0, 1, 0],
            "partition": [0, 3, 3, 1],
            "key_bucket": [-1, -1, -1, 2],
        },
    }


def expected_model() -> JobModel:
    events = SystemStreamPartition
    three = TaskModel(
        "Partition 3",
        frozenset({events("kafka", "events", 3), events("kafka", "clicks", 3)}),
        3,
    )
    bucket = TaskModel("Partition 1", frozenset({events("kafka", "events", 1, 2)}), 1)
    return JobModel(
        7,
        {
            "p-1": ContainerModel(
                "p-1", "zone-a/node-1", {"Partition 0": task(0), three.name: three}
            ),
            "p-2": ContainerModel("p-2", None, {bucket.name: bucket}),
        },
        {"a": "b"},
    )


def load(document: Any) -> JobModelDocument:
    return load_job_model_document(json.dumps(document))


def test_formats_read_are_one_and_two_and_dump_stays_format_one() -> None:
    assert FORMATS == (1, COLUMNS_FORMAT) == (1, 2)
    assert json.loads(dump_job_model(expected_model()))["format"] == 1


def test_documented_example_parses_to_expected_model() -> None:
    got = load(valid_document())
    assert got == JobModelDocument(expected_model(), "r1", "host-affinity")


@settings(max_examples=200)
@given(job_models(), maybe_text, maybe_text)
def test_round_trip_is_exact_and_agrees_with_format_one(
    model: JobModel, run_id: str, grouper: str
) -> None:
    data = encode(model, run_id, grouper)
    document = load_job_model_document(data)
    assert document == JobModelDocument(model, run_id, grouper)
    assert document == load_job_model_document(
        dump_job_model(model, run_id=run_id, grouper=grouper)
    )
    for pid, container in model.containers.items():
        assert load_container(data, pid) == (model.version, container)
    assert load_container(data, "\x00 nobody") == (model.version, None)


@settings(max_examples=100)
@given(job_models())
def test_encoding_is_deterministic_whatever_the_container_and_partition_order(
    model: JobModel,
) -> None:
    reordered = JobModel(
        model.version,
        {
            pid: ContainerModel(
                c.processor_id,
                c.location_id,
                {
                    name: TaskModel(name, reversed(sorted(t.partitions)), t.changelog_partition)  # type: ignore[arg-type]
                    for name, t in c.tasks.items()
                },
                {
                    name: TaskModel(name, reversed(sorted(t.partitions)), t.changelog_partition)  # type: ignore[arg-type]
                    for name, t in c.standby_tasks.items()
                },
            )
            for pid, c in reversed(model.containers.items())
        },
        dict(reversed(model.config.items())),
    )
    assert encode(reordered) == encode(model)


@settings(max_examples=100)
@given(job_models(max_containers=4), st.data())
def test_a_view_of_some_containers_reads_those_containers(
    model: JobModel, data: st.DataObject
) -> None:
    columns = ModelColumns(model, run_id="r")
    some = (
        data.draw(st.sets(st.sampled_from(list(model.containers)))) if model.containers else set()
    )
    view = orjson.dumps(columns.document(some))
    for pid, container in model.containers.items():
        assert load_container(view, pid) == (model.version, container if pid in some else None)


def test_missing_optional_columns_read_as_format_one_defaults() -> None:
    document = valid_document()
    for key in ("run_id", "grouper", "config"):
        del document[key]
    del document["tasks"]["changelog_partition"]
    del document["partitions"]["key_bucket"]
    del document["containers"][0]["location_id"]
    got = load(document)
    assert (got.run_id, got.grouper, dict(got.model.config)) == ("", "", {})
    assert got.model.containers["p-1"].location_id is None
    for t in got.model.tasks.values():
        assert t.changelog_partition == -1
        assert {p.key_bucket for p in t.partitions} == {-1}


def test_unknown_fields_are_ignored() -> None:
    document = valid_document()
    document["extra"] = [1]
    document["containers"][0]["weight"] = 3
    document["tasks"]["state_size"] = [1, 2, 3]
    document["partitions"]["offset"] = "latest"
    assert load(document).model == expected_model()


def _with(path: list[Any], value: Any, *, delete: bool = False) -> dict[str, Any]:
    document = valid_document()
    target: Any = document
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return document


MALFORMED: list[tuple[str, Any, str, str]] = [
    ("format 3", _with(["format"], 3), "format", "unsupported format 3"),
    ("streams object", _with(["streams"], {}), "streams", "expected a list"),
    ("stream pair short", _with(["streams", 1], ["kafka"]), "streams[1]", "[system, stream]"),
    ("stream system int", _with(["streams", 0, 0], 5), "streams[0][0]", "expected a string"),
    ("missing streams", _with(["streams"], None, delete=True), "streams", "missing"),
    ("containers object", _with(["containers"], {}), "containers", "expected a list"),
    ("container string", _with(["containers", 0], "p"), "containers[0]", "expected an object"),
    (
        "processor id missing",
        _with(["containers", 1, "processor_id"], None, delete=True),
        "containers[1].processor_id",
        "missing",
    ),
    (
        "processor id twice",
        _with(["containers", 1, "processor_id"], "p-1"),
        "containers[1].processor_id",
        "appears twice",
    ),
    (
        "processor id empty",
        _with(["containers", 0, "processor_id"], ""),
        "containers[0].processor_id",
        "empty",
    ),
    (
        "location int",
        _with(["containers", 0, "location_id"], 1),
        "containers[0].location_id",
        "string",
    ),
    ("task rows -1", _with(["containers", 0, "tasks"], -1), "containers[0].tasks", ">= 0"),
    ("task rows str", _with(["containers", 0, "tasks"], "2"), "containers[0].tasks", "integer"),
    (
        "too many task rows",
        _with(["containers", 0, "tasks"], 3),
        "tasks.name",
        "has 3 rows, expected 4",
    ),
    ("tasks list", _with(["tasks"], []), "tasks", "expected an object"),
    ("name int", _with(["tasks", "name", 1], 3), "tasks.name[1]", "expected a string, got 3"),
    ("name empty", _with(["tasks", "name", 2], ""), "tasks.name[2]", "empty"),
    (
        "name twice",
        _with(["tasks", "name", 2], "Partition 0"),
        "tasks.name[2]",
        "also assigned to 'p-1'",
    ),
    (
        "changelog bool",
        _with(["tasks", "changelog_partition", 0], True),
        "tasks.changelog_partition[0]",
        "True",
    ),
    ("counts -1", _with(["tasks", "partitions", 0], -1), "tasks.partitions[0]", ">= 0"),
    ("counts short", _with(["tasks", "partitions"], [1, 2]), "tasks.partitions", "has 2 rows"),
    (
        "partition rows short",
        _with(["partitions", "partition"], [0, 3, 3]),
        "partitions.partition",
        "has 3 rows, expected 4",
    ),
    (
        "partition -1",
        _with(["partitions", "partition", 3], -1),
        "partitions.partition[3]",
        "must be >= 0, got -1",
    ),
    (
        "partition float",
        _with(["partitions", "partition", 0], 1.0),
        "partitions.partition[0]",
        "integer",
    ),
    ("bucket -2", _with(["partitions", "key_bucket", 1], -2), "partitions.key_bucket[1]", ">= -1"),
    (
        "stream index out",
        _with(["partitions", "stream", 2], 2),
        "partitions.stream[2]",
        "no stream 2",
    ),
    ("stream index -1", _with(["partitions", "stream", 2], -1), "partitions.stream[2]", ">= 0"),
    ("partitions missing", _with(["partitions"], None, delete=True), "partitions", "missing"),
    (
        "partition column missing",
        _with(["partitions", "partition"], None, delete=True),
        "partitions.partition",
        "missing",
    ),
]


@pytest.mark.parametrize(
    ("document", "field", "problem"),
    [pytest.param(d, f, p, id=label) for label, d, f, p in MALFORMED],
)
def test_malformed_document_names_field_and_problem(
    document: Any, field: str, problem: str
) -> None:
    for read in (load, lambda d: load_container(json.dumps(d), "p-2")):
        with pytest.raises(JobModelFormatError) as caught:
            read(document)
        if caught.value.field.startswith("tasks.name") and "assigned" in problem:
            break  # a container read checks its own rows only
        assert caught.value.field == field
        assert problem in caught.value.problem


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    model = draw(job_models(max_containers=3, max_tasks=4))
    document: Any = json.loads(encode(model, "r", "g"))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_nodes(document)))
        kind = draw(st.sampled_from(["replace", "delete", "add", "rename"]))
        if not path:
            if kind == "replace":
                document = draw(json_values)
            continue
        parent: Any = document
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        if kind == "replace":
            parent[last] = draw(json_values)
        elif kind == "delete":
            del parent[last]
        elif isinstance(parent, dict) and kind == "add":
            parent[draw(mutation_keys)] = draw(json_values)
        elif isinstance(parent, dict):
            parent[draw(mutation_keys)] = parent.pop(last)
        else:
            parent.insert(last, draw(json_values))
    return document


@settings(max_examples=300)
@given(mutated_documents(), st.text(max_size=3))
def test_mutated_document_parses_or_raises_format_error(document: Any, pid: str) -> None:
    data = json.dumps(document)
    with contextlib.suppress(JobModelFormatError):
        load_container(data, pid)
    try:
        got = load_job_model_document(data)
    except JobModelFormatError as exc:
        assert exc.field
        assert exc.problem
        return
    assert load_job_model(encode(got.model)) == got.model


@settings(max_examples=200)
@given(job_models(max_containers=2, max_tasks=3), st.data())
def test_byte_mutations_parse_or_raise_format_error(model: JobModel, data: st.DataObject) -> None:
    raw = bytearray(encode(model, "r"))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(raw)))
        action = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        byte = data.draw(st.sampled_from(b'{}[],:"0123456789-eE.tfn \\\xff'))
        if action == "set" and index < len(raw):
            raw[index] = byte
        elif action == "insert":
            raw.insert(index, byte)
        elif action == "delete" and index < len(raw):
            del raw[index]
        elif action == "truncate":
            del raw[index:]
    with contextlib.suppress(JobModelFormatError):
        load_job_model_document(bytes(raw))


_PARTITIONS = st.builds(
    SystemStreamPartition,
    st.sampled_from(["kafka", "kinesis"]),
    st.sampled_from(["events", "clicks", "a stream"]),
    st.integers(0, 2**40),
    st.integers(-1, 7),
)
_TASK_LISTS = st.lists(
    st.tuples(st.frozensets(_PARTITIONS, max_size=4), st.integers(-1, 2**40)), max_size=30
).map(
    lambda drawn: [
        TaskModel(f"Partition {i}", partitions, changelog)
        for i, (partitions, changelog) in enumerate(reversed(drawn))
    ]
)


@settings(max_examples=200)
@given(_TASK_LISTS)
def test_a_task_list_crosses_as_columns_and_comes_back_equal_in_order(
    tasks: list[TaskModel],
) -> None:
    """The grouper's process receives the job's tasks this way (coordinator.leader.grouper_wire);
    the pipe pickles them."""
    back = tasks_from_columns(pickle.loads(pickle.dumps(task_columns(tasks))))
    assert back == tasks
    assert [hash(t) for t in back] == [hash(t) for t in tasks]
    assert all(type(t.partitions) is frozenset for t in back)


def test_task_columns_missing_partitions_or_naming_a_task_twice_are_refused() -> None:
    tasks = [
        TaskModel(f"Partition {n}", frozenset({SystemStreamPartition("kafka", "e", n)}), n)
        for n in range(3)
    ]
    columns = task_columns(tasks)
    with pytest.raises(ValueError):
        tasks_from_columns(dataclasses.replace(columns, partition=columns.partition[:2]))
    twice = dataclasses.replace(columns, names=["Partition 0", "Partition 1", "Partition 0"])
    with pytest.raises(ValueError, match="listed twice"):
        tasks_from_columns(twice)
