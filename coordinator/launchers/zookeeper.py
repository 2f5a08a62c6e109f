"""The one ZooKeeper launcher: a private, real server for the demo, the tests and the benchmarks.

:class:`EmbeddedZooKeeper` is one standalone server of Debian's ``zookeeper`` package on a free
127.0.0.1 port, in its own work directory (``data/``, ``zoo.cfg``, ``server.log``). It waits
until ``srvr`` answers ``Mode:``; it stops with SIGTERM (SIGKILL if the server lingers), dies
with :meth:`~EmbeddedZooKeeper.kill` (SIGKILL, a crash), restarts on the same data directory and
port, and expires a client's session for real::

    with EmbeddedZooKeeper(workdir) as zk:
        client = connect(zk.hosts)
        zk.expire_session(client)   # the server closes the session; its ephemerals vanish
        zk.kill(); zk.start()       # kill -9 and restart: the client reconnects, same session

``tls=True`` adds a TLS client port (``secure_hosts``; ``tls``: a throw-away CA's PEM files).
Nothing is mocked; everything binds to 127.0.0.1. The process helpers (:func:`free_port`,
:func:`wait_until`, :func:`stop_processes`, :func:`kill_process`), which serve every local daemon
we start (e.g. the example's Spark cluster), are in :mod:`coordinator.launchers.processes`. An
ensemble on loopback would be three servers whose :meth:`~EmbeddedZooKeeper._config_lines` get
its ``server.N`` lines (and ``data/myid``), with their ``hosts`` joined; each server's process
life cycle stays as it is.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient, KazooState

from coordinator.launchers.processes import (
    LocalDaemon,
    ProcessExited,
    free_port,
    wait_until,
)

__all__ = ["EmbeddedZooKeeper", "TlsFiles", "ZooKeeperUnavailable", "four_letter_word"]

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
NETTY_JARS = ("netty-codec.jar", "netty-resolver.jar")  # beside ZOOKEEPER_JAR; TLS only
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
FOUR_LETTER_WORDS = "srvr,ruok,envi,mntr,cons"
# A server expires a session at the first tick after its timeout, so the tick bounds how late an
# expiry (and so a leader's replacement) comes: 500 ms, not ZooKeeper's 2 s default.
TICK_MS = 500


class ZooKeeperUnavailable(RuntimeError):
    """The server could not be started (package missing, startup failed or timed out)."""


def four_letter_word(port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a four-letter command to the server on 127.0.0.1:``port``; its whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throw-away CA and of one certificate for 127.0.0.1 signed by it."""

    ca: str
    certfile: str
    keyfile: str

    @classmethod
    def create(cls, directory: Path) -> TlsFiles:
        directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = directory / "ca.key", directory / "ca.pem"
        key, csr, cert = directory / "node.key", directory / "node.csr", directory / "node.pem"
        ext = directory / "node.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        steps = [
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key,
             "-out", ca_cert, "-days", "2", "-subj", "/CN=affinity-test-ca"],
            ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", "/CN=127.0.0.1"],
            ["openssl", "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
             "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext],
        ]  # fmt: skip
        for step in steps:
            subprocess.run([str(s) for s in step], check=True, capture_output=True)
        return cls(ca=str(ca_cert), certfile=str(cert), keyfile=str(key))


class EmbeddedZooKeeper(LocalDaemon):
    """One standalone ZooKeeper server in ``workdir`` (``data/``, ``zoo.cfg``, ``server.log``)."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        heap_mb: int = 256,
        tls: bool = False,
        startup_timeout_s: float = 30.0,
        detach: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.detach = detach  # a session of its own: outlives this process (affinity dev up)
        self.data_dir = self.workdir / "data"
        self.port = port or free_port()
        self.secure_port = free_port() if tls else None
        self.heap_mb = heap_mb
        self.startup_timeout_s = startup_timeout_s
        self.tls = TlsFiles.create(self.workdir / "tls") if tls else None
        super().__init__(self.workdir / "server.log")

    @property
    def hosts(self) -> str:
        """The plain client address, ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def secure_hosts(self) -> str:
        """The TLS client address (only with ``tls=True``)."""
        if self.secure_port is None:
            raise RuntimeError("this server was created without tls=True")
        return f"127.0.0.1:{self.secure_port}"

    def _config_lines(self) -> list[str]:
        """This server's settings (an ensemble would add its ``server.N`` lines)."""
        lines = [
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            # Short sessions let tests expire sessions quickly if they ask for it.
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",  # the default (20 ticks) would cap sessions at 10 s
        ]
        if self.tls is not None:
            lines += [
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"secureClientPort={self.secure_port}",
                "secureClientPortAddress=127.0.0.1",
                f"ssl.keyStore.location={self._keystore_pem()}",
                "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={self.tls.ca}",
                "ssl.trustStore.type=PEM",
                "ssl.clientAuth=need",
            ]
        return lines

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        config.write_text("\n".join(self._config_lines()) + "\n")
        return config

    def _keystore_pem(self) -> Path:
        """ZooKeeper's PEM key store: the private key and the certificate in one file."""
        assert self.tls is not None
        combined = self.workdir / "tls" / "keystore.pem"
        combined.write_text(
            Path(self.tls.keyfile).read_text() + Path(self.tls.certfile).read_text()
        )
        return combined

    def _command(self, config: Path) -> list[str]:
        jars = [ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR]
        if self.tls is not None:
            jars += [ZOOKEEPER_JAR.parent / name for name in NETTY_JARS]
        return [
            "java",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            ":".join(str(j) for j in jars),
            MAIN_CLASS,
            str(config),
        ]

    def start(self) -> EmbeddedZooKeeper:
        """Start the server (on the existing data directory, if any) and wait until it serves."""
        for jar in (ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR):
            if not jar.exists():
                raise ZooKeeperUnavailable(
                    f"{jar} is missing: install Debian's zookeeper package (make zookeeper)"
                )
        with self._lock:
            if self.running:
                return self
            command = self._command(self._write_config())
            with self.log_path.open("ab") as log:
                try:
                    self._process = subprocess.Popen(
                        command,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=self.detach,
                    )
                except FileNotFoundError as exc:
                    raise ZooKeeperUnavailable(f"cannot start java: {exc}") from None
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        """Wait until the server answers ``srvr``; kill it if it does not in time."""
        process = self._process
        if process is None:
            raise ZooKeeperUnavailable("ZooKeeper is not started")
        try:
            wait_until(
                lambda: "Mode:" in self.four_letter_word("srvr"),
                process,
                self.startup_timeout_s,
                "ZooKeeper did not answer",
            )
        except ProcessExited:
            raise ZooKeeperUnavailable(
                f"ZooKeeper exited with {process.returncode}; see {self.log_path}:\n"
                + self._log_tail()
            ) from None
        except TimeoutError:
            self.kill()
            raise ZooKeeperUnavailable(
                f"ZooKeeper did not answer within {self.startup_timeout_s}s; see {self.log_path}"
            ) from None

    def four_letter_word(self, word: str, timeout_s: float = 2.0) -> str:
        """Send a four-letter command (``srvr``, ``ruok``, ``mntr``) and return the answer."""
        return four_letter_word(self.port, word, timeout_s)

    def expire_session(self, client: KazooClient, timeout_s: float = 15.0) -> None:
        """Expire ``client``'s session for real (a second connection with its id and password,
        closed: the server deletes its ephemerals; kazoo's own test helper only pretends), and
        wait until the client has a new session."""
        session_id, password = client.client_id
        lost = threading.Event()

        def on_state(state: KazooState) -> None:
            if state == KazooState.LOST:
                lost.set()

        client.add_listener(on_state)
        try:
            evil = KazooClient(hosts=self.hosts, client_id=(session_id, password))
            evil.start(timeout=timeout_s)
            evil.stop()
            evil.close()
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                current = client.client_id
                if lost.is_set() and client.connected and current and current[0] != session_id:
                    return
                time.sleep(0.02)
            raise TimeoutError(f"session 0x{session_id:x} did not expire within {timeout_s}s")
        finally:
            client.remove_listener(on_state)
