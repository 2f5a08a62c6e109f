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

from coordinator.config import ConfigError, load_config
from coordinator.zk_client import client_from_config, store_from_config
from locality.pod_template import pod_template_yaml
from metadata.errors import MetadataError

__all__ = ["add_commands"]


def run_pod_template(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"affinity: {exc}", file=sys.stderr)
        return 2
    try:
        client = client_from_config(config)
    except MetadataError as exc:
        print(f"affinity: cannot reach ZooKeeper: {exc}", file=sys.stderr)
        return 1
    try:
        locality = store_from_config(config, client).read_task_locality()
    except MetadataError as exc:
        print(f"affinity: cannot read task locality: {exc}", file=sys.stderr)
        return 1
    finally:
        client.stop()
        client.close()
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
