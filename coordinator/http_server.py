"""The coordinator's HTTP server: ``/healthz``, ``/readyz``, ``/metrics`` and any page a caller
routes (``/status``), GET and HEAD, served by a small fixed pool of worker threads with read
timeouts and a bounded queue (more connections are closed at once), quiet when clients hang up.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HealthServer", "HttpRequest", "HttpResponse", "Route"]


@dataclass(frozen=True)
class HttpRequest:
    """What a route sees of a request: the path, and the query (``?a=1&a=2``: {"a": ["1", "2"]})."""

    path: str
    query: Mapping[str, list[str]]


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


#: A route answers a GET (and the same HEAD, without the body).
Route = Callable[[HttpRequest], HttpResponse]


class _Handler(BaseHTTPRequestHandler):
    """One request per connection (HTTP/1.0); every read waits at most ``timeout`` seconds."""

    server: _BoundedHTTPServer
    timeout = 5.0

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        route = self.server.routes.get(url.path)
        if route is None:
            response = HttpResponse(404, b"not found\n")
        else:
            response = route(HttpRequest(url.path, urllib.parse.parse_qs(url.query)))
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if not head:
            self.wfile.write(response.body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # probes every few seconds would flood the log


class _BoundedHTTPServer(HTTPServer):
    """An HTTP server with a fixed pool of worker threads (no thread per connection).

    Accepted connections wait in a queue of ``backlog``; when it is full a new connection is
    closed at once (counted in ``refused``). A connection is closed after ``deadline_s`` however
    slowly its client trickles bytes. A client that hangs up is logged at debug level only.
    """

    request_queue_size = 128  # the kernel's listen backlog

    def __init__(
        self,
        address: tuple[str, int],
        *,
        workers: int,
        backlog: int,
        read_timeout_s: float,
        deadline_s: float,
    ) -> None:
        handler = type("_TimedHandler", (_Handler,), {"timeout": read_timeout_s})
        super().__init__(address, handler)
        self.routes: dict[str, Route] = {}
        self.refused = 0
        self._deadline_s = deadline_s
        self._queue: queue.Queue[tuple[socket.socket, Any]] = queue.Queue(maxsize=backlog)
        self._active: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._log = structlog.get_logger("affinity.http")
        self.workers = [
            threading.Thread(target=self._work, name=f"health-http-{i}", daemon=True)
            for i in range(workers)
        ]

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._queue.put_nowait((request, client_address))
        except queue.Full:
            self.refused += 1
            self._log.debug("http.refused", client=str(client_address), refused=self.refused)
            self.shutdown_request(request)

    def _work(self) -> None:
        while not self._stopping.is_set():
            try:
                request, client_address = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            with self._lock:
                self._active[request] = time.monotonic() + self._deadline_s
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                with self._lock:
                    self._active.pop(request, None)
                self.shutdown_request(request)

    def service_actions(self) -> None:
        """Called by serve_forever twice a second: cut connections past their deadline."""
        now = time.monotonic()
        with self._lock:
            late = [sock for sock, deadline in self._active.items() if deadline < now]
        for sock in late:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # hung up, reset, timed out: the client's business
            self._log.debug("http.client_gone", client=str(client_address), error=repr(error))
        else:
            self._log.error("http.handler_failed", client=str(client_address), exc_info=True)

    def server_close(self) -> None:
        self._stopping.set()
        super().server_close()
        while True:
            try:
                request, _ = self._queue.get_nowait()
            except queue.Empty:
                break
            self.shutdown_request(request)


class HealthServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` (GET and HEAD) on ``host:port`` (0: any port).

    ``workers`` threads answer (however many clients connect); at most ``backlog`` connections
    wait for one, more are closed at once; a read waits at most ``read_timeout_s`` and a
    connection lives at most ``deadline_s``. More pages: :meth:`route` before :meth:`start`.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registry: CollectorRegistry,
        alive: Callable[[], bool],
        ready: Callable[[], bool],
        workers: int = 4,
        backlog: int = 32,
        read_timeout_s: float = 5.0,
        deadline_s: float = 10.0,
        routes: Mapping[str, Callable[[], tuple[int, bytes, str]]] | None = None,
    ) -> None:
        self.registry = registry
        self.alive = alive
        self.ready = ready
        self._server = _BoundedHTTPServer(
            (host, port),
            workers=workers,
            backlog=backlog,
            read_timeout_s=read_timeout_s,
            deadline_s=deadline_s,
        )
        self.route("/metrics", self._metrics)
        self.route("/healthz", self._healthz)
        self.route("/readyz", self._readyz)
        for path, page in (routes or {}).items():  # more read-only pages, e.g. /status
            self.route(path, _page_route(page))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-http", daemon=True
        )

    def route(self, path: str, handler: Route) -> None:
        """Answer GET and HEAD ``path`` with ``handler`` (replacing any route there)."""
        self._server.routes[path] = handler

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def refused(self) -> int:
        """Connections closed unanswered because every worker was busy and the queue full."""
        return self._server.refused

    def start(self) -> HealthServer:
        for worker in self._server.workers:
            worker.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _metrics(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)

    def _healthz(self, request: HttpRequest) -> HttpResponse:
        ok = self.alive()
        return HttpResponse(200 if ok else 503, b"ok\n" if ok else b"stalled\n")

    def _readyz(self, request: HttpRequest) -> HttpResponse:
        ok = self.ready()
        return HttpResponse(200 if ok else 503, b"ready\n" if ok else b"not ready\n")


def _page_route(page: Callable[[], tuple[int, bytes, str]]) -> Route:
    """A route answering with ``page()`` (status, body, content type), whatever the query."""

    def answer(request: HttpRequest) -> HttpResponse:
        return HttpResponse(*page())

    return answer
