"""The eager connection handler reads and writes first and waits only when the socket would block:
the same bytes, time-outs and errors as kazoo's, without a wait per read when the bytes are there.

Real sockets (a socket pair) and a real, unstarted ``KazooClient``; against ZooKeeper every
integration test runs through it (``metadata.zk.connect``), TLS included (``test_zk_security``).
"""

from __future__ import annotations

import inspect
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.connection import ConnectionHandler

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


def test_kazoo_still_has_the_two_methods_it_replaces() -> None:
    """A kazoo upgrade that renames or reshapes them must fail here, not in production."""
    for name, params in (
        ("_read", ["self", "length", "timeout"]),
        ("_write", ["self", "msg", "timeout"]),
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
