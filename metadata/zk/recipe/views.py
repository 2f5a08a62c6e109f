"""Reading one processor's container of a job model: from its container view, or the whole model.

A container view (:mod:`metadata.zk.viewcodec`) holds a few processors' containers, in one small
node or, when a container is bigger than a node, in several chunk nodes read together, so that a
processor need not read the whole model. It is a copy: when one of its nodes is missing or
corrupt while the model itself is intact, the reader falls back to the whole model and reports
that node (``zk.container_view_corrupt``), so a processor still gets its tasks. Each read is
logged (``zk.container_read``: from ``view`` or ``whole``, the nodes read and the seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from metadata.errors import CorruptDataError
from metadata.model import ContainerModel, JobModel
from metadata.zk.chunks import Manifest
from metadata.zk.ops import ZkOps
from metadata.zk.viewcodec import ViewPart, decode_view

__all__ = ["read_container"]


def read_container(
    ops: ZkOps,
    path: str,
    manifest: Manifest,
    processor_id: str,
    read_whole: Callable[[], JobModel],
) -> ContainerModel | None:
    """``processor_id``'s container in the job model at ``path`` described by ``manifest`` (None:
    the model has none): from its view, else (no views, or a bad view) from ``read_whole()``."""
    version = manifest.version
    started = time.monotonic()
    refs = manifest.view_of(processor_id)
    if refs:
        paths = [f"{path}/{ref.name}" for ref in refs]
        found = ops.get_many(
            paths, f"read container view of job model {version}", path, large=len(refs) > 1
        )
        parts: list[ViewPart] = []
        for ref, part_path in zip(refs, paths, strict=True):
            entry = found.get(part_path)
            parts.append((ref, None if entry is None else entry[0], part_path))
        try:
            container = decode_view(parts, processor_id, version=version)
        except CorruptDataError as exc:
            ops.log.error(
                "zk.container_view_corrupt",
                node=exc.path,
                version=version,
                processor_id=processor_id,
                problem=exc.problem,
                fallback="the whole model",
            )
        else:
            _log_read(ops, version, container, "view", len(refs), started)
            return container
    container = read_whole().containers.get(processor_id)
    _log_read(ops, version, container, "whole", len(manifest.chunks), started)
    return container


def _log_read(
    ops: ZkOps,
    version: int,
    container: ContainerModel | None,
    source: str,
    nodes: int,
    started: float,
) -> None:
    ops.log.info(
        "zk.container_read",
        version=version,
        source=source,
        nodes=nodes,
        tasks=0 if container is None else len(container.tasks),
        seconds=round(time.monotonic() - started, 3),
    )
