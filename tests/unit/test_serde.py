"""metadata.serde (job-model format 1) and metadata.model (the frozen data model)."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.errors import JobModelFormatError
from metadata.model import (
    ContainerModel,
    FrozenMap,
    JobModel,
    StreamInput,
    SystemStreamPartition,
    TaskModel,
    task_to_processor,
)
from metadata.serde import (
    JobModelDocument,
    dump_job_model,
    job_model_from_dict,
    job_model_to_dict,
    load_job_model,
    load_job_model_document,
)

# ---------------------------------------------------------------- strategies

names = st.text(min_size=1, max_size=12)
maybe_text = st.text(max_size=12)

ssps = st.builds(
    SystemStreamPartition,
    system=maybe_text,
    stream=maybe_text,
    partition=st.integers(0, 2**40),
    key_bucket=st.integers(-1, 7),
)


@st.composite
def job_models(
    draw: st.DrawFn, max_containers: int = 4, max_tasks: int = 8, standbys: bool = True
) -> JobModel:
    """An arbitrary valid JobModel: unicode ids, None locations, any config, and (with
    ``standbys``) standby replicas of other containers' tasks."""
    pids = draw(st.lists(names, max_size=max_containers, unique=True))
    task_names = draw(st.lists(names, max_size=max_tasks if pids else 0, unique=True))
    owners = {t: draw(st.sampled_from(pids)) for t in task_names}
    models = {
        t: TaskModel(t, draw(st.frozensets(ssps, max_size=3)), draw(st.integers(-1, 10_000)))
        for t in task_names
    }
    containers = {}
    for pid in pids:
        tasks = {t: models[t] for t, owner in owners.items() if owner == pid}
        location = draw(st.none() | maybe_text)
        others = [t for t, owner in owners.items() if owner != pid]
        copies = draw(st.lists(st.sampled_from(others), unique=True)) if standbys and others else []
        containers[pid] = ContainerModel(pid, location, tasks, {t: models[t] for t in copies})
    config = draw(st.dictionaries(maybe_text, maybe_text, max_size=5))
    version = draw(st.integers(0, 2**53))
    return JobModel(version, containers, config)


def reordered(model: JobModel, *, config: bool) -> JobModel:
    """An equal model built with every mapping inserted in reverse order."""
    containers = {}
    for pid, c in reversed(list(model.containers.items())):
        tasks = {
            name: TaskModel(name, reversed(sorted(t.partitions)), t.changelog_partition)  # type: ignore[arg-type]
            for name, t in reversed(list(c.tasks.items()))
        }
        standbys = dict(reversed(list(c.standby_tasks.items())))
        containers[pid] = ContainerModel(c.processor_id, c.location_id, tasks, standbys)
    items = list(model.config.items())
    return JobModel(model.version, containers, dict(reversed(items) if config else items))


def ssp(partition: int, key_bucket: int = -1) -> SystemStreamPartition:
    return SystemStreamPartition("kafka", "events", partition, key_bucket)


def task(n: int) -> TaskModel:
    return TaskModel(f"Partition {n}", frozenset({ssp(n)}), n)


def valid_document() -> dict[str, Any]:
    return {
        "format": 1,
        "version": 7,
        "run_id": "r1",
        "grouper": "host-affinity",
        "config": {"a": "b"},
        "containers": {
            "p-1": {
                "processor_id": "p-1",
                "location_id": "zone-a/node-1",
                "tasks": {
                    "Partition 0": {
                        "name": "Partition 0",
                        "changelog_partition": 0,
                        "partitions": [
                            {
                                "system": "kafka",
                                "stream": "events",
                                "partition": 0,
                                "key_bucket": -1,
                            }
                        ],
                    }
                },
            },
            "p-2": {
                "processor_id": "p-2",
                "location_id": None,
                "tasks": {
                    "Partition 1": {
                        "name": "Partition 1",
                        "changelog_partition": 1,
                        "partitions": [
                            {"system": "kafka", "stream": "events", "partition": 1, "key_bucket": 2}
                        ],
                    }
                },
            },
        },
    }


def load(document: Any) -> JobModelDocument:
    return load_job_model_document(json.dumps(document))


# ---------------------------------------------------------------- round trip


@settings(max_examples=200)
@given(job_models(), maybe_text, maybe_text)
def test_round_trip_is_exact(model: JobModel, run_id: str, grouper: str) -> None:
    data = dump_job_model(model, run_id=run_id, grouper=grouper)
    assert isinstance(data, bytes)
    document = load_job_model_document(data)
    assert document.model == model
    assert document.run_id == run_id
    assert document.grouper == grouper
    # Every attribute, not only the model-level equality.
    assert document.model.version == model.version
    assert dict(document.model.config) == dict(model.config)
    for pid, container in model.containers.items():
        got = document.model.containers[pid]
        assert got.location_id == container.location_id
        assert dict(got.tasks) == dict(container.tasks)
        assert dict(got.standby_tasks) == dict(container.standby_tasks)
    # str input too, and the dict-level API agrees.
    assert load_job_model(data.decode()) == model
    assert job_model_from_dict(job_model_to_dict(model, run_id=run_id, grouper=grouper)) == document


@settings(max_examples=100)
@given(job_models())
def test_dump_is_deterministic_for_container_task_and_partition_order(model: JobModel) -> None:
    other = reordered(model, config=False)
    assert other == model
    assert dump_job_model(other, run_id="r") == dump_job_model(model, run_id="r")


@settings(max_examples=100)
@given(job_models())
def test_dump_is_deterministic_for_config_order(model: JobModel) -> None:
    other = reordered(model, config=True)
    assert other == model
    assert dump_job_model(other) == dump_job_model(model)


@given(job_models(standbys=False))
def test_models_without_standbys_write_no_standby_field(model: JobModel) -> None:
    written = job_model_to_dict(model)
    assert all("standby_tasks" not in c for c in written["containers"].values())


def test_standby_tasks_written_like_tasks_and_read_back() -> None:
    model = JobModel(
        3,
        {
            "p-1": ContainerModel("p-1", "zone-a/h1", {"Partition 0": task(0)}, {}),
            "p-2": ContainerModel("p-2", "zone-b/h2", {}, {"Partition 0": task(0)}),
        },
    )
    written = json.loads(dump_job_model(model))
    assert "standby_tasks" not in written["containers"]["p-1"]
    assert written["containers"]["p-2"]["standby_tasks"] == written["containers"]["p-1"]["tasks"]
    assert load_job_model(json.dumps(written)) == model
    assert model.containers["p-2"] != ContainerModel("p-2", "zone-b/h2", {})
    assert len({model.containers["p-2"], ContainerModel("p-2", "zone-b/h2", {})}) == 2


def test_malformed_standby_tasks_name_the_field() -> None:
    document = valid_document()
    document["containers"]["p-1"]["standby_tasks"] = {"Partition 1": {"name": "other"}}
    with pytest.raises(JobModelFormatError, match=r"standby_tasks\.Partition 1\.name"):
        load(document)
    document["containers"]["p-1"]["standby_tasks"] = []
    with pytest.raises(JobModelFormatError, match=r"p-1\.standby_tasks"):
        load(document)


def test_dump_sorts_config_keys() -> None:
    """dump_job_model promises 'keys sorted by name': config included."""
    first = JobModel(1, {}, {"b": "2", "a": "1"})
    second = JobModel(1, {}, {"a": "1", "b": "2"})
    assert first == second
    assert dump_job_model(first) == dump_job_model(second)
    assert list(json.loads(dump_job_model(first))["config"]) == ["a", "b"]


def test_dump_layout_is_compact_utf8_with_every_field() -> None:
    model = JobModel(
        3,
        {"p-é": ContainerModel("p-é", None, {"Partition 0": task(0)})},
        {"k": "v"},
    )
    data = dump_job_model(model, run_id="r1", grouper="host-affinity")
    assert b" " not in data.replace(b"Partition 0", b"")
    assert "p-é".encode() in data  # not \u-escaped
    document = json.loads(data)
    assert document == {
        "format": 1,
        "version": 3,
        "run_id": "r1",
        "grouper": "host-affinity",
        "config": {"k": "v"},
        "containers": {
            "p-é": {
                "processor_id": "p-é",
                "location_id": None,
                "tasks": {
                    "Partition 0": {
                        "name": "Partition 0",
                        "changelog_partition": 0,
                        "partitions": [
                            {
                                "system": "kafka",
                                "stream": "events",
                                "partition": 0,
                                "key_bucket": -1,
                            }
                        ],
                    }
                },
            }
        },
    }


# ---------------------------------------------------------------- lenient reading


def test_design_example_parses_to_expected_model() -> None:
    text = """
    {"format": 1, "version": 7, "run_id": "r1", "grouper": "host-affinity", "config": {},
     "containers": {"p-1": {"processor_id": "p-1", "location_id": "zone-a/node-1",
       "tasks": {"Partition 0": {"name": "Partition 0", "changelog_partition": 0,
         "partitions": [{"system": "kafka", "stream": "events", "partition": 0,
                         "key_bucket": -1}]}}}}}
    """
    document = load_job_model_document(text)
    expected = JobModel(
        7,
        {"p-1": ContainerModel("p-1", "zone-a/node-1", {"Partition 0": task(0)})},
        {},
    )
    assert document == JobModelDocument(expected, "r1", "host-affinity")
    assert document.model.task_to_processor() == {"Partition 0": "p-1"}


def test_unknown_fields_at_every_level_are_ignored() -> None:
    document = valid_document()
    expected = load(document)
    document["extra"] = {"nested": [1, 2]}
    document["config_v2"] = 5
    for container in document["containers"].values():
        container["weight"] = 3
        container["host"] = None
        for t in container["tasks"].values():
            t["state_size"] = 1024
            for p in t["partitions"]:
                p["offset"] = "latest"
    assert load(document) == expected


def test_partition_without_key_bucket_is_whole_partition() -> None:
    document = valid_document()
    del document["containers"]["p-2"]["tasks"]["Partition 1"]["partitions"][0]["key_bucket"]
    model = load(document).model
    (got,) = model.containers["p-2"].tasks["Partition 1"].partitions
    assert got == SystemStreamPartition("kafka", "events", 1, -1)
    assert got.key_bucket == -1


def test_legacy_container_id_is_ignored() -> None:
    document = valid_document()
    expected = load(document)
    document["containers"]["p-1"]["container_id"] = "0"
    document["containers"]["p-2"]["container_id"] = 17  # even a wrongly typed one
    assert load(document) == expected


def test_missing_optional_fields_are_fine() -> None:
    document = valid_document()
    for key in ("run_id", "grouper", "config"):
        del document[key]
    for container in document["containers"].values():
        del container["location_id"]
        for t in container["tasks"].values():
            del t["changelog_partition"]
    got = load(document)
    assert got.run_id == ""
    assert got.grouper == ""
    assert dict(got.model.config) == {}
    assert got.model.version == 7
    for container in got.model.containers.values():
        assert container.location_id is None
        for t in container.tasks.values():
            assert t.changelog_partition == -1
    assert got.model.task_to_processor() == {"Partition 0": "p-1", "Partition 1": "p-2"}


def test_minimal_document() -> None:
    got = load({"format": 1, "version": 0, "containers": {}})
    assert got == JobModelDocument(JobModel(0, {}, {}), "", "")


def test_container_without_processor_id_or_tasks_uses_its_key() -> None:
    got = load({"format": 1, "version": 1, "containers": {"p-9": {}}})
    assert got.model.containers == {"p-9": ContainerModel("p-9", None, {})}


def test_bytes_with_utf8_text() -> None:
    document = valid_document()
    document["containers"] = {"ü-1": {"processor_id": "ü-1", "location_id": "höst"}}
    model = load_job_model(json.dumps(document, ensure_ascii=False).encode())
    assert model.containers["ü-1"].location_id == "höst"


# ---------------------------------------------------------------- malformed input

P0 = "containers.p-1.tasks.Partition 0"


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


TASK = ["containers", "p-1", "tasks", "Partition 0"]
PART = [*TASK, "partitions", 0]

MALFORMED: list[tuple[str, Any, str, str]] = [
    ("not an object", [1, 2], "<document>", "expected an object"),
    ("string document", "hello", "<document>", "expected an object"),
    ("null document", None, "<document>", "expected an object"),
    ("missing format", _with(["format"], None, delete=True), "format", "missing"),
    ("format 3", _with(["format"], 3), "format", "unsupported format 3"),
    ("format string", _with(["format"], "1"), "format", "expected an integer"),
    ("version -1", _with(["version"], -1), "version", "must be >= 0"),
    ("version '7'", _with(["version"], "7"), "version", "expected an integer, got '7'"),
    ("version 7.0", _with(["version"], 7.0), "version", "expected an integer"),
    ("version true", _with(["version"], True), "version", "expected an integer, got True"),
    ("missing version", _with(["version"], None, delete=True), "version", "missing"),
    ("missing containers", _with(["containers"], None, delete=True), "containers", "missing"),
    ("containers list", _with(["containers"], []), "containers", "expected an object"),
    ("run_id int", _with(["run_id"], 5), "run_id", "expected a string"),
    ("grouper list", _with(["grouper"], []), "grouper", "expected a string"),
    ("config list", _with(["config"], ["a"]), "config", "expected an object"),
    ("config value int", _with(["config", "a"], 1), "config.a", "expected a string"),
    (
        "container not object",
        _with(["containers", "p-1"], "x"),
        "containers.p-1",
        "expected an object",
    ),
    (
        "processor_id differs",
        _with(["containers", "p-1", "processor_id"], "p-2"),
        "containers.p-1.processor_id",
        "differs from its key",
    ),
    (
        "location_id int",
        _with(["containers", "p-1", "location_id"], 3),
        "containers.p-1.location_id",
        "expected a string",
    ),
    (
        "tasks list",
        _with(["containers", "p-1", "tasks"], []),
        "containers.p-1.tasks",
        "expected an object",
    ),
    ("task name differs", _with([*TASK, "name"], "Partition 9"), f"{P0}.name", "differs"),
    ("task missing name", _with([*TASK, "name"], None, delete=True), f"{P0}.name", "missing"),
    ("task name empty", _with([*TASK, "name"], ""), P0, "empty"),
    (
        "changelog bool",
        _with([*TASK, "changelog_partition"], False),
        f"{P0}.changelog_partition",
        "expected an integer, got False",
    ),
    ("partitions object", _with([*TASK, "partitions"], {}), f"{P0}.partitions", "expected a list"),
    ("partition entry", _with(PART, 5), f"{P0}.partitions[0]", "expected an object"),
    (
        "partition 'x'",
        _with([*PART, "partition"], "x"),
        f"{P0}.partitions[0].partition",
        "expected an integer, got 'x'",
    ),
    (
        "partition bool",
        _with([*PART, "partition"], True),
        f"{P0}.partitions[0].partition",
        "expected an integer, got True",
    ),
    ("partition -1", _with([*PART, "partition"], -1), f"{P0}.partitions[0]", ">= 0"),
    (
        "missing partition",
        _with([*PART, "partition"], None, delete=True),
        f"{P0}.partitions[0].partition",
        "missing",
    ),
    (
        "key_bucket -2",
        _with([*PART, "key_bucket"], -2),
        f"{P0}.partitions[0]",
        "key_bucket must be >= -1",
    ),
    (
        "key_bucket string",
        _with([*PART, "key_bucket"], "0"),
        f"{P0}.partitions[0].key_bucket",
        "expected an integer",
    ),
    (
        "system null",
        _with([*PART, "system"], None),
        f"{P0}.partitions[0].system",
        "expected a string, got None",
    ),
    (
        "stream missing",
        _with([*PART, "stream"], None, delete=True),
        f"{P0}.partitions[0].stream",
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
    with pytest.raises(JobModelFormatError) as info:
        load(document)
    assert info.value.field == field
    assert problem in info.value.problem
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, ValueError)


def test_task_listed_under_two_processors() -> None:
    document = valid_document()
    document["containers"]["p-2"]["tasks"]["Partition 0"] = copy.deepcopy(
        document["containers"]["p-1"]["tasks"]["Partition 0"]
    )
    with pytest.raises(JobModelFormatError) as info:
        load(document)
    assert info.value.field == "containers.p-2.tasks.Partition 0"
    assert "'p-1'" in info.value.problem
    assert "also assigned" in info.value.problem


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"not json", b"\xff\xfe\x00garbage", "{'format': 1}", b'{"format": 1,}'],
)
def test_not_json(data: bytes | str) -> None:
    with pytest.raises(JobModelFormatError) as info:
        load_job_model_document(data)
    assert info.value.field == "<document>"
    assert "not valid JSON" in info.value.problem


def test_empty_container_key_raises_format_error() -> None:
    """A container keyed "" is malformed input: it must be JobModelFormatError, naming the path."""
    data = b'{"format": 1, "version": 0, "containers": {"": {}}}'
    with pytest.raises(JobModelFormatError) as info:
        load_job_model_document(data)
    assert info.value.field.startswith("containers.")


def test_huge_integer_raises_format_error() -> None:
    """An integer beyond Python's int-string limit is malformed input, not a bare ValueError."""
    data = b'{"format": 1, "version": ' + b"1" * 5000 + b', "containers": {}}'
    with pytest.raises(JobModelFormatError):
        load_job_model_document(data)


def test_deeply_nested_json_raises_format_error() -> None:
    """Corrupt data nested too deep for the JSON decoder is still a format error."""
    data = b'{"format": 1, "version": 0, "containers": {}, "x": ' + b"[" * 100_000 + b"}"
    with pytest.raises(JobModelFormatError):
        load_job_model_document(data)


# ---------------------------------------------------------------- random mutations

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**70) | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
mutation_keys = st.sampled_from(
    ["", "format", "version", "name", "partition", "key_bucket", "processor_id", "tasks", "x"]
) | st.text(max_size=4)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the root is ())."""
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _nodes(child, (*path, index))
    return found


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    model = draw(job_models(max_containers=3, max_tasks=4))
    document: Any = job_model_to_dict(model, run_id="r", grouper="g")
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
@given(mutated_documents())
def test_mutated_document_parses_or_raises_format_error(document: Any) -> None:
    data = json.dumps(document)
    try:
        got = load_job_model_document(data)
    except JobModelFormatError as exc:
        assert exc.field
        assert exc.problem
        return
    assert isinstance(got.model, JobModel)
    # Whatever parsed is itself a valid model that survives a round trip.
    assert load_job_model(dump_job_model(got.model)) == got.model


@settings(max_examples=200)
@given(job_models(max_containers=2, max_tasks=3), st.data())
def test_byte_mutations_parse_or_raise_format_error(model: JobModel, data: st.DataObject) -> None:
    raw = bytearray(dump_job_model(model, run_id="r"))
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


# ---------------------------------------------------------------- model


def test_frozen_map_equality_ignores_order_and_matches_dicts() -> None:
    a = FrozenMap({"x": 1, "y": 2})
    b = FrozenMap([("y", 2), ("x", 1)])
    assert a == b
    assert hash(a) == hash(b)
    assert a == {"x": 1, "y": 2}
    assert dict([("y", 2), ("x", 1)]) == a
    assert a != FrozenMap({"x": 1})
    assert a != FrozenMap({"x": 1, "y": 3})
    assert a != [("x", 1), ("y", 2)]
    assert (a == 5) is False
    assert list(a) == ["x", "y"]  # insertion order kept
    assert list(b.keys()) == ["y", "x"]
    assert len(a) == 2
    assert "x" in a and "z" not in a
    assert a.get("z") is None and a.get("z", 0) == 0 and a.get("y") == 2
    assert dict(a.items()) == {"x": 1, "y": 2}
    assert sorted(a.values()) == [1, 2]
    assert len({a, b, FrozenMap({"x": 1})}) == 2
    assert FrozenMap() == {} and hash(FrozenMap()) == hash(FrozenMap({}))
    assert "FrozenMap" in repr(a)


def test_frozen_map_is_immutable_and_copies_its_input() -> None:
    source = {"x": 1}
    frozen = FrozenMap(source)
    source["y"] = 2
    assert frozen == {"x": 1}
    with pytest.raises(TypeError):
        frozen["x"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        del frozen["x"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        frozen.update({"z": 3})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        frozen.anything = 1  # type: ignore[attr-defined]
    assert frozen == {"x": 1}
    with pytest.raises(KeyError):
        frozen["missing"]


@given(st.dictionaries(st.text(max_size=4), st.integers(), max_size=8), st.randoms())
def test_frozen_map_hash_independent_of_insertion_order(data: dict[str, int], rng: Any) -> None:
    items = list(data.items())
    rng.shuffle(items)
    shuffled = FrozenMap(items)
    assert shuffled == FrozenMap(data)
    assert hash(shuffled) == hash(FrozenMap(data))


def test_models_are_frozen() -> None:
    c = ContainerModel("p-1", "h", {"Partition 0": task(0)})
    m = JobModel(1, {"p-1": c}, {"k": "v"})
    with pytest.raises(AttributeError):
        c.location_id = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        m.version = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ssp(0).partition = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.containers["p-2"] = c  # type: ignore[index]


def test_models_copy_mutable_inputs() -> None:
    tasks = {"Partition 0": task(0)}
    containers = {"p-1": ContainerModel("p-1", "h", tasks)}
    config = {"k": "v"}
    m = JobModel(1, containers, config)
    tasks["Partition 1"] = task(1)
    containers["p-2"] = ContainerModel("p-2", None)
    config["k2"] = "v2"
    assert set(m.containers) == {"p-1"}
    assert set(m.containers["p-1"].tasks) == {"Partition 0"}
    assert dict(m.config) == {"k": "v"}
    assert isinstance(m.containers, FrozenMap) and isinstance(m.config, FrozenMap)


def test_container_and_job_models_are_hashable_and_usable_in_sets() -> None:
    c1 = ContainerModel("p-1", "h", {"Partition 0": task(0), "Partition 1": task(1)})
    c1_again = ContainerModel(
        "p-1", "h", FrozenMap([("Partition 1", task(1)), ("Partition 0", task(0))])
    )
    c2 = ContainerModel("p-1", "other", dict(c1.tasks))
    assert c1 == c1_again and hash(c1) == hash(c1_again)
    assert c1 != c2
    assert len({c1, c1_again, c2}) == 2
    m1 = JobModel(3, {"p-1": c1}, {"a": "1", "b": "2"})
    m2 = JobModel(3, {"p-1": c1_again}, {"b": "2", "a": "1"})
    m3 = JobModel(4, {"p-1": c1}, {"a": "1", "b": "2"})
    assert m1 == m2 and hash(m1) == hash(m2)
    assert m1 != m3
    assert m1.same_assignment(m3)
    assert not m1.same_assignment(JobModel(3, {"p-1": c2}, m1.config))
    assert len({m1, m2, m3}) == 2
    assert {m1: "x"}[m2] == "x"


def test_task_model_partitions_become_frozenset() -> None:
    t = TaskModel("t", [ssp(1), ssp(0), ssp(1)], 4)  # type: ignore[arg-type]
    assert t.partitions == frozenset({ssp(0), ssp(1)})
    assert isinstance(t.partitions, frozenset)
    assert t == TaskModel("t", frozenset({ssp(1), ssp(0)}), 4)
    assert t != TaskModel("t", frozenset({ssp(1), ssp(0)}), 5)
    assert TaskModel("t", frozenset()).changelog_partition == -1
    assert ssp(0) < ssp(1) < SystemStreamPartition("kafka", "fvents", 0)
    assert ssp(3).key_bucket == -1


def test_task_to_processor() -> None:
    m = JobModel(
        1,
        {
            "p-1": ContainerModel("p-1", "a", {"Partition 0": task(0), "Partition 2": task(2)}),
            "p-2": ContainerModel("p-2", None, {"Partition 1": task(1)}),
            "p-3": ContainerModel("p-3", "c"),
        },
    )
    expected = {"Partition 0": "p-1", "Partition 2": "p-1", "Partition 1": "p-2"}
    assert m.task_to_processor() == expected
    assert task_to_processor(m.containers.values()) == expected
    assert set(m.tasks) == set(expected)
    assert m.tasks["Partition 1"] == task(1)
    assert JobModel(0, {}).task_to_processor() == {}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SystemStreamPartition("k", "s", -1), "partition must be >= 0"),
        (lambda: SystemStreamPartition("k", "s", 0, -2), "key_bucket must be >= -1"),
        (lambda: TaskModel("", frozenset()), "task name must not be empty"),
        (lambda: ContainerModel("", None), "processor_id must not be empty"),
        (
            lambda: ContainerModel("p", None, {"Partition 1": task(0)}),
            "task key 'Partition 1' differs",
        ),
        (lambda: JobModel(-1, {}), "version must be >= 0"),
        (
            lambda: JobModel(0, {"p-1": ContainerModel("p-2", None)}),
            "container key 'p-1' differs",
        ),
        (lambda: StreamInput("kafka", "events", 0), "partitions must be >= 1"),
        (lambda: StreamInput("", "events", 1), "must not be empty"),
        (lambda: StreamInput("kafka", "", 1), "must not be empty"),
    ],
)
def test_constructor_validation(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()
