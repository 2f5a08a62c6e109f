"""``affinity spark pod-template --config job.yaml [--output FILE] [options]`` and ``affinity
spark jar``.

``pod-template`` writes the executor pod template for ``spark.kubernetes.executor.podTemplateFile``
(:mod:`locality.pod_template`): a preferred node affinity weighting each node by the tasks whose
state is there (the job's task locality in ZooKeeper), the node's identity for the executor
(``AFFINITY_NODE_NAME`` from the Downward API, ``AFFINITY_ZONE_LOOKUP``), and the job's
``state.local_dir`` mounted from the node (``hostPath``, ``DirectoryOrCreate``, handed to the
executor's user by an init container), so a replacement executor on a node opens the state its
predecessor left there. Exit code 2 for a bad config or option (``state.local_dir`` unset, a
name the API server would refuse, no such job, an ``--output`` that cannot be written), 1 when
ZooKeeper cannot be read. A task locality entry that breaks the id rule is skipped with a
warning.

``jar`` prints the path of affinity's Spark jar (the pinned shuffle's JVM classes, for
``spark.jars``), building it with ``javac`` first when it is missing; exit code 2 when it cannot
be built (no JDK).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coordinator.cli.common import CommandError, existing_job_store, quiet_logging
from coordinator.config import load_config
from locality.pod_template import (
    DEFAULT_CONTAINER_NAME,
    DEFAULT_HOST_PATH,
    DEFAULT_INIT_IMAGE,
    STATE_VOLUME_KINDS,
    ZONE_LOOKUPS,
    NodeIdentity,
    StateVolume,
    pod_template_yaml,
)
from locality.spark.jvm import JvmClassesMissing, spark_jar
from metadata.errors import CorruptDataError

__all__ = ["add_commands"]


def _state_volume(args: argparse.Namespace, local_dir: str) -> StateVolume | None:
    if not local_dir and args.state_volume == "none":
        return None  # nothing to mount, nobody to own it
    if not local_dir:
        raise CommandError(
            "state.local_dir is not set in the job config: it is where executors keep their "
            "local state, and the template mounts it from the node (set it, e.g. "
            "/var/lib/affinity-state)"
        )
    try:
        return StateVolume(
            local_dir=local_dir,
            kind=args.state_volume,
            host_path=args.host_path,
            uid=args.state_uid,
            gid=args.state_gid,
            init_image=None if args.no_state_init else args.state_init_image,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--label {pair!r}: expected KEY=VALUE")
        labels[key.strip()] = value.strip()
    return labels


def _skip(problem: CorruptDataError) -> None:
    print(f"affinity: warning: skipped {problem}", file=sys.stderr)


def run_pod_template(args: argparse.Namespace) -> int:
    quiet_logging()  # stdout is the template
    config = load_config(args.config)
    labels = _labels(args.label)
    state = _state_volume(args, config.state.local_dir)
    options: dict[str, Any] = {
        "container_name": args.container_name,
        "labels": labels,
        "identity": NodeIdentity(zone_lookup=args.zone_lookup),
        "state": state,
        "service_account": args.service_account or None,
    }
    try:
        pod_template_yaml({}, **options)  # the names, before reading ZooKeeper
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    with existing_job_store(config) as store:
        locality = store.locality.read(on_corrupt=_skip)
    text = pod_template_yaml(locality, **options)
    if not args.output:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        raise CommandError(f"cannot write --output {args.output}: {exc.strerror}") from None
    return 0


def run_jar(args: argparse.Namespace) -> int:
    try:
        path = spark_jar()
    except JvmClassesMissing as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    sys.stdout.write(f"{path}\n")
    return 0


def add_commands(subparsers: Any) -> None:
    spark = subparsers.add_parser("spark", help="Spark helpers")
    commands = spark.add_subparsers(dest="action", required=True)
    _add_pod_template(commands)
    jar = commands.add_parser(
        "jar", help="print affinity's Spark jar (for spark.jars), building it when missing"
    )
    jar.set_defaults(handler=run_jar)


def _add_pod_template(commands: Any) -> None:
    template = commands.add_parser(
        "pod-template",
        help="executor pod template: node affinity where the state is, node env, state volume",
        description=(
            "Write the executor pod template for spark.kubernetes.executor.podTemplateFile: "
            "node affinity from the job's task locality in ZooKeeper, the node's name "
            "(Downward API) for the executor's location, and state.local_dir mounted from "
            "the node."
        ),
    )
    template.add_argument("--config", required=True, help="job YAML file")
    template.add_argument("--output", default=None, help="write here instead of stdout")
    template.add_argument(
        "--zone-lookup",
        choices=ZONE_LOOKUPS,
        default="api",
        help="api: location zone/node, the zone read from the node's label (executors need "
        "RBAC get on nodes); off: location = node name, no API (default: api)",
    )
    template.add_argument(
        "--service-account",
        default="",
        help="the executors' ServiceAccount (from the chart: <release>-affinity-coordinator-"
        "spark-executor)",
    )
    _add_state_volume_options(template)
    template.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label on every executor pod (repeat; the chart's NetworkPolicy selects the "
        "job's pods by spark.podLabels)",
    )
    template.add_argument(
        "--container-name",
        default=DEFAULT_CONTAINER_NAME,
        help="the executor container (spark.kubernetes.executor.podTemplateContainerName)",
    )
    template.set_defaults(handler=run_pod_template)


def _add_state_volume_options(template: Any) -> None:
    """Where the state lives on the node, and who owns it."""
    template.add_argument(
        "--state-volume",
        choices=STATE_VOLUME_KINDS,
        default="hostPath",
        help="hostPath: state.local_dir from the node (DirectoryOrCreate); none: mount it "
        "yourself, e.g. a local PersistentVolume (default: hostPath)",
    )
    template.add_argument(
        "--host-path",
        default=DEFAULT_HOST_PATH,
        help=f"the folder on the node ({DEFAULT_HOST_PATH})",
    )
    template.add_argument(
        "--state-uid", type=int, default=185, help="the executor's user, owner of the state (185)"
    )
    template.add_argument("--state-gid", type=int, default=185, help="its group (185)")
    template.add_argument(
        "--state-init-image",
        default=DEFAULT_INIT_IMAGE,
        help="image of the init container that hands the folder to that user "
        f"({DEFAULT_INIT_IMAGE})",
    )
    template.add_argument(
        "--no-state-init",
        action="store_true",
        help="no init container: the folder on each node is already owned by that user",
    )
