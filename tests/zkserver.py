"""A private, real ZooKeeper server for tests and benchmarks (Debian's ``zookeeper`` package).

One :class:`ZooKeeperServer` is one standalone server on a free loopback port, with its own data
directory. It can be stopped (SIGTERM), killed (SIGKILL) and restarted on the same data directory
and port, and it can expire a client's session for real::

    server = ZooKeeperServer(tmp_path)
    server.start()
    client = KazooClient(hosts=server.hosts); client.start()
    server.expire_session(client)   # the server really closes the session; ephemerals vanish
    server.kill(); server.start()   # kill -9 and restart: the client reconnects, same session
    server.stop()

``tls=True`` also opens a TLS client port (``server.secure_hosts``) with a self-signed CA made by
``openssl``; ``server.tls`` holds the PEM paths a client needs (``ca``, ``certfile``, ``keyfile``).
Nothing here mocks ZooKeeper: it is the real server, bound to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kazoo.client import KazooClient, KazooState

from coordinator.embedded_zk import (
    MAIN_CLASS,
    SLF4J_SIMPLE_JAR,
    ZOOKEEPER_JAR,
    ZooKeeperUnavailable,
    four_letter_word,
    free_port,
    stop_process,
)

NETTY_JARS = ("netty-codec.jar", "netty-resolver.jar")

__all__ = ["TlsFiles", "ZooKeeperServer", "ZooKeeperUnavailable", "free_port"]


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


class ZooKeeperServer:
    """One standalone ZooKeeper server in ``workdir`` (``data/``, ``zoo.cfg``, ``server.log``)."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        heap_mb: int = 256,
        tls: bool = False,
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.port = port or free_port()
        self.secure_port = free_port() if tls else None
        self.heap_mb = heap_mb
        self.startup_timeout_s = startup_timeout_s
        self.tls = TlsFiles.create(self.workdir / "tls") if tls else None
        self.log_path = self.workdir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- addresses

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

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ---------------------------------------------------------------- life cycle

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            "tickTime=2000",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,envi,mntr,cons",
            # Short sessions let tests expire sessions quickly if they ask for it.
            "minSessionTimeout=1000",
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
        config = self.workdir / "zoo.cfg"
        config.write_text("\n".join(lines) + "\n")
        return config

    def _keystore_pem(self) -> Path:
        """ZooKeeper's PEM key store: the private key and the certificate in one file."""
        assert self.tls is not None
        combined = self.workdir / "tls" / "keystore.pem"
        combined.write_text(
            Path(self.tls.keyfile).read_text() + Path(self.tls.certfile).read_text()
        )
        return combined

    def _classpath(self) -> str:
        jars = [ZOOKEEPER_JAR, SLF4J_SIMPLE_JAR]
        if self.tls is not None:
            jars += [ZOOKEEPER_JAR.parent / name for name in NETTY_JARS]
        return ":".join(str(j) for j in jars)

    def start(self) -> None:
        """Start the server (on the existing data directory, if any) and wait until it serves."""
        if not ZOOKEEPER_JAR.exists():
            raise ZooKeeperUnavailable(
                f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package (make zookeeper)"
            )
        with self._lock:
            if self.running:
                return
            config = self._write_config()
            log = self.log_path.open("ab")
            command = [
                "java",
                f"-Xmx{self.heap_mb}m",
                "-XX:+UseSerialGC",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                self._classpath(),
                MAIN_CLASS,
                str(config),
            ]
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            log.close()
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with {self._process.returncode}; see {self.log_path}:\n"
                    + self._log_tail()
                )
            try:
                if "Mode:" in self.four_letter_word("srvr"):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise ZooKeeperUnavailable(
            f"ZooKeeper did not answer within {self.startup_timeout_s}s; see {self.log_path}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server gracefully (SIGTERM), or kill it if it does not stop in time."""
        with self._lock:
            process, self._process = self._process, None
        stop_process(process, timeout_s)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL, like a crash): nothing is flushed or closed."""
        with self._lock:
            process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    def restart(self, *, hard: bool = True, down_s: float = 0.0) -> None:
        """Kill (``hard``) or stop the server, wait ``down_s``, start it on the same data dir."""
        if hard:
            self.kill()
        else:
            self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- probes and tricks

    def four_letter_word(self, word: str, timeout_s: float = 2.0) -> str:
        """Send a four-letter command (``srvr``, ``ruok``, ``mntr``) and return the answer."""
        return four_letter_word(self.port, word, timeout_s)

    def expire_session(self, client: KazooClient, timeout_s: float = 15.0) -> None:
        """Expire ``client``'s session on the server, and wait until it has a new session.

        Opens a second connection with the same session id and password and closes it: the server
        closes the session for real, deleting its ephemeral nodes (kazoo's own test helper only
        pretends, on the client side).
        """
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
