"""The eager connection handler reads and writes first and waits only when the socket would block:
the same bytes, time-outs and errors as kazoo's, without a wait per read when the bytes are there.

Real sockets (a socket pair) and a real, unstarted ``KazooClient``; against ZooKeeper every
integration test runs through it (``metadata.zk.connect``), TLS included (``test_zk_security``).
"""

from __future__ import annotations

import inspect
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import GetData

from metadata.zk.connection import EagerConnection, lean_client
from metadata.zk.handler import PollingHandler


class CountingHandler(PollingHandler):
    """The polling handler, counting its waits."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def select(self, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        self.waits += 1
        return super().select(*args, **kwargs)


@pytest.fixture
def wired() -> Iterator[tuple[Any, socket.socket, CountingHandler]]:
    """An eager connection on one end of a socket pair (non-blocking, as kazoo sets it)."""
    handler = CountingHandler()
    client = lean_client(KazooClient(hosts="127.0.0.1:1", handler=handler))
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    connection: Any = client._connection
    connection._socket = ours
    try:
        yield connection, peer, handler
    finally:
        ours.close()
        peer.close()


def test_a_client_gets_the_eager_connection_once() -> None:
    client = lean_client(KazooClient(hosts="127.0.0.1:1"))
    assert type(client._connection) is EagerConnection
    with pytest.raises(TypeError, match="EagerConnection"):
        lean_client(client)


def test_kazoo_still_has_the_methods_it_replaces() -> None:
    """A kazoo upgrade that renames or reshapes them must fail here, not in production."""
    for name, params in (
        ("_read", ["self", "length", "timeout"]),
        ("_write", ["self", "msg", "timeout"]),
        ("_read_socket", ["self", "read_timeout"]),
    ):
        assert list(inspect.signature(getattr(ConnectionHandler, name)).parameters) == params
    assert hasattr(ConnectionHandler, "_socket_error_handling")


def test_bytes_already_there_are_read_without_a_wait(wired: Any) -> None:
    connection, peer, handler = wired
    peer.sendall(b"\x00\x00\x00\x05hello")
    assert connection._read(4, 1.0) == b"\x00\x00\x00\x05"
    assert connection._read(5, 1.0) == b"hello"
    connection._write(b"request", 1.0)
    assert peer.recv(16) == b"request"
    assert handler.waits == 0  # kazoo's own code waits before each of the three


def test_a_message_arriving_in_pieces_is_read_whole(wired: Any) -> None:
    connection, peer, handler = wired

    def send_slowly() -> None:
        for piece in (b"ab", b"cde", b"fghij"):
            time.sleep(0.05)
            peer.sendall(piece)

    sender = threading.Thread(target=send_slowly)
    sender.start()
    assert connection._read(10, 2.0) == b"abcdefghij"
    sender.join()
    assert handler.waits >= 1  # it waited when the socket had nothing


def test_a_big_write_waits_for_room_and_arrives_in_order(wired: Any) -> None:
    connection, peer, _handler = wired
    message = bytes(range(256)) * 16_384  # 4 MiB: more than the socket buffers hold
    received = bytearray()

    def drain() -> None:
        while len(received) < len(message):
            received.extend(peer.recv(65_536))

    reader = threading.Thread(target=drain)
    reader.start()
    connection._write(message, 5.0)
    reader.join(10)
    assert bytes(received) == message


def test_nothing_to_read_times_out_as_kazoo_does(wired: Any) -> None:
    connection, _peer, _handler = wired
    started = time.monotonic()
    with pytest.raises(KazooTimeoutError, match="during read"):
        connection._read(4, 0.1)
    assert time.monotonic() - started >= 0.09


def test_a_full_socket_times_out_on_write(wired: Any) -> None:
    connection, _peer, _handler = wired  # the peer never reads
    with pytest.raises(KazooTimeoutError, match="during write"):
        connection._write(b"x" * (16 * 1024 * 1024), 0.2)


def test_a_closed_peer_or_socket_drops_the_connection(wired: Any) -> None:
    connection, peer, _handler = wired
    peer.sendall(b"ab")
    peer.close()
    with pytest.raises(ConnectionDropped, match="broken"):
        connection._read(4, 1.0)  # two bytes, then the end
    with pytest.raises(ConnectionDropped, match="socket connection error"):
        connection._write(b"x" * 1_000_000, 1.0)  # the peer is gone: EPIPE / ECONNRESET
    connection._socket.close()
    with pytest.raises(ConnectionDropped, match="socket connection error"):
        connection._read(4, 1.0)


def _error_reply(xid: int, err: int) -> bytes:
    """ZooKeeper's framed reply to request ``xid`` failing with ``err`` (header only)."""
    body = struct.pack("!iqi", xid, 7, err)
    return struct.pack("!i", len(body)) + body


def _pend(connection: Any, xid: int) -> Any:
    """A GetData request ``xid`` awaiting its answer, as kazoo keeps it."""
    result = connection.client.handler.async_result()
    connection.client._pending.append((GetData(f"/n{xid}", None), result, xid))
    return result


def test_messages_read_together_are_all_handled_before_the_next_wait(wired: Any) -> None:
    """Once connected, one read takes what the socket has; every whole message it brought in is
    handled at once (kazoo's loop waits on the socket, which no longer shows them)."""
    connection, peer, handler = wired
    connection._direct = True
    first, second, third = _pend(connection, 1), _pend(connection, 2), _pend(connection, 3)
    whole = _error_reply(1, -101) + _error_reply(2, -101)
    peer.sendall(whole + _error_reply(3, -101)[:6])  # and the start of a third
    connection._read_socket(1.0)
    for answered in (first, second):
        with pytest.raises(NoNodeError):
            answered.get(timeout=0)
    assert not third.ready() and len(connection._inbox) == 6  # kept for the next read
    assert handler.waits == 0
    peer.sendall(_error_reply(3, -101)[6:])
    connection._read_socket(1.0)
    with pytest.raises(NoNodeError):
        third.get(timeout=0)
    assert not connection._inbox


def test_the_handshake_reads_only_what_it_asks_for(wired: Any) -> None:
    """Before the session is up kazoo reads its replies itself, not through its loop: a read
    must leave the next message in the socket, where the loop's wait will see it."""
    connection, peer, _handler = wired
    peer.sendall(_error_reply(1, 0) + _error_reply(2, 0))
    length = struct.unpack("!i", connection._read(4, 1.0))[0]
    connection._read(length, 1.0)
    assert not connection._inbox
    assert connection._socket.recv(64, socket.MSG_PEEK) == _error_reply(2, 0)


def test_a_new_connection_starts_with_nothing_read(
    wired: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection, _peer, _handler = wired
    connection._inbox += b"\x00\x00\x00\x10half a reply of the old connection"
    monkeypatch.setattr(ConnectionHandler, "_connect", lambda *_args: (10_000, 4_000))
    assert connection._connect("zk", "127.0.0.1", 2181) == (10_000, 4_000)
    assert not connection._inbox and connection._direct
