"""kazoo's connection handler reading and writing first, waiting only when the socket would block.

kazoo's connection thread waits on its socket (``handler.select``) before every ``recv`` and
every ``send``: a response costs three waits (the loop's, then one before its 4-byte length and
one before its body) and a request two, although the socket is non-blocking and the loop's own
wait has just said the response is there. With one thousand processor sessions that is about 35
``poll`` calls per rebalance for each survivor's 5 requests and 2 watch events, most of them
answered at once. :class:`EagerConnection` tries the ``recv`` / ``send`` first and waits only on
``EAGAIN``: the same bytes, the same timeouts and errors, one wait per message fewer than two.
TLS sockets keep kazoo's own code (an ``SSLSocket`` may hold decrypted bytes that ``poll`` does
not see, which kazoo's ``pending()`` check handles).

kazoo builds its :class:`~kazoo.protocol.connection.ConnectionHandler` inside ``KazooClient``
with no factory to pass; :func:`read_eagerly` turns a new client's handler into this subclass
before the client starts (it adds methods only, no state). ``tests/unit/test_zk_connection.py``
pins the two kazoo methods it replaces.
"""

from __future__ import annotations

import ssl
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped
from kazoo.protocol.connection import ConnectionHandler

__all__ = ["EagerConnection", "read_eagerly"]


class EagerConnection(ConnectionHandler):  # type: ignore[misc]  # (kazoo: untyped)
    """kazoo's handler whose ``_read`` and ``_write`` wait only when the socket would block."""

    def _read(self, length: int, timeout: float) -> bytes:
        sock = self._socket
        if isinstance(sock, ssl.SSLSocket):
            return bytes(super()._read(length, timeout))
        parts: list[bytes] = []
        remaining = length
        try:  # (kazoo's ``_socket_error_handling``, without a context manager per read)
            while remaining > 0:
                try:
                    chunk: bytes | None = sock.recv(remaining)
                except BlockingIOError:
                    chunk = None
                if chunk is None:
                    self._wait_until_ready(sock, timeout, writing=False)
                    continue
                if not chunk:
                    raise ConnectionDropped("socket connection broken")
                parts.append(chunk)
                remaining -= len(chunk)
        except OSError as exc:
            raise _dropped(exc) from exc
        return parts[0] if len(parts) == 1 else b"".join(parts)

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


def read_eagerly(client: KazooClient) -> KazooClient:
    """Make ``client``'s connection an :class:`EagerConnection`; call it before ``start``."""
    connection: Any = client._connection
    if type(connection) is not ConnectionHandler:
        raise TypeError(f"expected kazoo's ConnectionHandler, got {type(connection).__name__}")
    connection.__class__ = EagerConnection
    return client
