"""Job configuration: a YAML file, overridden by the environment, validated with pydantic-settings.

The keys of DESIGN.md ("Command line") are the contract::

    job: {name: clicks, id: "1", run_id: r1}
    zookeeper: {connect: "127.0.0.1:2181", root: /affinity, session_timeout_ms: 10000}
    inputs: [{system: kafka, stream: events, partitions: 16}]
    ssp_grouper: {name: group-by-partition}
    grouper: {name: host-affinity, options: {}}
    coordinator: {debounce_ms: 2000, barrier_timeout_ms: 30000, processor_grace_ms: 0}

Every key can also come from the environment, so a pod can be configured from a ConfigMap or a
Secret: ``AFFINITY_<SECTION>__<KEY>`` (e.g. ``AFFINITY_COORDINATOR__DEBOUNCE_MS=500``) and the
short names in :data:`ENV_ALIASES` (e.g. ``AFFINITY_ZK_CONNECT``). The environment wins over the
file. An unknown ``AFFINITY_*`` variable, or two variables for one key, is an error
(:mod:`coordinator.config_env`). A bad value raises :class:`ConfigError` naming the key, e.g.
``coordinator.debounce_ms: Input should be greater than or equal to 0 (got -5)``
(:mod:`coordinator.config_errors`: never a credential).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from pydantic_settings.sources.utils import parse_env_vars

from coordinator.config_env import check_environment
from coordinator.config_errors import (
    MAX_ECHO_CHARS,
    STORE_LIMIT,
    format_errors,
    scrub,
    secrets_given,
)
from coordinator.config_file import (
    MAX_CONFIG_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    ConfigError,
    read_config_file,
)
from metadata.model import StreamInput
from metadata.zk.client import check_hosts, split_auth
from metadata.zk.layout import root_problem
from metadata.zk.store import MAX_TASKS

__all__ = [
    "ENV_ALIASES",
    "MAX_CONFIG_BYTES",
    "MAX_ECHO_CHARS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "ConfigError",
    "JobConfig",
    "environment_name",
    "load_config",
]


def _no_bool(value: Any) -> Any:
    # pydantic's lax mode reads true as 1: a boolean is not a number.
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a whole number, not true/false")
    return value


#: A whole number: an int, or a string of digits (from the environment), never a boolean.
Int = Annotated[int, BeforeValidator(_no_bool)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobSection(_Section):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    id: str = Field(default="1", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    run_id: str = Field(default="run-1", min_length=1)


class ZooKeeperSection(_Section):
    connect: str = "127.0.0.1:2181"
    root: str = "/affinity"
    session_timeout_ms: Int = Field(default=10000, ge=1000, le=600000)
    connect_timeout_ms: Int = Field(default=15000, ge=100)
    # "user:password" for a digest ACL on every node this job creates; empty = open ACL.
    auth: str = ""
    use_ssl: bool = False
    ca: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify_certs: bool = True

    @field_validator("connect")
    @classmethod
    def _connect_is_host_ports(cls, value: str) -> str:
        check_hosts(value)
        return value

    @field_validator("root")
    @classmethod
    def _root_is_a_usable_path(cls, value: str) -> str:
        problem = root_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("auth")
    @classmethod
    def _auth_is_user_password(cls, value: str) -> str:
        if value:
            split_auth(value)
        return value


class InputSection(_Section):
    system: str = Field(min_length=1)
    stream: str = Field(min_length=1)
    partitions: Int = Field(ge=1, le=MAX_TASKS)  # what the metadata store holds

    def to_stream_input(self) -> StreamInput:
        return StreamInput(self.system, self.stream, self.partitions)


class SspGrouperSection(_Section):
    name: str = "group-by-partition"
    options: dict[str, Any] = Field(default_factory=dict)


class GrouperSection(_Section):
    name: str = "host-affinity"
    options: dict[str, Any] = Field(default_factory=dict)
    timeout_ms: Int = Field(default=30000, ge=1)


#: Bounds of ``coordinator.probing_rebalance_interval_ms`` (besides 0: no probing).
PROBING_MIN_MS, PROBING_MAX_MS = 100, 86_400_000


class CoordinatorSection(_Section):
    debounce_ms: Int = Field(default=2000, ge=0)
    # A stream of membership changes cannot postpone a rebalance beyond this (SAMZA-2633).
    debounce_max_ms: Int = Field(default=10000, ge=0)
    barrier_timeout_ms: Int = Field(default=30000, ge=1)
    # How long a vanished processor's tasks wait for it (or a new processor at its location).
    processor_grace_ms: Int = Field(default=0, ge=0)
    retention: Int = Field(default=10, ge=1)
    # Rebalances, and a streaming query's batches, kept in the job's history (history/ in
    # ZooKeeper; affinity status, /status).
    history: Int = Field(default=50, ge=1, le=1000)
    # A model that would stop every task of the model in force is refused unless this is true.
    allow_dropping_all_tasks: bool = False
    # While the model in force is not the grouper's final answer (warm-up replicas catching up,
    # moves held back by max_moves_per_rebalance), rebalance again this often (0: never).
    probing_rebalance_interval_ms: Int = Field(default=600000, ge=0, le=PROBING_MAX_MS)
    # Loopback unless set: on Kubernetes the chart sets 0.0.0.0 (the kubelet and Prometheus
    # reach the pod's address).
    http_host: str = Field(default="127.0.0.1", min_length=1)
    http_port: Int = Field(default=8080, ge=0, le=65535)

    @field_validator("probing_rebalance_interval_ms")
    @classmethod
    def _probing_off_or_at_least_the_minimum(cls, value: int) -> int:
        if 0 < value < PROBING_MIN_MS:
            raise ValueError(f"must be 0 (no probing) or at least {PROBING_MIN_MS}")
        return value


class StateSection(_Section):
    """Where a stateful streaming query keeps its state (``stateful_foreach_batch``)."""

    checkpoint_dir: str = ""  # durable: key-group checkpoints and batch records
    local_dir: str = ""  # on every executor host: local copies ("": <tmp>/affinity-state)
    max_parallelism: Int = Field(default=1024, ge=1, le=1 << 20)  # key groups


class LoggingSection(_Section):
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error"] = "info"


#: Short environment names (as DESIGN.md promises) -> (section, key).
ENV_ALIASES: Mapping[str, tuple[str, str]] = {
    "AFFINITY_ZK_CONNECT": ("zookeeper", "connect"),
    "AFFINITY_ZK_ROOT": ("zookeeper", "root"),
    "AFFINITY_ZK_SESSION_TIMEOUT_MS": ("zookeeper", "session_timeout_ms"),
    "AFFINITY_ZK_AUTH": ("zookeeper", "auth"),
    "AFFINITY_ZK_USE_SSL": ("zookeeper", "use_ssl"),
    "AFFINITY_ZK_CA": ("zookeeper", "ca"),
    "AFFINITY_ZK_CERTFILE": ("zookeeper", "certfile"),
    "AFFINITY_ZK_KEYFILE": ("zookeeper", "keyfile"),
    "AFFINITY_JOB_NAME": ("job", "name"),
    "AFFINITY_JOB_ID": ("job", "id"),
    "AFFINITY_RUN_ID": ("job", "run_id"),
    "AFFINITY_GROUPER": ("grouper", "name"),
    "AFFINITY_DEBOUNCE_MS": ("coordinator", "debounce_ms"),
    "AFFINITY_DEBOUNCE_MAX_MS": ("coordinator", "debounce_max_ms"),
    "AFFINITY_BARRIER_TIMEOUT_MS": ("coordinator", "barrier_timeout_ms"),
    "AFFINITY_PROCESSOR_GRACE_MS": ("coordinator", "processor_grace_ms"),
    "AFFINITY_HTTP_PORT": ("coordinator", "http_port"),
    "AFFINITY_LOG_FORMAT": ("logging", "format"),
    "AFFINITY_LOG_LEVEL": ("logging", "level"),
}


class _AliasSource(PydanticBaseSettingsSource):
    """Reads the short environment names of :data:`ENV_ALIASES`."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._environ = environ

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ does the work

    def __call__(self) -> dict[str, Any]:
        values: dict[str, dict[str, str]] = {}
        for env, (section, key) in ENV_ALIASES.items():
            if env in self._environ:
                values.setdefault(section, {})[key] = self._environ[env]
        return values


class _EnvSource(EnvSettingsSource):
    """``AFFINITY_<SECTION>__<KEY>`` from a given environment instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._given_environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The short names of ENV_ALIASES are not sections: AFFINITY_GROUPER names the grouper,
        # it is not the whole ``grouper`` section as JSON.
        environ = {k: v for k, v in self._given_environ.items() if k.upper() not in ENV_ALIASES}
        return parse_env_vars(environ, False, False, None)


class _FileSource(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = dict(data)

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._data


# (file data, environment) for the JobConfig being built by load_config.
_SOURCES: ContextVar[tuple[Mapping[str, Any], Mapping[str, str]]] = ContextVar(
    "_SOURCES", default=({}, {})
)


class JobConfig(BaseSettings):
    """The whole job configuration (see the module docstring)."""

    model_config = SettingsConfigDict(
        env_prefix="AFFINITY_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    job: JobSection
    zookeeper: ZooKeeperSection = Field(default_factory=ZooKeeperSection)
    # The job's streams: without them a leader would publish a model with no task at all.
    inputs: list[InputSection] = Field(min_length=1)
    ssp_grouper: SspGrouperSection = Field(default_factory=SspGrouperSection)
    grouper: GrouperSection = Field(default_factory=GrouperSection)
    coordinator: CoordinatorSection = Field(default_factory=CoordinatorSection)
    state: StateSection = Field(default_factory=StateSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        file_data, environ = _SOURCES.get()
        # Earlier sources win: explicit arguments, short env names, nested env names, the file.
        return (
            init_settings,
            _AliasSource(settings_cls, environ),
            _EnvSource(settings_cls, environ),
            _FileSource(settings_cls, file_data),
        )

    @property
    def job_folder(self) -> str:
        """The job's ZooKeeper folder: ``<root>/<job-name>-<job-id>``."""
        root = self.zookeeper.root.rstrip("/")
        return f"{root}/{self.job.name}-{self.job.id}"

    def stream_inputs(self) -> list[StreamInput]:
        return [i.to_stream_input() for i in self.inputs]

    @model_validator(mode="after")
    def _within_what_the_store_holds(self) -> JobConfig:
        """The job's stream partitions (times the elasticity factor: each key bucket is one)
        bound its tasks; both must fit in the metadata store (:data:`MAX_TASKS`)."""
        partitions = sum(i.partitions for i in self.inputs)
        factor = self.ssp_grouper.options.get("elasticity_factor", 1)
        factor = factor if isinstance(factor, int) and not isinstance(factor, bool) else 1
        if partitions * factor <= MAX_TASKS:
            return self
        if factor > 1:
            message = (
                f"ssp_grouper.options.elasticity_factor: {factor} x {partitions:,} input "
                f"partitions = {partitions * factor:,} tasks' partitions, above the limit of "
                f"{MAX_TASKS:,} the metadata store holds"
            )
        else:
            message = (
                f"inputs: {partitions:,} partitions in all, above the limit of {MAX_TASKS:,} "
                "the metadata store holds"
            )
        raise PydanticCustomError(STORE_LIMIT, message)


#: Each section of the job config -> its keys (what ``AFFINITY_<SECTION>__<KEY>`` may name).
_SECTION_KEYS: dict[str, list[str]] = {
    name: list(getattr(field.annotation, "model_fields", {}))
    for name, field in JobConfig.model_fields.items()
}


def load_config(
    path: str | Path | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> JobConfig:
    """Load the job configuration from a YAML file (or ``data``), overridden by ``environ``."""
    source = str(path) if path is not None else "<data>"
    file_data = read_config_file(path) if path is not None else dict(data or {})
    env = dict(os.environ if environ is None else environ)
    secrets = secrets_given(file_data, env)
    check_environment(env, _SECTION_KEYS, ENV_ALIASES)
    token = _SOURCES.set((file_data, env))
    try:
        return JobConfig()  # type: ignore[call-arg]  # fields come from the sources
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, source, secrets)) from None
    except SettingsError as exc:  # an AFFINITY_<SECTION> value that is not JSON
        message = f"invalid configuration in the environment: {exc}"
        raise ConfigError(scrub(message, secrets)) from None
    finally:
        _SOURCES.reset(token)


def environment_name(
    section: str, key: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """The environment variable that sets ``section.key`` (the environment wins over the file:
    a short name of :data:`ENV_ALIASES` first, then ``AFFINITY_<SECTION>__<KEY>``), or None."""
    env = {k.upper(): v for k, v in (os.environ if environ is None else environ).items()}
    for name, target in ENV_ALIASES.items():
        if target == (section, key) and name in env:
            return name
    nested = f"AFFINITY_{section}__{key}".upper()
    return nested if nested in env else None
