"""The ZooKeeper layout of one job (DESIGN.md "ZooKeeper layout"), as paths.

::

    <job folder>/                         e.g. /affinity/clicks-1
      processors/processor-<seq>          ephemeral sequential; JSON registration
      jobModels/<version>                 manifest (the commit marker); empty while being written
      jobModels/<version>/e<epoch>-<i>    compressed chunks of the job-model JSON
      jobModelVersion                     the latest published version (decimal text)
      barriers/barrier_<version>          JSON {"version", "expected": [processor ids]}
      barriers/barrier_<version>/state    NEW | DONE | TIMED_OUT
      barriers/barrier_<version>/participants/<processor id, url-encoded>   ephemeral
      localityData                        JSON {"run_id"}: the run the entries belong to
      localityData/<task name, url-encoded>   the task's location id (UTF-8 text)
      localityWrites                      empty; every locality write transaction bumps its version
      leader/epoch                        the leader epoch (decimal text); fences leader writes
      leader/election/                    election nodes (kazoo's Election recipe)
      checkpoints/<system>.<stream>.<partition>   JSON {"format", "factor", "offsets"}: the input
                                          offsets of that stream partition's key buckets
      history/rebalance-<version>         JSON: one decided rebalance (the last N are kept)
      history/batch-<batch id>            JSON: one committed streaming batch (the last N kept)
      standbyLag/<processor id>/<task name>   the lag of that processor's standby copy of the
                                          task (decimal text, 0 = caught up); both URL-encoded
      streaming/<run id, url-encoded>     JSON: a streaming query's driver epoch and latest commit

Checkpoint node names join the URL-encoded system and stream (dots encoded too, as ``%2E``) and
the partition number with dots: ``kafka.events.3``, ``my%2Esystem.page%20views.0``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from metadata.errors import CorruptDataError

__all__ = [
    "BATCH_PREFIX",
    "RESERVED_ROOT",
    "JobLayout",
    "checkpoint_name",
    "decode_name",
    "encode_name",
    "parse_checkpoint_name",
    "parse_int_name",
    "processor_sequence",
    "root_problem",
]

#: ZooKeeper's own tree (quotas, the dynamic configuration): no job may live under it.
RESERVED_ROOT = "/zookeeper"

PROCESSOR_PREFIX = "processor-"
BARRIER_PREFIX = "barrier_"
BATCH_PREFIX = "batch-"
_SEQUENCE = re.compile(r"^processor-(\d{10,})$")


def encode_name(name: str) -> str:
    """A task name or processor id as one node name: URL-encoded (``Partition 3`` ->
    ``Partition%203``), with ``.`` and ``..`` (not valid node names) encoded too."""
    if not name:
        raise ValueError("a name must not be empty")
    encoded = quote(name, safe="")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded


def decode_name(node_name: str, path: str) -> str:
    """The inverse of :func:`encode_name`; a node name it would not produce is corrupt data."""
    try:
        decoded = unquote(node_name, errors="strict") if "%" in node_name else node_name
    except UnicodeDecodeError:
        raise CorruptDataError(path, f"node name {node_name!r} is not URL-encoded UTF-8") from None
    try:
        canonical = encode_name(decoded)
    except ValueError:
        canonical = ""
    if canonical != node_name:
        raise CorruptDataError(path, f"node name {node_name!r} is not a URL-encoded name")
    return decoded


def parse_int_name(node_name: str) -> int | None:
    """``"12"`` -> 12; anything else (including ``"012"`` or ``"-1"``) -> None."""
    if node_name.isdigit() and (node_name == "0" or not node_name.startswith("0")):
        return int(node_name)
    return None


def _encode_part(part: str, what: str) -> str:
    if not isinstance(part, str) or not part:
        raise ValueError(f"{what} must be a non-empty string, got {part!r}")
    return quote(part, safe="").replace(".", "%2E")


def checkpoint_name(system: str, stream: str, partition: int) -> str:
    """The node name of a stream partition's checkpoint: ``<system>.<stream>.<partition>``, each
    of system and stream URL-encoded with its dots encoded too, so the two dots separate
    unambiguously (``kafka.events.3``)."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be an integer >= 0, got {partition!r}")
    return f"{_encode_part(system, 'system')}.{_encode_part(stream, 'stream')}.{partition}"


def parse_checkpoint_name(node_name: str, path: str) -> tuple[str, str, int]:
    """``(system, stream, partition)`` of a checkpoint node name; a name that
    :func:`checkpoint_name` would not produce is corrupt data."""
    parts = node_name.split(".")
    partition = parse_int_name(parts[-1]) if len(parts) == 3 else None
    if partition is None:
        raise CorruptDataError(
            path, f"node name {node_name!r} is not <system>.<stream>.<partition>"
        )
    try:
        system, stream = (unquote(p, errors="strict") for p in parts[:2])
        canonical = checkpoint_name(system, stream, partition)
    except (UnicodeDecodeError, ValueError):
        canonical = ""
    if canonical != node_name:
        raise CorruptDataError(
            path, f"node name {node_name!r} is not a URL-encoded <system>.<stream>.<partition>"
        )
    return system, stream, partition


def root_problem(path: str) -> str | None:
    """What is wrong with ``path`` as a ZooKeeper folder for jobs (None: nothing): it must be an
    absolute path without a trailing slash, empty segments, ``.`` or ``..`` segments or control
    characters, and not ZooKeeper's reserved tree (:data:`RESERVED_ROOT`, or below it)."""
    if not path.startswith("/") or (len(path) > 1 and path.endswith("/")):
        return "must be an absolute path without a trailing slash, like /affinity"
    segments = path.split("/")[1:] if path != "/" else []
    if any(segment in ("", ".", "..") for segment in segments):
        return "must not have empty, '.' or '..' segments, like /affinity/jobs"
    if not path.isprintable():
        return "must not hold control characters"
    if path == RESERVED_ROOT or path.startswith(RESERVED_ROOT + "/"):
        return (
            f"{RESERVED_ROOT} is ZooKeeper's reserved tree (quotas, configuration);"
            " use another root, like /affinity"
        )
    return None


def processor_sequence(node_name: str) -> int | None:
    """The sequence number of a ``processor-<seq>`` node name, or None if it is not one."""
    match = _SEQUENCE.match(node_name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class JobLayout:
    """Every path of one job's folder (see the module docstring)."""

    folder: str

    def __post_init__(self) -> None:
        problem = None if self.folder == "/" else root_problem(self.folder)
        if self.folder == "/" or problem is not None:
            raise ValueError(
                f"job folder must be an absolute path like /affinity/job-1 ({problem or 'not /'}),"
                f" got {self.folder!r}"
            )

    @property
    def processors(self) -> str:
        return f"{self.folder}/processors"

    @property
    def processor_prefix(self) -> str:
        return f"{self.processors}/{PROCESSOR_PREFIX}"

    @property
    def job_models(self) -> str:
        return f"{self.folder}/jobModels"

    def job_model(self, version: int) -> str:
        return f"{self.job_models}/{version}"

    @property
    def job_model_version(self) -> str:
        return f"{self.folder}/jobModelVersion"

    @property
    def barriers(self) -> str:
        return f"{self.folder}/barriers"

    def barrier(self, version: int) -> str:
        return f"{self.barriers}/{BARRIER_PREFIX}{version}"

    def barrier_state(self, version: int) -> str:
        return f"{self.barrier(version)}/state"

    def barrier_participants(self, version: int) -> str:
        return f"{self.barrier(version)}/participants"

    def barrier_participant(self, version: int, processor_id: str) -> str:
        return f"{self.barrier_participants(version)}/{encode_name(processor_id)}"

    @property
    def locality(self) -> str:
        return f"{self.folder}/localityData"

    def locality_entry(self, task_name: str) -> str:
        return f"{self.locality}/{encode_name(task_name)}"

    @property
    def locality_writes(self) -> str:
        return f"{self.folder}/localityWrites"

    @property
    def leader(self) -> str:
        return f"{self.folder}/leader"

    @property
    def epoch(self) -> str:
        return f"{self.leader}/epoch"

    @property
    def election(self) -> str:
        return f"{self.leader}/election"

    @property
    def checkpoints(self) -> str:
        return f"{self.folder}/checkpoints"

    def checkpoint(self, system: str, stream: str, partition: int) -> str:
        return f"{self.checkpoints}/{checkpoint_name(system, stream, partition)}"

    @property
    def history(self) -> str:
        return f"{self.folder}/history"

    def history_entry(self, version: int) -> str:
        return f"{self.history}/rebalance-{version}"

    def batch_entry(self, batch: int) -> str:
        return f"{self.history}/{BATCH_PREFIX}{batch}"

    @property
    def standby_lag(self) -> str:
        return f"{self.folder}/standbyLag"

    def standby_lag_folder(self, processor_id: str) -> str:
        return f"{self.standby_lag}/{encode_name(processor_id)}"

    def standby_lag_entry(self, processor_id: str, task_name: str) -> str:
        return f"{self.standby_lag_folder(processor_id)}/{encode_name(task_name)}"

    def containers(self) -> tuple[str, ...]:
        """The persistent folders :meth:`ZkMetadataStore.ensure_layout` creates, parents first."""
        return (
            self.folder,
            self.processors,
            self.job_models,
            self.barriers,
            self.leader,
            self.election,
            self.checkpoints,
            self.history,
            self.standby_lag,
        )
