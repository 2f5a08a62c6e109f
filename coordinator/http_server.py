"""The coordinator's HTTP server: ``/healthz``, ``/readyz``, ``/metrics`` and any page a caller
routes (``/status``), GET and HEAD, on one asyncio event loop in one thread.

Why an event loop: the probes must be answered whatever other clients do. The thread-pool server
it replaces (4 workers, a queue of 32, a 5 s read timeout) let 4 clients holding unfinished
requests make ``/healthz`` miss a 3 s probe 7 times in 10, and 40 such clients refused every
probe: with the chart's ``failureThreshold`` the kubelet restarted the leader on a stranger's
demand. Here a connection waiting for its request costs a coroutine, not a worker:

- the probes (``/healthz``, ``/readyz``) are answered on the loop itself, as soon as their request
  has arrived; every other route runs in a small pool of ``workers`` threads (``/metrics``,
  ``/status`` may take a while), at most ``4 * workers`` waiting for it (more: 503 at once);
- a request's head (its request line and headers, at most 8 KiB in 100 lines) must arrive within
  ``read_timeout_s`` of the connection, and the whole exchange must end within ``deadline_s``
  (a client that trickles bytes, or does not read its answer, is cut off);
- a connection whose request has not arrived :data:`GRACE_S` after it was accepted is *slow*;
  at most ``max_slow`` slow connections, at most ``max_slow_per_client`` from one address: past
  a limit the **oldest slow connection** is closed (its own address's first). Connections held
  open, or opened in a loop, evict each other, never a probe: a probe sends its request at once
  and is answered within milliseconds, so it is never slow. Only past ``max_connections`` open
  at once (thousands of new connections within the grace) is a newcomer closed unread;
- one request per connection (``Connection: close``); a client that hangs up is a debug line.

A second listener just for the probes would not help: it would be as open to the same clients.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import socket
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HealthServer", "HttpRequest", "HttpResponse", "Route", "SlowClients"]

#: The longest request line or header line, the most header lines, read before answering.
MAX_LINE = 8192
MAX_HEADER_LINES = 100
#: The probes, answered on the event loop (cheap and never blocking).
PROBES = frozenset({"/healthz", "/readyz"})
#: A connection whose request has not arrived this long after it was accepted is *slow*: only
#: slow connections count against the limits (and are evicted), never one still in its grace.
GRACE_S = 0.5


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


@dataclass(eq=False)
class _Connection:
    client: str
    close: Callable[[], None]  # drop it now


@dataclass
class SlowClients:
    """The connections still waiting for their request after the grace period (see the module
    docstring), oldest first. Pure bookkeeping: :meth:`admit` returns the connections to close;
    the server closes them."""

    limit: int
    per_client: int
    waiting: OrderedDict[_Connection, None] = field(default_factory=OrderedDict)
    by_client: dict[str, OrderedDict[_Connection, None]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.waiting)

    def admit(self, conn: _Connection) -> list[_Connection]:
        """``conn`` is slow: take it in; the connections to close for it (the oldest waiting of
        its client past ``per_client``, then the oldest of all past ``limit``; never ``conn``)."""
        mine = self.by_client.setdefault(conn.client, OrderedDict())
        self.waiting[conn] = None
        mine[conn] = None
        closing: list[_Connection] = []
        while len(mine) > self.per_client:
            closing.append(next(iter(mine)))
            self.release(closing[-1])
        while len(self.waiting) > self.limit:
            closing.append(next(iter(self.waiting)))
            self.release(closing[-1])
        return closing

    def release(self, conn: _Connection) -> None:
        """``conn`` has its request, or is closed."""
        self.waiting.pop(conn, None)
        mine = self.by_client.get(conn.client)
        if mine is not None:
            mine.pop(conn, None)
            if not mine:
                del self.by_client[conn.client]


class _BadRequest(Exception):
    def __init__(self, status: HTTPStatus) -> None:
        super().__init__(status.phrase)
        self.status = status


def _encode(response: HttpResponse, *, head: bool) -> bytes:
    status = HTTPStatus(response.status)
    lines = [
        f"HTTP/1.0 {status.value} {status.phrase}",
        "Server: affinity",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
    ]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return data if head else data + response.body


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """The method and target of the request whose head ``reader`` holds; None if the client
    hung up first. A line over :data:`MAX_LINE` or too many lines: :class:`_BadRequest`."""
    try:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            return None
        parts = line.decode("latin-1").split()
        for _ in range(MAX_HEADER_LINES):
            header = await reader.readline()
            if not header.endswith(b"\n"):
                return None
            if header in (b"\r\n", b"\n"):
                break
        else:
            raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
    except ValueError:  # a line longer than the reader's limit
        raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE) from None
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest(HTTPStatus.BAD_REQUEST)
    return parts[0], parts[1]


class HealthServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` (GET and HEAD) on ``host:port`` (0: any port),
    on an event loop (see the module docstring). More pages: :meth:`route` before :meth:`start`.
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
        read_timeout_s: float = 5.0,
        deadline_s: float = 10.0,
        max_slow: int = 256,
        max_slow_per_client: int = 32,
        max_connections: int = 4096,
        routes: Mapping[str, Callable[[], tuple[int, bytes, str]]] | None = None,
    ) -> None:
        self.registry = registry
        self.alive = alive
        self.ready = ready
        self.read_timeout_s = read_timeout_s
        self.deadline_s = deadline_s
        self.refused = 0  # connections closed for a limit (slow ones evicted, or refused)
        self.routes: dict[str, Route] = {}
        self._slow = SlowClients(max_slow, max_slow_per_client)
        self._max_connections = max_connections
        self._open = 0
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=128)
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, "health-http")
        self._queue_limit = 4 * workers
        self._queued = 0
        self._log = structlog.get_logger("affinity.http")
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._run, name="health-http", daemon=True)
        self.route("/metrics", self._metrics)
        self.route("/healthz", self._healthz)
        self.route("/readyz", self._readyz)
        for path, page in (routes or {}).items():  # more read-only pages, e.g. /status
            self.route(path, _page_route(page))

    def route(self, path: str, handler: Route) -> None:
        """Answer GET and HEAD ``path`` with ``handler`` (replacing any route there). Every
        route but the probes runs in the pool of worker threads."""
        self.routes[path] = handler

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def connections(self) -> int:
        """Connections open now."""
        return self._open

    @property
    def slow(self) -> int:
        """Connections open now that are still waiting for their request past the grace."""
        return len(self._slow)

    def start(self) -> HealthServer:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the HTTP server's event loop did not start within 10 s")
        return self

    def stop(self) -> None:
        stopping = self._stopping
        if stopping is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(stopping.set)
            self._thread.join(10)
        elif not self._thread.is_alive():
            self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the event loop

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._connected, sock=self._socket, limit=MAX_LINE)
        self._started.set()
        async with server:
            await self._stopping.wait()
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        transport = writer.transport
        conn = _Connection(str(peer[0]) if peer else "?", transport.abort)
        if self._open >= self._max_connections:
            self._drop(conn, "too many connections")
            return
        self._tasks.add(task)
        self._open += 1
        try:
            async with asyncio.timeout(self.deadline_s):
                await self._exchange(conn, reader, writer)
        except TimeoutError:
            self._log.debug("http.cut_off", client=conn.client)
        except OSError as exc:  # hung up, reset: the client's business
            self._log.debug("http.client_gone", client=conn.client, error=repr(exc))
        except Exception:
            self._log.error("http.handler_failed", client=conn.client, exc_info=True)
        finally:
            self._slow.release(conn)
            self._open -= 1
            if not transport.is_closing():
                transport.abort()
            self._tasks.discard(task)

    def _drop(self, conn: _Connection, why: str) -> None:
        self.refused += 1
        self._log.debug("http.refused", client=conn.client, why=why, refused=self.refused)
        conn.close()

    async def _exchange(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await self._request(conn, reader)
        except _BadRequest as exc:
            response, is_head = HttpResponse(exc.status, f"{exc.status.phrase}\n".encode()), False
        else:
            if head is None:
                return  # the client hung up (or was evicted) before its request was whole
            method, target = head
            is_head = method == "HEAD"
            response = await self._respond(method, target)
        writer.write(_encode(response, head=is_head))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def _request(
        self, conn: _Connection, reader: asyncio.StreamReader
    ) -> tuple[str, str] | None:
        """The request's method and target, read within ``read_timeout_s``. Past the grace the
        connection is slow: it counts against the limits until its request is whole."""
        async with asyncio.timeout(self.read_timeout_s):
            reading = asyncio.ensure_future(_read_head(reader))
            try:
                done, _ = await asyncio.wait({reading}, timeout=GRACE_S)
                if not done:
                    for victim in self._slow.admit(conn):
                        self._drop(victim, "slow clients over the limit")
                head = await reading
            finally:
                reading.cancel()
        self._slow.release(conn)
        return head

    async def _respond(self, method: str, target: str) -> HttpResponse:
        if method not in ("GET", "HEAD"):
            return HttpResponse(501, b"unsupported method\n")
        url = urllib.parse.urlsplit(target)
        route = self.routes.get(url.path)
        if route is None:
            return HttpResponse(404, b"not found\n")
        request = HttpRequest(url.path, urllib.parse.parse_qs(url.query))
        if url.path in PROBES:
            return route(request)
        if self._queued >= self._queue_limit:
            return HttpResponse(503, b"busy\n")
        self._queued += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, route, request)
        finally:
            self._queued -= 1

    # ------------------------------------------------------------------ routes

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
