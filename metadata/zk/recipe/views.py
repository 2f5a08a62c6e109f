"""Reading one processor's container of a job model: from its container view, or the whole model.

A container view (:func:`~metadata.zk.chunks.container_views`) is a small node holding a few
processors' containers, so that a processor need not read the whole model. It is a copy: when it
is missing or corrupt while the model itself is intact, the reader falls back to the whole model
and reports the view's node (``zk.container_view_corrupt``), so a processor still gets its tasks.
"""

from __future__ import annotations

from collections.abc import Callable

from metadata.errors import CorruptDataError
from metadata.model import ContainerModel, JobModel
from metadata.zk.chunks import Manifest, decode_view, view_index
from metadata.zk.ops import ZkOps

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
    if manifest.views:
        ref = manifest.views[view_index(processor_id, len(manifest.views))]
        view_path = f"{path}/{ref.name}"
        view = ops.get(view_path, f"read container view of job model {version}")
        data = None if view is None else view[0]
        try:
            return decode_view(ref, data, processor_id, path=view_path, version=version)
        except CorruptDataError as exc:
            ops.log.error(
                "zk.container_view_corrupt",
                node=view_path,
                version=version,
                processor_id=processor_id,
                problem=exc.problem,
                fallback="the whole model",
            )
    return read_whole().containers.get(processor_id)
