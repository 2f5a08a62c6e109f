"""A client's calling thread writes its own request (``metadata.zk.connection.DirectClient``),
against a real ZooKeeper server: no wake-up of kazoo's connection thread per request, answers
that still match their requests when many threads call at once, and a server crash in the
middle of it that loses no answer and leaves nothing pending.

(The rules themselves, one by one on a socket pair: ``tests/unit/test_zk_direct_send.py``.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from metadata.zk.connection import DirectClient

pytestmark = pytest.mark.zk

Connect = Callable[..., KazooClient]


def count_queued_sends(client: KazooClient) -> list[int]:
    """How many requests kazoo's connection thread takes from its queue (``_send_request``)."""
    connection: Any = client._connection
    taken = [0]
    original = connection._send_request

    def counted(*args: Any) -> None:
        taken[0] += 1
        original(*args)

    connection._send_request = counted
    return taken


def test_requests_are_written_by_the_caller_not_queued(
    zk_server: EmbeddedZooKeeper, zk_connect: Connect
) -> None:
    client = zk_connect(zk_server.hosts)
    assert type(client) is DirectClient
    client.ensure_path("/direct/plain")
    queued = count_queued_sends(client)
    for n in range(50):
        client.set("/direct/plain", str(n).encode())
        assert client.get("/direct/plain")[0] == str(n).encode()
    assert queued[0] == 0  # kazoo's own _call queues all 100, each through the wake-up pipe
    assert not client._pending and not client._queue


def test_answers_match_their_requests_when_threads_call_at_once(
    zk_server: EmbeddedZooKeeper, zk_connect: Connect
) -> None:
    client = zk_connect(zk_server.hosts)
    states: list[str] = []
    client.add_listener(states.append)
    client.ensure_path("/direct/threads")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        path = f"/direct/threads/t{n}"
        try:
            client.create(path, b"0")
            for i in range(150):
                client.set(path, f"{n}:{i}".encode())
                assert client.get(path)[0] == f"{n}:{i}".encode()
                asynchronous = [client.exists_async(path) for _ in range(3)]
                assert all(a.get(10).version == i + 1 for a in asynchronous)
            client.delete(path)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert states == []  # never suspended: no answer came to the wrong request (xid order)
    assert client.get_children("/direct/threads") == []


def test_a_server_crash_mid_traffic_fails_calls_cleanly_and_leaves_nothing_pending(
    zk_private_server: EmbeddedZooKeeper, zk_connect: Connect
) -> None:
    client = zk_connect(zk_private_server.hosts, session_timeout_s=20.0)
    client.ensure_path("/direct/crash")
    stop = threading.Event()
    outcomes: dict[str, int] = {"ok": 0, "lost": 0}
    unexpected: list[BaseException] = []

    def work(n: int) -> None:
        path = f"/direct/crash/t{n}"
        client.ensure_path(path)
        while not stop.is_set():
            try:
                client.set(path, b"x")
                client.get(path)
                outcomes["ok"] += 1
            except (ConnectionLoss, SessionExpiredError, KazooTimeoutError):
                outcomes["lost"] += 1
                time.sleep(0.05)
            except BaseException as exc:  # reported below
                unexpected.append(exc)
                return

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    zk_private_server.restart(hard=True, down_s=1.0)  # kill -9 under traffic, then back
    deadline = time.monotonic() + 30
    while client.state != KazooState.CONNECTED and time.monotonic() < deadline:
        time.sleep(0.05)
    before = outcomes["ok"]
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert unexpected == []
    assert outcomes["lost"] >= 1  # the crash was felt ...
    assert outcomes["ok"] > before  # ... and calls go through again after it
    assert not client._pending and not client._queue  # nothing stale left to confuse xids
    assert client.get("/direct/crash/t0")[0] == b"x"
