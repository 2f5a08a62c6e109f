"""kazoo's connection handler reading and writing first, waiting only when the socket would block.

kazoo's connection thread waits on its socket (``handler.select``) before every ``recv`` and
every ``send``: a response costs three waits (the loop's, then one before its 4-byte length and
one before its body) and a request two, although the socket is non-blocking and the loop's own
wait has just said the response is there. With one thousand processor sessions that is about 35
``poll`` calls per rebalance for each survivor's 5 requests and 2 watch events, most of them
answered at once. :class:`EagerConnection` tries the ``recv`` / ``send`` first and waits only on
``EAGAIN``: the same bytes, the same timeouts and errors, one wait per message fewer than two.
Once the session is up, one ``recv`` takes whatever the socket holds (kazoo reads a message's
length, then its body: two reads each), and every whole message it brought in is handled before
the loop waits again: two pipelined answers, or an answer and a watch event, cost one wait and
one read. During the handshake it reads only what is asked for, as kazoo reads those replies
outside its loop.
TLS sockets keep kazoo's own code (an ``SSLSocket`` may hold decrypted bytes that ``poll`` does
not see, which kazoo's ``pending()`` check handles).

The caller writes its own request. kazoo's ``KazooClient._call`` queues a request and wakes the
connection thread through a pipe (a byte written, a ``poll`` return, the byte read back) for
that thread to write it: about 30 us of CPU of a plain ``get``'s 130 here. :class:`DirectClient`
writes it from the calling thread instead (:meth:`EagerConnection.send_now`) when the session is
connected, its handshake and authentication are over, nothing waits in kazoo's queue before it
and the socket is not TLS (an ``SSLSocket`` must not be written while another thread reads
it); otherwise it queues as kazoo does. One lock orders every write and every ``xid``: the
caller's, and the connection thread's (queued requests, pings), and it is held while the
client's state changes, so a request is either written and pending before a disconnection fails
every pending request, or queued after it. A write that fails leaves a broken or half-written
stream: the caller shuts the socket down, and the connection thread reconnects and fails the
request with ``ConnectionLoss``, as it would have had it written it.

kazoo builds its :class:`~kazoo.protocol.connection.ConnectionHandler` inside ``KazooClient``
with no factory to pass; :func:`lean_client` turns a new client into a :class:`DirectClient`
and its handler into this subclass before the client starts (the class swap adds methods and
the lock). ``tests/unit/test_zk_connection.py`` pins the kazoo methods it replaces or wraps.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped
from kazoo.protocol.connection import CLOSE_RESPONSE, ConnectionHandler
from kazoo.protocol.states import KeeperState

__all__ = ["DirectClient", "EagerConnection", "lean_client"]

_log = logging.getLogger(__name__)
_XID_WRAP = 2147483647  # as kazoo's connection numbers requests
_RECV_BYTES = 65536  # what one read of a connected socket takes at most, beyond what is asked


class EagerConnection(ConnectionHandler):  # type: ignore[misc]  # (kazoo: untyped)
    """kazoo's handler whose ``_read`` and ``_write`` wait only when the socket would block, and
    which lets the calling thread write a request itself (:meth:`send_now`)."""

    _send_lock: threading.RLock  # (set by lean_client) every write and xid, and state changes
    _direct: bool  # the handshake and authentication of the current connection are over
    _send_timeout: float  # kazoo's connect timeout of the current connection, seconds
    _xid: int  # (kazoo's) the last request's number
    _inbox: bytearray  # (set by lean_client) bytes read from the socket, not yet handled

    def send_now(self, request: Any, async_object: Any) -> bool:
        """Write ``request`` from the calling thread, pending ``async_object``; False (nothing
        done) unless the connection is up and nothing queued must go first."""
        client = self.client
        with self._send_lock:
            sock = self._socket
            if (
                not self._direct
                or client._state != KeeperState.CONNECTED
                or client._queue
                or sock is None
                or isinstance(sock, ssl.SSLSocket)
            ):
                return False
            xid = self._xid = (self._xid % _XID_WRAP) + 1
            client._pending.append((request, async_object, xid))  # before its answer can come
            try:
                self._submit(request, self._send_timeout, xid)
            except Exception as exc:  # the stream is broken: the connection thread reconnects
                _log.warning("a direct write failed, dropping the connection: %r", exc)
                _shut_down(sock)
            return True

    def _connect(self, host: str, hostip: str, port: int) -> tuple[float, float]:
        with self._send_lock:
            self._direct = False
        self._inbox = bytearray()  # (what the last connection left unread is void)
        read_timeout, connect_timeout = super()._connect(host, hostip, port)
        with self._send_lock:  # authenticated too: from now on callers may write
            self._direct, self._send_timeout = True, connect_timeout / 1000.0
        return read_timeout, connect_timeout

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        with self._send_lock:
            super()._send_request(read_timeout, connect_timeout)

    def _send_ping(self, connect_timeout: float) -> None:
        with self._send_lock:
            super()._send_ping(connect_timeout)

    def _read_socket(self, read_timeout: float) -> Any:
        """Handle one response or event (kazoo's), then every further one that a read already
        brought in whole: kazoo's loop waits on the socket, which no longer shows them."""
        response = super()._read_socket(read_timeout)
        while response != CLOSE_RESPONSE and self._whole_message_buffered():
            response = super()._read_socket(read_timeout)
        return response

    def _whole_message_buffered(self) -> bool:
        inbox = self._inbox
        return len(inbox) >= 4 and len(inbox) >= 4 + int.from_bytes(inbox[:4], "big", signed=True)

    def _read(self, length: int, timeout: float) -> bytes:
        sock = self._socket
        if isinstance(sock, ssl.SSLSocket):
            return bytes(super()._read(length, timeout))
        inbox = self._inbox
        # Once connected, take what the socket has (several messages at once); during the
        # handshake only what was asked for: kazoo's loop has not started to drain the rest.
        most = _RECV_BYTES if self._direct else 0
        try:  # (kazoo's ``_socket_error_handling``, without a context manager per read)
            while len(inbox) < length:
                try:
                    chunk: bytes | None = sock.recv(max(length - len(inbox), most))
                except BlockingIOError:
                    chunk = None
                if chunk is None:
                    self._wait_until_ready(sock, timeout, writing=False)
                    continue
                if not chunk:
                    raise ConnectionDropped("socket connection broken")
                inbox += chunk
        except OSError as exc:
            raise _dropped(exc) from exc
        message = bytes(inbox[:length])
        del inbox[:length]
        return message

    def _write(self, msg: bytes, timeout: float) -> None:
        sock = self._socket
        if isinstance(sock, ssl.SSLSocket):
            super()._write(msg, timeout)
            return
        view = memoryview(msg)
        try:
            while view:
                try:
                    sent: int | None = sock.send(view)
                except BlockingIOError:
                    sent = None
                if sent is None:
                    self._wait_until_ready(sock, timeout, writing=True)
                    continue
                if not sent:
                    raise ConnectionDropped("socket connection broken")
                view = view[sent:]
        except OSError as exc:
            raise _dropped(exc) from exc

    def _wait_until_ready(self, sock: Any, timeout: float, *, writing: bool) -> None:
        """Wait until ``sock`` can be read (or written), or raise kazoo's time-out error."""
        readable, writable, _ = self.handler.select(
            [] if writing else [sock], [sock] if writing else [], [], timeout
        )
        if not (writable if writing else readable):
            what = "write" if writing else "read"
            raise self.handler.timeout_exception(f"socket time-out during {what}")


def _dropped(exc: OSError) -> ConnectionDropped:
    """kazoo's error for a failed socket call (its loop reconnects on it)."""
    return ConnectionDropped(f"socket connection error: {exc.strerror or exc}")


def _shut_down(sock: socket.socket) -> None:
    """End both directions of ``sock``: the connection thread's next wait or read fails."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError as exc:  # closed already: the connection thread is reconnecting
        _log.debug("shutting the socket down: %r", exc)


class DirectClient(KazooClient):  # type: ignore[misc]  # (kazoo: untyped)
    """A KazooClient whose calling thread writes its request itself when it can
    (:meth:`EagerConnection.send_now`), and whose state changes hold the connection's send lock.
    """

    _connection: EagerConnection

    def _call(self, request: Any, async_object: Any) -> Any:
        if self._connection.send_now(request, async_object):
            return None
        return super()._call(request, async_object)

    def _session_callback(self, state: Any) -> None:
        with self._connection._send_lock:  # pending either failed by this change, or queued
            super()._session_callback(state)


def lean_client(client: KazooClient) -> KazooClient:
    """Make ``client`` a :class:`DirectClient` and its connection an :class:`EagerConnection`;
    call it before ``start``."""
    connection: Any = client._connection
    if type(connection) is not ConnectionHandler or type(client) is not KazooClient:
        raise TypeError(
            f"expected kazoo's KazooClient and ConnectionHandler, got {type(client).__name__} "
            f"and {type(connection).__name__}"
        )
    connection._send_lock = threading.RLock()
    connection._direct, connection._send_timeout = False, 10.0
    connection._inbox = bytearray()
    connection.__class__ = EagerConnection
    client.__class__ = DirectClient
    return client
