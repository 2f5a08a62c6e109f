"""A ZooKeeper ensemble on loopback: three (or five) real servers, for tests and benchmarks.

Production runs an ensemble, and the faults that hurt come from there: a leader election in the
middle of a rebalance, a follower that lags behind the leader (SAMZA-2301), a server frozen
while its clients wait. :class:`ZooKeeperEnsemble` starts ``size`` servers of Debian's
``zookeeper`` package (``QuorumPeerMain``) on free 127.0.0.1 ports, each an
:class:`EnsembleServer`: the standalone launcher's process life cycle and config lines
(:class:`~coordinator.launchers.zookeeper.EmbeddedZooKeeper`) plus the ``server.N`` lines and
``data/myid``. ::

    with ZooKeeperEnsemble(workdir) as ensemble:
        client = connect(ensemble.hosts)         # all servers in the connect string
        leader = ensemble.leader()               # index of the server in Mode: leader (srvr)
        ensemble.kill(leader)                    # kill -9: the others elect a new leader (~1 s)
        ensemble.start_server(leader)            # same data dir: it rejoins as a follower
        ensemble.freeze(1); ensemble.thaw(1)     # SIGSTOP / SIGCONT one server
        ensemble.server_of_process(pid)          # which server a process is connected to

``lagging=i`` puts :class:`Link` relays between server ``i`` and the quorum ports of the others:
:meth:`~ZooKeeperEnsemble.partition` holds the traffic, so server ``i`` keeps serving its
clients the state it had (for ``syncLimit`` ticks) while the others move on - a lagging
follower, on demand. :meth:`~ZooKeeperEnsemble.heal` lets it catch up.

Timing: ``tickTime=500`` (a session expires at most one tick after its timeout), ``initLimit=10``,
``syncLimit=5`` (a partitioned follower drops its clients after 2.5 s; ``sync_limit`` changes it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from types import TracebackType

from coordinator.launchers.processes import free_port
from coordinator.launchers.zookeeper import MAIN_CLASS, EmbeddedZooKeeper, four_letter_word

__all__ = ["QUORUM_MAIN_CLASS", "EnsembleServer", "Link", "ZooKeeperEnsemble"]

QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class Link:
    """A TCP relay from a free 127.0.0.1 port to ``127.0.0.1:target`` that can hold its traffic.

    :meth:`pause` stops forwarding in both directions (what was sent waits, as on a congested
    or partitioned network); :meth:`resume` lets it through again.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self._open = threading.Event()
        self._open.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name=f"link-{self.port}", daemon=True).start()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed = True
        self._open.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                upstream.settimeout(None)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self._sockets += [downstream, upstream]
            for src, dst in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._open.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()


class EnsembleServer(EmbeddedZooKeeper):
    """Server ``myid`` of an ensemble: the standalone launcher with quorum settings.

    ``peers`` are the ``server.N=127.0.0.1:<quorum port>:<election port>`` lines as this server
    sees them (a lagging server sees the others' quorum ports through :class:`Link` relays).
    """

    def __init__(
        self,
        workdir: Path,
        myid: int,
        *,
        peers: list[str],
        sync_limit: int = 5,
        heap_mb: int = 128,
        startup_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(workdir, heap_mb=heap_mb, startup_timeout_s=startup_timeout_s)
        self.myid = myid
        self.peers = peers
        self.sync_limit = sync_limit
        self._launch_only = False

    def _config_lines(self) -> list[str]:
        return [
            "initLimit=10",
            f"syncLimit={self.sync_limit}",
            *super()._config_lines(),
            *self.peers,
        ]

    def _write_config(self) -> Path:
        config = super()._write_config()
        (self.data_dir / "myid").write_text(f"{self.myid}\n")
        return config

    def _command(self, config: Path) -> list[str]:
        return [QUORUM_MAIN_CLASS if p == MAIN_CLASS else p for p in super()._command(config)]

    def launch(self) -> None:
        """Start the process without waiting (a lone server serves nothing until a quorum)."""
        self._launch_only = True
        try:
            self.start()
        finally:
            self._launch_only = False

    def wait_ready(self) -> None:
        if not self._launch_only:
            super().wait_ready()

    def mode(self) -> str | None:
        """``leader``, ``follower`` (or ``standalone``), or None: not serving, not answering."""
        try:
            answer = self.four_letter_word("srvr", timeout_s=1.0)
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on loopback forming one ensemble (see the module docstring).

    Servers are addressed by index (0 .. size-1; ``myid`` is index + 1).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        size: int = 3,
        lagging: int | None = None,
        sync_limit: int = 5,
        heap_mb: int = 128,
        startup_timeout_s: float = 30.0,
    ) -> None:
        if size < 3 or size % 2 == 0:
            raise ValueError(f"an ensemble needs an odd size of at least 3, got {size}")
        self.workdir = Path(workdir)
        self.startup_timeout_s = startup_timeout_s
        quorum = [(free_port(), free_port()) for _ in range(size)]
        self.links: dict[int, Link] = {}
        if lagging is not None:
            self.links = {i: Link(q) for i, (q, _) in enumerate(quorum) if i != lagging}
        self.servers: list[EnsembleServer] = []
        for index in range(size):
            peers = []
            for other, (q, e) in enumerate(quorum):
                if index == lagging and other in self.links:
                    q = self.links[other].port  # this server reaches the others through links
                peers.append(f"server.{other + 1}=127.0.0.1:{q}:{e}")
            server = EnsembleServer(
                self.workdir / f"server-{index + 1}",
                index + 1,
                peers=peers,
                sync_limit=sync_limit,
                heap_mb=heap_mb,
                startup_timeout_s=startup_timeout_s,
            )
            self.servers.append(server)
        self.lagging = lagging
        self._frozen: set[int] = set()

    # ------------------------------------------------------------------ addresses

    @property
    def hosts(self) -> str:
        """The connect string naming every server."""
        return ",".join(server.hosts for server in self.servers)

    def hosts_of(self, *indexes: int) -> str:
        """A connect string naming only these servers (a client pinned to one of them)."""
        return ",".join(self.servers[i].hosts for i in indexes)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> ZooKeeperEnsemble:
        """Start every server and wait until they form a quorum with one leader."""
        for server in self.servers:
            server.launch()
        self.wait_quorum()
        return self

    def stop(self) -> None:
        for index in list(self._frozen):
            self.thaw(index)
        for server in self.servers:
            server.stop()
        for link in self.links.values():
            link.close()

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def kill(self, index: int) -> None:
        """kill -9 server ``index`` (a crash: nothing flushed)."""
        self._frozen.discard(index)
        self.servers[index].kill()

    def start_server(self, index: int, *, wait: bool = True) -> None:
        """Start server ``index`` again on its data dir; ``wait``: until it serves (joined)."""
        if wait:
            self.servers[index].start()
        else:
            self.servers[index].launch()

    def restart(self, index: int, *, hard: bool = True, down_s: float = 0.0) -> None:
        """Kill (``hard``) or stop server ``index``, keep it down ``down_s``, start it again."""
        if hard:
            self.kill(index)
        else:
            self.servers[index].stop()
        if down_s:
            time.sleep(down_s)
        self.start_server(index)

    def freeze(self, index: int) -> None:
        """SIGSTOP server ``index``: it neither serves nor answers, and keeps its sockets open."""
        pid = self.servers[index].pid
        if pid is None:
            raise RuntimeError(f"server {index} is not running")
        os.kill(pid, signal.SIGSTOP)
        self._frozen.add(index)

    def thaw(self, index: int) -> None:
        """SIGCONT server ``index``."""
        pid = self.servers[index].pid
        self._frozen.discard(index)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def partition(self, index: int | None = None) -> None:
        """Hold the quorum traffic of the lagging server (``lagging=`` at construction). Only a
        follower lags behind: the others reach a leader's quorum port directly, so a leading
        lagging server is first made a follower (:meth:`make_follower`)."""
        self._lagging(index)
        assert self.lagging is not None
        self.make_follower(self.lagging)
        for link in self.links.values():
            link.pause()

    def heal(self, index: int | None = None) -> None:
        self._lagging(index)
        for link in self.links.values():
            link.resume()

    def _lagging(self, index: int | None) -> None:
        if self.lagging is None or index not in (None, self.lagging):
            raise RuntimeError(f"server {index} was not created lagging (lagging={self.lagging})")

    # ------------------------------------------------------------------ observing

    def modes(self) -> list[str | None]:
        """Each server's ``Mode:`` (None for a server down, frozen or without a quorum)."""
        return [
            None if i in self._frozen or not s.running else s.mode()
            for i, s in enumerate(self.servers)
        ]

    def wait_quorum(self, timeout_s: float | None = None) -> int:
        """Wait until one running server leads and every other running, unfrozen one follows;
        returns the leader's index."""
        deadline = time.monotonic() + (timeout_s or self.startup_timeout_s)
        while time.monotonic() < deadline:
            modes = self.modes()
            wanted = [i for i, s in enumerate(self.servers) if s.running and i not in self._frozen]
            leaders = [i for i in wanted if modes[i] == "leader"]
            if len(leaders) == 1 and all(modes[i] == "follower" for i in wanted if i != leaders[0]):
                return leaders[0]
            time.sleep(0.1)
        raise TimeoutError(f"no quorum within {timeout_s or self.startup_timeout_s} s: {modes}")

    def leader(self, timeout_s: float | None = None) -> int:
        """The index of the server in ``Mode: leader`` (waits for a settled quorum)."""
        return self.wait_quorum(timeout_s)

    def followers(self) -> list[int]:
        return [i for i, mode in enumerate(self.modes()) if mode == "follower"]

    def make_follower(self, index: int) -> None:
        """If server ``index`` leads, take it down until the others have elected a leader, then
        start it again: it rejoins as a follower. (Restarted at once, it could win the new
        election itself: with equal logs the highest server id wins.)"""
        if self.leader() != index:
            return
        self.kill(index)
        self.wait_quorum()  # the two others: one leads
        self.start_server(index)
        if self.wait_quorum() == index:
            raise RuntimeError(f"server {index} leads again after a restart")

    def server_of_process(self, pid: int) -> int | None:
        """The index of the server process ``pid`` holds a client connection to (from /proc)."""
        ports = {server.port: index for index, server in enumerate(self.servers)}
        inodes = set()
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError):
                for row in Path(table).read_text().splitlines()[1:]:
                    fields = row.split()
                    remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                    if fields[3] == "01" and fields[9] in inodes and remote_port in ports:
                        return ports[remote_port]
        return None

    def four_letter_word(self, index: int, word: str) -> str:
        return four_letter_word(self.servers[index].port, word)
