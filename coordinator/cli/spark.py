"""``affinity spark pod-template --config job.yaml [--output FILE]``.

Writes an executor pod template (for ``spark.kubernetes.executor.podTemplateFile``) whose
preferred node affinity weights each node by the tasks whose state is there, read from the job's
task locality in ZooKeeper. Exit code 2 for a bad config, 1 when ZooKeeper cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coordinator.cli.common import job_store
from coordinator.config import load_config
from locality.pod_template import pod_template_yaml

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


def add_commands(subparsers: Any) -> None:
    spark = subparsers.add_parser("spark", help="Spark helpers")
    commands = spark.add_subparsers(dest="action", required=True)
    template = commands.add_parser(
        "pod-template", help="executor pod template with node affinity where the state is"
    )
    template.add_argument("--config", required=True, help="job YAML file")
    template.add_argument("--output", default=None, help="write here instead of stdout")
    template.set_defaults(handler=run_pod_template)
