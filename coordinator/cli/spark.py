"""``affinity spark pod-template --config job.yaml [--output FILE]`` and ``affinity spark jar``.

``pod-template`` writes an executor pod template (for ``spark.kubernetes.executor.podTemplateFile``)
whose preferred node affinity weights each node by the tasks whose state is there, read from the
job's task locality in ZooKeeper. Exit code 2 for a bad config, 1 when ZooKeeper cannot be read.

``jar`` prints the path of affinity's Spark jar (the pinned shuffle's JVM classes, for
``spark.jars``), building it with ``javac`` first when it is missing; exit code 2 when it cannot
be built (no JDK).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coordinator.cli.common import job_store
from coordinator.config import load_config
from locality.pod_template import pod_template_yaml
from locality.spark.jvm import JvmClassesMissing, spark_jar

__all__ = ["add_commands"]


def run_pod_template(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    with job_store(config) as store:
        locality = store.locality.read()
    text = pod_template_yaml(locality)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
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
    template = commands.add_parser(
        "pod-template", help="executor pod template with node affinity where the state is"
    )
    template.add_argument("--config", required=True, help="job YAML file")
    template.add_argument("--output", default=None, help="write here instead of stdout")
    template.set_defaults(handler=run_pod_template)
    jar = commands.add_parser(
        "jar", help="print affinity's Spark jar (for spark.jars), building it when missing"
    )
    jar.set_defaults(handler=run_jar)
