"""``/status`` and ``/status.json``: the status page a coordinator replica serves next to
``/metrics`` (read-only). A follower serves it too, naming the replica that leads.

Usage (``affinity coordinator run`` does this)::

    page = StatusPage(JobStatusReader(store, config, replica=service.identifier,
                                      leading=lambda: service.is_leader))
    HealthServer(host, port, ..., routes=page.routes())

Each route answers ``(status code, body, content type)``. The document is read at most once per
``min_interval_s`` whatever the number of viewers (the page refreshes itself every 2 s), so
viewers cannot load ZooKeeper. A failed read answers 503 with ``{"error": ...}`` (the page
keeps its last drawing and shows the error).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog
from kazoo.exceptions import KazooException

from coordinator.config import JobConfig
from coordinator.escaping import script_json
from coordinator.status.assets import PAGE
from coordinator.status.data import JobStatusReader
from metadata.errors import MetadataError
from metadata.zk import ZkMetadataStore

__all__ = ["Replica", "Route", "StatusPage", "render_page", "status_routes"]

#: What a route answers: (HTTP status, body, content type).
Route = Callable[[], tuple[int, bytes, str]]

_HTML = "text/html; charset=utf-8"
_JSON = "application/json"


def render_page(document: dict[str, Any]) -> bytes:
    """The page with ``document`` drawn first (escaped by :func:`script_json`, so no id can end
    or change the script element that holds it)."""
    return PAGE.replace("__STATUS__", script_json(document)).encode()


class StatusPage:
    """The ``/status`` routes of one replica (see the module docstring)."""

    def __init__(
        self,
        reader: JobStatusReader,
        *,
        min_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None
        self.log = structlog.get_logger("affinity.status")

    def document(self) -> dict[str, Any]:
        """The status document, read again when the cached one is older than the interval."""
        with self._lock:
            now = self.clock()
            if self._cached is None or now - self._cached[0] >= self.min_interval_s:
                self._cached = (now, self.reader.read())
            return self._cached[1]

    def _answer(
        self, render: Callable[[dict[str, Any]], bytes], ctype: str
    ) -> tuple[int, bytes, str]:
        try:
            document = self.document()
        except (MetadataError, KazooException) as exc:
            self.log.warning("status.read_failed", error=str(exc))
            body = json.dumps({"error": f"cannot read the job from ZooKeeper: {exc}"}).encode()
            return 503, body, _JSON
        return 200, render(document), ctype

    def page(self) -> tuple[int, bytes, str]:
        return self._answer(render_page, _HTML)

    def json(self) -> tuple[int, bytes, str]:
        return self._answer(lambda d: json.dumps(d, sort_keys=True).encode(), _JSON)

    def routes(self) -> dict[str, Route]:
        return {"/status": self.page, "/status.json": self.json}


class Replica(Protocol):
    """What the page needs of the replica serving it (a ``CoordinatorService``)."""

    @property
    def identifier(self) -> str: ...

    @property
    def is_leader(self) -> bool: ...


def status_routes(store: ZkMetadataStore, config: JobConfig, replica: Replica) -> dict[str, Route]:
    """The ``/status`` routes of a coordinator replica (its ``identifier`` and ``is_leader`` say
    who serves the page)."""
    reader = JobStatusReader(
        store, config, replica=replica.identifier, leading=lambda: replica.is_leader
    )
    return StatusPage(reader).routes()
