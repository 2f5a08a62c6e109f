"""Hostile HTTP clients for the tests of the coordinator's endpoints (issue 28 item 2).

``SlowClients(port, count)``: ``count`` threads, each holding an unfinished request (a request
line and one header, then a header byte a second, never the blank line) and opening another
connection when dropped. ``probe(port, path)``: one GET as the chart's probes make it (3 s
timeout), returning the status (0: no answer) and the seconds it took.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time

__all__ = ["SlowClients", "probe"]


class SlowClients:
    """``count`` clients, each holding an unfinished request (a request line and one header,
    then a header byte a second, never the blank line) and opening another when dropped."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.opened = 0
        self.threads = [
            threading.Thread(target=self._hold, daemon=True, name=f"slow-{i}") for i in range(count)
        ]

    def __enter__(self) -> SlowClients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)

    def _hold(self) -> None:
        while not self.stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                self.stop.wait(0.05)
                continue
            self.opened += 1
            try:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: affinity\r\nX-Slow: ")
                sock.settimeout(1.0)
                while not self.stop.is_set():
                    try:
                        if sock.recv(1) == b"":
                            break  # dropped: open another
                    except TimeoutError:
                        sock.sendall(b"a")
            except OSError:
                pass
            finally:
                sock.close()
            self.stop.wait(0.05)


def probe(port: int, path: str = "/healthz") -> tuple[int, float]:
    """GET ``path`` as the chart's probes do (3 s timeout): (status or 0, seconds)."""
    began = time.monotonic()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            return answer.status, time.monotonic() - began
        finally:
            connection.close()
    except OSError:
        return 0, time.monotonic() - began
