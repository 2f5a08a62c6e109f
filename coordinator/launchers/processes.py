"""Local daemons' process helpers: a free port, waiting until a process is ready (or has exited),
stopping processes (SIGTERM, then SIGKILL) or killing them at once, one process or its whole
group; and :class:`LocalDaemon`, what one server process of ours does besides starting (its log,
stop, kill, restart), the base of :class:`~coordinator.launchers.zookeeper.EmbeddedZooKeeper` and
:class:`~coordinator.launchers.kafka.KafkaBroker`. Every daemon we start uses them (the Spark
cluster too)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = [
    "LocalDaemon",
    "ProcessExited",
    "free_port",
    "group_alive",
    "kill_process",
    "port_open",
    "signal_group",
    "stop_group",
    "stop_processes",
    "wait_until",
]


class ProcessExited(RuntimeError):
    """A process exited while we waited for it to become ready."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Something accepts connections on ``host:port`` (raises ``OSError`` if not)."""
    with socket.create_connection((host, port), timeout=timeout_s):
        return True


def wait_until(
    ready: Callable[[], bool],
    process: subprocess.Popen[bytes],
    timeout_s: float,
    what: str,
    poll_s: float = 0.1,
) -> None:
    """Poll ``ready()`` (an ``OSError`` counts as not ready) until it is true.

    Raises :class:`ProcessExited` if ``process`` exits first, ``TimeoutError`` (``what`` and the
    timeout) after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ProcessExited(f"process {process.args!r} exited with {process.returncode}")
        with contextlib.suppress(OSError):
            if ready():
                return
        time.sleep(poll_s)
    raise TimeoutError(f"{what} after {timeout_s}s")


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid`` (gone or not ours: ignored)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals, group: bool) -> None:
    if group:
        signal_group(process.pid, sig)
    elif process.poll() is None:
        process.send_signal(sig)


def stop_processes(
    processes: Iterable[subprocess.Popen[bytes] | None],
    timeout_s: float = 10.0,
    *,
    group: bool = False,
) -> None:
    """SIGTERM every process, wait up to ``timeout_s`` (for all of them together), then SIGKILL
    what is left. With ``group`` (processes started with ``start_new_session``) the signals go
    to each process group, and whatever remains in it (children) is killed at the end."""
    running = [p for p in processes if p is not None and (group or p.poll() is None)]
    for process in running:
        if process.poll() is None:
            _signal(process, signal.SIGTERM, group)
    deadline = time.monotonic() + timeout_s
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
    for process in running:
        _signal(process, signal.SIGKILL, group)
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def kill_process(process: subprocess.Popen[bytes] | None, *, group: bool = False) -> None:
    """SIGKILL ``process`` (with ``group``: its whole process group) at once, and reap it."""
    if process is None or (not group and process.poll() is not None):
        return
    _signal(process, signal.SIGKILL, group)
    process.wait()


def group_alive(pgid: int) -> bool:
    """Some process of group ``pgid`` still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM process group ``pgid`` (a daemon started in a session of its own, not a child of
    this process), wait up to ``timeout_s`` for it to end, then SIGKILL what is left."""
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    signal_group(pgid, signal.SIGKILL)


class LocalDaemon:
    """One server process of ours, once started (:meth:`start`, the subclass's): where it logs,
    and how it stops (SIGTERM, then SIGKILL after :attr:`stop_timeout_s`), dies (SIGKILL, like a
    crash) and comes back on its data. Usable as a context manager::

        with EmbeddedZooKeeper(workdir) as zookeeper:   # started; stopped at the end
            zookeeper.restart(hard=True)                # kill -9, then start again
    """

    stop_timeout_s = 10.0

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The process id while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop it gracefully (SIGTERM), or kill it if it does not stop in time."""
        with self._lock:
            process, self._process = self._process, None
        stop_processes([process], self.stop_timeout_s if timeout_s is None else timeout_s)

    def kill(self) -> None:
        """Kill it at once (SIGKILL, like a crash): nothing is flushed or closed."""
        with self._lock:
            process, self._process = self._process, None
        kill_process(process)

    def restart(self, *, hard: bool = True, down_s: float = 0.0) -> None:
        """Kill (``hard``) or stop it, wait ``down_s``, start it again on the same data."""
        if hard:
            self.kill()
        else:
            self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
