"""A private ZooKeeper server for ``affinity demo`` (Debian's ``zookeeper`` package).

:class:`EmbeddedZooKeeper` writes a standalone ``zoo.cfg`` in its work directory, starts
``java ... org.apache.zookeeper.server.ZooKeeperServerMain`` on a free 127.0.0.1 port, waits
until ``srvr`` answers ``Mode:``, and stops the server with SIGTERM (SIGKILL if it lingers)::

    with EmbeddedZooKeeper(workdir) as zk:
        client = connect(zk.hosts)
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

__all__ = [
    "MAIN_CLASS",
    "SLF4J_SIMPLE_JAR",
    "ZOOKEEPER_JAR",
    "EmbeddedZooKeeper",
    "ZooKeeperUnavailable",
    "four_letter_word",
    "free_port",
    "stop_process",
]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperUnavailable(RuntimeError):
    """The server could not be started (package missing, startup failed or timed out)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[bytes] | None, timeout_s: float = 10.0) -> None:
    """SIGTERM ``process``, then SIGKILL if it has not exited after ``timeout_s``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def four_letter_word(port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a four-letter command to the server on 127.0.0.1:``port``; its whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class EmbeddedZooKeeper:
    """One standalone ZooKeeper server in ``workdir`` (``data/``, ``zoo.cfg``, ``server.log``)."""

    def __init__(self, workdir: Path, *, heap_mb: int = 256, startup_timeout_s: float = 30.0):
        self.workdir = Path(workdir)
        self.port = free_port()
        self.heap_mb = heap_mb
        self.startup_timeout_s = startup_timeout_s
        self.log_path = self.workdir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _write_config(self) -> Path:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok",
                    "minSessionTimeout=1000",
                ]
            )
            + "\n"
        )
        return config

    def start(self) -> EmbeddedZooKeeper:
        for jar in (ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR):
            if not jar.exists():
                raise ZooKeeperUnavailable(
                    f"{jar} is missing: install Debian's zookeeper and libslf4j-java packages"
                )
        config = self._write_config()
        command = [
            "java",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}",
            MAIN_CLASS,
            str(config),
        ]
        with self.log_path.open("ab") as log:
            try:
                self._process = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            except FileNotFoundError as exc:
                raise ZooKeeperUnavailable(f"cannot start java: {exc}") from None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with {self._process.returncode}; see {self.log_path}"
                )
            with contextlib.suppress(OSError):
                if "Mode:" in four_letter_word(self.port, "srvr"):
                    return self
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(
            f"ZooKeeper did not answer within {self.startup_timeout_s}s; see {self.log_path}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if the server has not exited after ``timeout_s``."""
        process, self._process = self._process, None
        stop_process(process, timeout_s)

    def __enter__(self) -> EmbeddedZooKeeper:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
