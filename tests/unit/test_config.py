"""coordinator.config: the YAML job config, environment overrides, validation, derived values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.config import ENV_ALIASES, ConfigError, JobConfig, load_config
from metadata.model import StreamInput

FULL_YAML = """\
job: {name: clicks, id: "1", run_id: r1}
zookeeper: {connect: "127.0.0.1:2181", root: /affinity, session_timeout_ms: 10000}
inputs: [{system: kafka, stream: events, partitions: 16}]
ssp_grouper: {name: group-by-partition}
grouper: {name: host-affinity, options: {}}
coordinator: {debounce_ms: 2000, barrier_timeout_ms: 30000, processor_grace_ms: 0}
"""

INPUTS = [{"system": "kafka", "stream": "events", "partitions": 16}]
MINIMAL = {"job": {"name": "clicks"}, "inputs": INPUTS}


def write(tmp_path: Path, text: str | bytes, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def config_error(*args: Any, **kwargs: Any) -> str:
    kwargs.setdefault("environ", {})
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def with_section(section: str, **values: Any) -> dict[str, Any]:
    return {"job": {"name": "clicks"}, "inputs": INPUTS, section: values}


# ---------------------------------------------------------------- loading


def test_full_design_yaml_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL_YAML), environ={})
    assert isinstance(config, JobConfig)
    assert (config.job.name, config.job.id, config.job.run_id) == ("clicks", "1", "r1")
    assert config.zookeeper.connect == "127.0.0.1:2181"
    assert config.zookeeper.root == "/affinity"
    assert config.zookeeper.session_timeout_ms == 10000
    assert len(config.inputs) == 1
    assert (config.inputs[0].system, config.inputs[0].stream) == ("kafka", "events")
    assert config.inputs[0].partitions == 16
    assert config.ssp_grouper.name == "group-by-partition"
    assert config.grouper.name == "host-affinity"
    assert config.grouper.options == {}
    assert config.coordinator.debounce_ms == 2000
    assert config.coordinator.barrier_timeout_ms == 30000
    assert config.coordinator.processor_grace_ms == 0
    assert config.job_folder == "/affinity/clicks-1"
    assert config.stream_inputs() == [StreamInput("kafka", "events", 16)]


def test_path_as_string_and_data_agree(tmp_path: Path) -> None:
    from_file = load_config(str(write(tmp_path, FULL_YAML)), environ={})
    from_data = load_config(data=yaml.safe_load(FULL_YAML), environ={})
    assert from_file == from_data


def test_defaults() -> None:
    config = load_config(data=MINIMAL, environ={})
    assert config.job.name == "clicks"
    assert config.job.id == "1"
    assert config.job.run_id  # a non-empty default run id
    assert config.zookeeper.connect == "127.0.0.1:2181"
    assert config.zookeeper.root == "/affinity"
    assert config.zookeeper.session_timeout_ms == 10000
    assert config.zookeeper.auth == ""
    assert config.zookeeper.use_ssl is False
    assert config.stream_inputs() == [StreamInput("kafka", "events", 16)]
    assert config.ssp_grouper.name == "group-by-partition"
    assert config.grouper.name == "host-affinity"
    assert config.grouper.options == {}
    assert config.coordinator.debounce_ms == 2000
    assert config.coordinator.barrier_timeout_ms == 30000
    assert config.coordinator.processor_grace_ms == 0
    assert config.job_folder == "/affinity/clicks-1"


def test_grouper_options_are_kept() -> None:
    config = load_config(
        data={
            "job": {"name": "c"},
            "inputs": INPUTS,
            "grouper": {"name": "x", "options": {"balance_slack": 2}},
        },
        environ={},
    )
    assert config.grouper.name == "x"
    assert config.grouper.options == {"balance_slack": 2}


def test_config_is_frozen() -> None:
    config = load_config(data=MINIMAL, environ={})
    with pytest.raises(ValueError):
        config.coordinator.debounce_ms = 1
    with pytest.raises(ValueError):
        config.job = config.job


@pytest.mark.parametrize(
    ("root", "name", "job_id", "folder"),
    [
        ("/affinity", "clicks", "1", "/affinity/clicks-1"),
        ("/a/b", "orders", "prod.2", "/a/b/orders-prod.2"),
        ("/", "clicks", "7", "/clicks-7"),
    ],
)
def test_job_folder(root: str, name: str, job_id: str, folder: str) -> None:
    config = load_config(
        data={"job": {"name": name, "id": job_id}, "inputs": INPUTS, "zookeeper": {"root": root}},
        environ={},
    )
    assert config.job_folder == folder


def test_stream_inputs() -> None:
    config = load_config(
        data={
            "job": {"name": "c"},
            "inputs": [
                {"system": "kafka", "stream": "events", "partitions": 4},
                {"system": "kafka", "stream": "clicks", "partitions": 6},
            ],
        },
        environ={},
    )
    assert config.stream_inputs() == [
        StreamInput("kafka", "events", 4),
        StreamInput("kafka", "clicks", 6),
    ]


# ---------------------------------------------------------------- environment


def test_short_env_names_override_the_file(tmp_path: Path) -> None:
    environ = {
        "AFFINITY_ZK_CONNECT": "zk-0:2181,zk-1:2181",
        "AFFINITY_ZK_ROOT": "/other",
        "AFFINITY_JOB_NAME": "orders",
        "AFFINITY_JOB_ID": "9",
        "AFFINITY_RUN_ID": "r2",
        "AFFINITY_DEBOUNCE_MS": "250",
        "AFFINITY_BARRIER_TIMEOUT_MS": "999",
        "AFFINITY_PROCESSOR_GRACE_MS": "5000",
    }
    config = load_config(write(tmp_path, FULL_YAML), environ=environ)
    assert config.zookeeper.connect == "zk-0:2181,zk-1:2181"
    assert config.zookeeper.root == "/other"
    assert (config.job.name, config.job.id, config.job.run_id) == ("orders", "9", "r2")
    assert config.coordinator.debounce_ms == 250
    assert config.coordinator.barrier_timeout_ms == 999
    assert config.coordinator.processor_grace_ms == 5000
    assert config.job_folder == "/other/orders-9"
    # Keys the environment does not name keep the file's values.
    assert config.zookeeper.session_timeout_ms == 10000
    assert config.inputs[0].partitions == 16


def test_nested_env_names_override_the_file(tmp_path: Path) -> None:
    environ = {
        "AFFINITY_COORDINATOR__DEBOUNCE_MS": "500",
        "AFFINITY_ZOOKEEPER__SESSION_TIMEOUT_MS": "20000",
        "AFFINITY_JOB__RUN_ID": "r9",
    }
    config = load_config(write(tmp_path, FULL_YAML), environ=environ)
    assert config.coordinator.debounce_ms == 500
    assert config.coordinator.barrier_timeout_ms == 30000  # from the file, same section
    assert config.zookeeper.session_timeout_ms == 20000
    assert config.zookeeper.connect == "127.0.0.1:2181"
    assert config.job.run_id == "r9"
    assert config.job.name == "clicks"


def test_env_alone_can_supply_the_job() -> None:
    environ = {
        "AFFINITY_JOB_NAME": "from-env",
        "AFFINITY_INPUTS": '[{"system": "kafka", "stream": "e", "partitions": 3}]',
    }
    config = load_config(environ=environ)
    assert config.job.name == "from-env"


def test_env_json_for_a_list_field() -> None:
    environ = {"AFFINITY_INPUTS": '[{"system": "kafka", "stream": "e", "partitions": 3}]'}
    config = load_config(data=MINIMAL, environ=environ)
    assert config.stream_inputs() == [StreamInput("kafka", "e", 3)]


@pytest.mark.parametrize(("env", "target"), sorted(ENV_ALIASES.items()))
def test_every_documented_short_env_name_works(env: str, target: tuple[str, str]) -> None:
    values = {
        ("zookeeper", "connect"): ("h:1", "h:1"),
        ("zookeeper", "root"): ("/r", "/r"),
        ("zookeeper", "session_timeout_ms"): ("12345", 12345),
        ("zookeeper", "auth"): ("u:p", "u:p"),
        ("zookeeper", "use_ssl"): ("true", True),
        ("zookeeper", "ca"): ("/ca.pem", "/ca.pem"),
        ("zookeeper", "certfile"): ("/c.pem", "/c.pem"),
        ("zookeeper", "keyfile"): ("/k.pem", "/k.pem"),
        ("job", "name"): ("n", "n"),
        ("job", "id"): ("7", "7"),
        ("job", "run_id"): ("r7", "r7"),
        ("grouper", "name"): ("round-robin", "round-robin"),
        ("coordinator", "debounce_ms"): ("11", 11),
        ("coordinator", "debounce_max_ms"): ("12", 12),
        ("coordinator", "barrier_timeout_ms"): ("13", 13),
        ("coordinator", "processor_grace_ms"): ("14", 14),
        ("coordinator", "http_port"): ("9090", 9090),
        ("logging", "format"): ("json", "json"),
        ("logging", "level"): ("debug", "debug"),
    }
    raw, expected = values[target]
    config = load_config(data=MINIMAL, environ={env: raw})
    section, key = target
    assert getattr(getattr(config, section), key) == expected


def test_unrelated_affinity_env_vars_are_ignored() -> None:
    # What Kubernetes injects for Services named "affinity" / "affinity-coordinator".
    environ = {
        "AFFINITY_PORT": "tcp://10.0.0.1:8080",
        "AFFINITY_SERVICE_HOST": "10.0.0.1",
        "AFFINITY_COORDINATOR_PORT": "tcp://10.0.0.2:8080",
        "AFFINITY_COORDINATOR_SERVICE_PORT": "8080",
        "PATH": "/usr/bin",
    }
    config = load_config(data=MINIMAL, environ=environ)
    assert config == load_config(data=MINIMAL, environ={})


def test_given_environment_is_isolated_from_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AFFINITY_ZK_CONNECT", "from-os:1")
    monkeypatch.setenv("AFFINITY_COORDINATOR__DEBOUNCE_MS", "77")
    monkeypatch.delenv("AFFINITY_JOB_NAME", raising=False)
    before = dict(os.environ)
    environ = {"AFFINITY_JOB_NAME": "given"}
    config = load_config(data=MINIMAL, environ=environ)
    # Nothing from os.environ ...
    assert config.zookeeper.connect == "127.0.0.1:2181"
    assert config.coordinator.debounce_ms == 2000
    assert config.job.name == "given"
    # ... and nothing into it, nor into the mapping given.
    assert dict(os.environ) == before
    assert environ == {"AFFINITY_JOB_NAME": "given"}
    # Without environ=, os.environ is the environment.
    default = load_config(data=MINIMAL)
    assert default.zookeeper.connect == "from-os:1"
    assert default.coordinator.debounce_ms == 77


def test_dotenv_in_working_directory_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "AFFINITY_ZK_CONNECT=dotenv:1\n", name=".env")
    monkeypatch.chdir(tmp_path)
    assert load_config(data=MINIMAL, environ={}).zookeeper.connect == "127.0.0.1:2181"


def test_loads_do_not_leak_into_each_other() -> None:
    first = load_config(
        data={"job": {"name": "a"}, "inputs": INPUTS}, environ={"AFFINITY_ZK_ROOT": "/x"}
    )
    second = load_config(data={"job": {"name": "b"}, "inputs": INPUTS}, environ={})
    assert first.zookeeper.root == "/x"
    assert second.zookeeper.root == "/affinity"
    assert second.job.name == "b"
    with pytest.raises(ValueError):
        JobConfig()  # type: ignore[call-arg]  # outside load_config there is no source


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("data", "key", "problem"),
    [
        (with_section("coordinator", debounce_ms=-5), "coordinator.debounce_ms", "-5"),
        (with_section("coordinator", barrier_timeout_ms=0), "coordinator.barrier_timeout_ms", "0"),
        (with_section("coordinator", debounce_msec=5), "coordinator.debounce_msec", "unknown key"),
        (with_section("zookeeper", root="affinity"), "zookeeper.root", "absolute path"),
        (with_section("zookeeper", root="/affinity/"), "zookeeper.root", "trailing slash"),
        (with_section("zookeeper", root="/zookeeper"), "zookeeper.root", "reserved tree"),
        (with_section("zookeeper", root="/zookeeper/jobs"), "zookeeper.root", "reserved tree"),
        (with_section("zookeeper", root="/a//b"), "zookeeper.root", "empty, '.' or '..'"),
        (with_section("zookeeper", root="/a/.."), "zookeeper.root", "empty, '.' or '..'"),
        (with_section("zookeeper", auth="userpassword"), "zookeeper.auth", "user:password"),
        (
            with_section("zookeeper", session_timeout_ms="soon"),
            "zookeeper.session_timeout_ms",
            "valid integer",
        ),
        (
            {"job": {"name": "c"}, "inputs": [{"system": "k", "stream": "e", "partitions": 0}]},
            "inputs.0.partitions",
            "greater than or equal to 1",
        ),
        (
            {"job": {"name": "c"}, "inputs": [{"system": "k", "stream": "e"}]},
            "inputs.0.partitions",
            "Field required",
        ),
        ({"job": {"name": "c"}, "inputs": {"system": "k"}}, "inputs", "valid list"),
        ({"zookeeper": {}}, "job", "Field required"),
        ({"job": {}}, "job.name", "Field required"),
        ({"job": {"name": ""}, "inputs": INPUTS}, "job.name", "at least 1 character"),
        ({"job": {"name": "a/b"}, "inputs": INPUTS}, "job.name", "pattern"),
        ({"job": {"name": "c"}, "inputs": INPUTS, "extra": 1}, "extra", "unknown key"),
        (
            {"job": {"name": "c"}, "inputs": INPUTS, "logging": {"level": "loud"}},
            "logging.level",
            "'loud'",
        ),
    ],
)
def test_bad_values_name_the_key(data: dict[str, Any], key: str, problem: str) -> None:
    message = config_error(data=data)
    assert f"{key}: " in message
    assert problem in message
    assert "<data>" in message


def test_several_bad_keys_are_all_named() -> None:
    message = config_error(
        data={
            "job": {"name": "c"},
            "coordinator": {"debounce_ms": -1, "nope": 1},
            "zookeeper": {"root": "x"},
        }
    )
    assert "coordinator.debounce_ms" in message
    assert "coordinator.nope: unknown key" in message
    assert "zookeeper.root" in message


def test_bad_env_value_names_the_key() -> None:
    message = config_error(data=MINIMAL, environ={"AFFINITY_COORDINATOR__DEBOUNCE_MS": "-5"})
    assert "coordinator.debounce_ms" in message
    message = config_error(data=MINIMAL, environ={"AFFINITY_ZK_SESSION_TIMEOUT_MS": "abc"})
    assert "zookeeper.session_timeout_ms" in message
    message = config_error(data=MINIMAL, environ={"AFFINITY_COORDINATOR__NOPE": "1"})
    assert "coordinator.nope" in message


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("AFFINITY_ZK_CONECT", "did you mean AFFINITY_ZK_CONNECT?"),
        ("AFFINITY_FOO", ""),
        ("AFFINITY_NOPE__X", ""),
        ("affinity_debounce_msec", "did you mean AFFINITY_DEBOUNCE_MS?"),
    ],
)
def test_an_unknown_affinity_variable_is_an_error_naming_it(name: str, hint: str) -> None:
    message = config_error(data=MINIMAL, environ={name: "127.0.0.1:2181"})
    assert message.startswith(f"unknown environment variable {name}")
    assert hint in message and "\n" not in message


@pytest.mark.parametrize(
    ("environ", "both"),
    [
        (
            {"AFFINITY_ZK_CONNECT": "a:1", "AFFINITY_ZOOKEEPER__CONNECT": "b:1"},
            "AFFINITY_ZK_CONNECT and AFFINITY_ZOOKEEPER__CONNECT both set zookeeper.connect",
        ),
        (
            {"AFFINITY_DEBOUNCE_MS": "1", "AFFINITY_COORDINATOR": '{"debounce_ms": 2}'},
            "AFFINITY_DEBOUNCE_MS and AFFINITY_COORDINATOR both set coordinator.debounce_ms",
        ),
    ],
)
def test_two_variables_for_one_key_are_an_error(environ: dict[str, str], both: str) -> None:
    assert both in config_error(data=MINIMAL, environ=environ)


def test_a_section_variable_without_the_key_is_no_conflict() -> None:
    environ = {"AFFINITY_ZK_CONNECT": "a:1", "AFFINITY_ZOOKEEPER": '{"root": "/jobs"}'}
    config = load_config(data=MINIMAL, environ=environ)
    assert (config.zookeeper.connect, config.zookeeper.root) == ("a:1", "/jobs")


def test_variables_other_parts_of_affinity_read_are_not_unknown() -> None:
    environ = {"AFFINITY_NODE_NAME": "n", "AFFINITY_LOCATION_ID": "z/n", "AFFINITY_JAR_DIR": "/j"}
    assert load_config(data=MINIMAL, environ=environ) == load_config(data=MINIMAL, environ={})


@pytest.mark.parametrize(
    ("connect", "problem"),
    [
        ("zk:2181/zookeeper", "the chroot /zookeeper: /zookeeper is ZooKeeper's reserved tree"),
        ("zk:2181/zookeeper/quota", "/zookeeper is ZooKeeper's reserved tree"),
        ("zk:2181/..", "the chroot /..: must not have empty, '.' or '..' segments"),
        ("zk:2181/.", "the chroot /.: must not have empty, '.' or '..' segments"),
        ("zk:2181/apps/../x", "must not have empty, '.' or '..' segments"),
    ],
)
def test_a_chroot_follows_the_root_s_rule(connect: str, problem: str) -> None:
    message = config_error(data=MINIMAL, environ={"AFFINITY_ZK_CONNECT": connect})
    assert "zookeeper.connect" in message and problem in message


def test_unparsable_env_json_is_a_config_error() -> None:
    message = config_error(data=MINIMAL, environ={"AFFINITY_INPUTS": "not json"})
    assert "inputs" in message


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "coordinator: {debounce_ms: -5}\njob: {name: c}\n")
    message = config_error(path)
    assert str(path) in message
    assert "coordinator.debounce_ms" in message


def test_missing_job_in_file(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "zookeeper: {root: /affinity}\n"))
    assert "job" in message and "required" in message


def test_empty_file_is_missing_job(tmp_path: Path) -> None:
    assert "job" in config_error(write(tmp_path, ""))


def test_invalid_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "job: {name: [\n")
    message = config_error(path)
    assert str(path) in message
    assert "not valid YAML" in message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_top_level_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    message = config_error(path)
    assert str(path) in message
    assert "mapping" in message


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    message = config_error(missing)
    assert str(missing) in message
    assert "cannot read" in message
    message = config_error(tmp_path)  # a directory
    assert "cannot read" in message


def test_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, b"job: {name: \xff\xfe}\n")
    message = config_error(path)
    assert str(path) in message


def test_affinity_grouper_env_selects_the_grouper(tmp_path: Path) -> None:
    """AFFINITY_GROUPER (an ENV_ALIASES name) sets grouper.name, keeping the file's options."""
    path = write(tmp_path, FULL_YAML.replace("options: {}", "options: {balance_slack: 1}"))
    config = load_config(path, environ={"AFFINITY_GROUPER": "round-robin"})
    assert config.grouper.name == "round-robin"
    assert config.grouper.options == {"balance_slack": 1}


# ---------------------------------------------------------------- hardening (issue 15)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (with_section("coordinator", debounce_ms=True), "coordinator.debounce_ms"),
        (with_section("coordinator", http_port=False), "coordinator.http_port"),
        (with_section("zookeeper", session_timeout_ms=True), "zookeeper.session_timeout_ms"),
        (with_section("grouper", timeout_ms=True), "grouper.timeout_ms"),
        (
            {"job": {"name": "c"}, "inputs": [{"system": "k", "stream": "e", "partitions": True}]},
            "inputs.0.partitions",
        ),
    ],
)
def test_a_boolean_is_not_a_number(data: dict[str, Any], key: str) -> None:
    message = config_error(data=data)
    assert f"{key}: Input should be a whole number, not true/false" in message


def test_a_boolean_from_the_environment_is_not_a_number_either() -> None:
    message = config_error(data=MINIMAL, environ={"AFFINITY_DEBOUNCE_MS": "true"})
    assert "coordinator.debounce_ms" in message
    # Digits from the environment still are numbers.
    assert load_config(data=MINIMAL, environ={"AFFINITY_DEBOUNCE_MS": "7"}).coordinator.debounce_ms


SECRET = "s3cret-Passw0rd"


@pytest.mark.parametrize(
    ("data", "environ", "key"),
    [
        (with_section("zookeeper", auth=SECRET), {}, "zookeeper.auth"),
        (MINIMAL, {"AFFINITY_ZK_AUTH": SECRET}, "zookeeper.auth"),
        (MINIMAL, {"AFFINITY_ZOOKEEPER__AUTH": SECRET}, "zookeeper.auth"),
        ({**MINIMAL, "zookeeper": f"ops:{SECRET}"}, {}, "zookeeper"),
        (with_section("zookeeper", auht=f"ops:{SECRET}"), {}, "zookeeper.auht"),
        (MINIMAL, {"AFFINITY_ZOOKEEPER": f'{{"auth": "ops:{SECRET}"'}, "zookeeper"),
        (
            with_section("zookeeper", auth=f"ops:{SECRET}", root="x", session_timeout_ms=SECRET),
            {},
            "zookeeper.session_timeout_ms",
        ),
    ],
)
def test_a_secret_is_never_echoed(data: dict[str, Any], environ: dict[str, str], key: str) -> None:
    message = config_error(data=data, environ=environ)
    assert key in message
    assert SECRET not in message
    assert "Passw0rd" not in message


def test_a_large_value_is_cut_in_the_error() -> None:
    huge = "x" * 1_000_000
    message = config_error(data=with_section("coordinator", nope=huge))
    assert "coordinator.nope: unknown key (got 'xxxx" in message
    assert "(1000002 characters)" in message
    assert len(message) < 300
    message = config_error(data=with_section("coordinator", nope=list(range(100_000))))
    assert len(message) < 300


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"job": {"name": "c"}}, "inputs: Field required"),
        ({"job": {"name": "c"}, "inputs": []}, "inputs: List should have at least 1 item"),
    ],
)
def test_a_job_needs_inputs(data: dict[str, Any], problem: str) -> None:
    assert problem in config_error(data=data)


def alias_bomb(levels: int = 9) -> str:
    lines = ["job: {name: bomb}", "inputs: [{system: k, stream: s, partitions: 1}]"]
    lines.append("a: &a [" + ",".join(['"lol"'] * 9) + "]")
    for previous, name in zip("abcdefghi", "bcdefghij"[: levels - 1], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_aliases_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, alias_bomb())
    assert len(path.read_bytes()) < 600
    message = config_error(path)
    assert f"configuration file {path}: YAML aliases (*a, line 4) are not supported" in message
    # Even one alias: an anchor alone is harmless, a reference to it is refused.
    message = config_error(write(tmp_path, FULL_YAML + "grouper: {name: &g x, options: {y: *g}}"))
    assert "YAML aliases (*g" in message


def test_yaml_size_count_and_depth_are_bounded(tmp_path: Path) -> None:
    from coordinator.config import MAX_CONFIG_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

    big = write(tmp_path, FULL_YAML + "#" * MAX_CONFIG_BYTES, name="big.yaml")
    assert f"larger than {MAX_CONFIG_BYTES} bytes" in config_error(big)
    many = FULL_YAML + "grouper: {options: {x: [" + "1," * MAX_YAML_NODES + "1]}}\n"
    assert f"more than {MAX_YAML_NODES} YAML values" in config_error(write(tmp_path, many))
    deep = FULL_YAML + "grouper: {options: {x: " + "[" * 100_000 + "]" * 100_000 + "}}\n"
    assert f"nested more than {MAX_YAML_DEPTH} deep" in config_error(write(tmp_path, deep))


# -- what the metadata store holds -----------------------------------------------------------------


def _inputs(*partitions: int) -> list[dict[str, Any]]:
    return [
        {"system": "kafka", "stream": f"s{i}", "partitions": n} for i, n in enumerate(partitions)
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"inputs": _inputs(2_000_001)},
            "inputs.0.partitions: Input should be less than or equal to 2000000 (got 2000001)",
        ),
        (
            {"inputs": _inputs(1_500_000, 600_000)},
            "inputs: 2,100,000 partitions in all, above the limit of 2,000,000 the metadata "
            "store holds",
        ),
        (
            {
                "inputs": _inputs(500_000),
                "ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": 8}},
            },
            "ssp_grouper.options.elasticity_factor: 8 x 500,000 input partitions = 4,000,000 "
            "tasks' partitions, above the limit of 2,000,000 the metadata store holds",
        ),
    ],
    ids=["one input", "all inputs", "virtual tasks"],
)
def test_partitions_and_tasks_beyond_what_the_store_holds_are_one_clear_line(
    data: dict[str, Any], expected: str
) -> None:
    message = config_error(data={"job": {"name": "clicks"}, **data}, environ={})
    assert message == f"invalid configuration in <data>: {expected}"
    assert "\n" not in message


def test_partitions_up_to_what_the_store_holds_are_fine() -> None:
    config = load_config(
        data={"job": {"name": "c"}, "inputs": _inputs(1_000_000, 1_000_000)}, environ={}
    )
    assert sum(i.partitions for i in config.stream_inputs()) == 2_000_000
