"""The rules of a caller writing its own request (``EagerConnection.send_now`` behind
``DirectClient._call``), one by one on a socket pair with a real, unstarted ``KazooClient``: when
it writes (connected, authenticated, nothing queued before it, not TLS) and what (the request
numbered next, pending before it is written); a failed write; the state change that holds the
lock. Against a real server: ``tests/integration/test_zk_direct_send_live.py``.
"""

from __future__ import annotations

import inspect
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import GetData
from kazoo.protocol.states import KeeperState

from metadata.zk.connection import DirectClient, lean_client


@pytest.fixture
def wired() -> Iterator[tuple[Any, Any, socket.socket]]:
    """A client whose connection is up on one end of a socket pair: connected, handshake over."""
    client: Any = lean_client(KazooClient(hosts="127.0.0.1:1"))
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.settimeout(1.0)
    connection = client._connection
    connection._socket, connection._xid = ours, 0
    connection._direct, connection._send_timeout = True, 1.0
    client._state = KeeperState.CONNECTED
    try:
        yield client, connection, peer
    finally:
        ours.close()
        peer.close()


def request_on_the_wire(peer: socket.socket) -> tuple[int, int, bytes]:
    """(xid, type, body) of the next request the peer receives."""
    length = struct.unpack("!i", peer.recv(4))[0]
    message = b""
    while len(message) < length:
        message += peer.recv(length - len(message))
    xid, kind = struct.unpack("!ii", message[:8])
    return xid, kind, message[8:]


def test_a_connected_caller_writes_the_next_numbered_request_after_making_it_pending(
    wired: Any,
) -> None:
    client, _connection, peer = wired
    answer = client.handler.async_result()
    client._call(GetData("/a", None), answer)
    xid, kind, body = request_on_the_wire(peer)
    assert (xid, kind) == (1, GetData.type) and b"/a" in body
    assert [(r.path, a, x) for r, a, x in client._pending] == [("/a", answer, 1)]
    assert not client._queue  # nothing for the connection thread to take
    client._call(GetData("/b", None), client.handler.async_result())
    assert request_on_the_wire(peer)[0] == 2


@pytest.mark.parametrize(
    "situation",
    ["connecting", "handshake or authentication running", "a request queued before it", "TLS"],
)
def test_otherwise_the_request_is_queued_as_kazoo_does(wired: Any, situation: str) -> None:
    client, connection, peer = wired
    if situation == "connecting":
        client._state = KeeperState.CONNECTING
    elif situation == "handshake or authentication running":
        connection._direct = False
    elif situation == "a request queued before it":
        client._queue.append((GetData("/first", None), client.handler.async_result()))
    else:
        connection._socket = ssl.SSLSocket.__new__(ssl.SSLSocket)  # (only its type is looked at)
    assert connection.send_now(GetData("/x", None), client.handler.async_result()) is False
    assert not client._pending
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(1)  # nothing written


def test_a_failed_write_shuts_the_socket_down_and_leaves_the_request_pending(
    wired: Any,
) -> None:
    client, connection, peer = wired
    peer.close()  # the server went away: the write fails
    answer = client.handler.async_result()
    assert connection.send_now(GetData("/a", None), answer) is True
    assert [a for _r, a, _x in client._pending] == [answer]  # failed by the disconnection
    assert not answer.ready()
    with pytest.raises(OSError):
        connection._socket.send(b"more")  # shut down: the connection thread's read fails too


def test_a_state_change_waits_for_a_write_in_progress(wired: Any) -> None:
    client, connection, _peer = wired
    changed = threading.Event()

    def change() -> None:
        client._session_callback(KeeperState.CONNECTING)
        changed.set()

    with connection._send_lock:  # as a caller writing its request
        thread = threading.Thread(target=change)
        thread.start()
        assert not changed.wait(0.2)  # pending is not failed under a write's feet
    assert changed.wait(2.0)
    thread.join()
    assert client._state == KeeperState.CONNECTING


def test_a_client_is_made_direct_once() -> None:
    client = lean_client(KazooClient(hosts="127.0.0.1:1"))
    assert type(client) is DirectClient
    with pytest.raises(TypeError, match="DirectClient"):
        lean_client(client)


def test_kazoo_still_has_the_methods_it_wraps() -> None:
    """A kazoo upgrade that renames or reshapes them must fail here, not in production."""
    for owner, name, params in (
        (ConnectionHandler, "_connect", ["self", "host", "hostip", "port"]),
        (ConnectionHandler, "_send_request", ["self", "read_timeout", "connect_timeout"]),
        (ConnectionHandler, "_send_ping", ["self", "connect_timeout"]),
        (ConnectionHandler, "_submit", ["self", "request", "timeout", "xid"]),
        (KazooClient, "_call", ["self", "request", "async_object"]),
        (KazooClient, "_session_callback", ["self", "state"]),
        (
            KazooClient,
            "_create_async_inner",
            ["self", "path", "value", "acl", "flags", "trailing", "include_data"],
        ),
    ):
        assert list(inspect.signature(getattr(owner, name)).parameters) == params, name
    client: Any = KazooClient(hosts="127.0.0.1:1")
    assert hasattr(client, "_pending") and hasattr(client, "_queue")
