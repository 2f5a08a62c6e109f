"""The processor side of ``benchmarks/rebalance.py``: worker processes hosting processor clients.

Each worker process hosts a share of the P processors, each a real
:class:`~coordinator.member.processor.ProcessorClient` with its own ZooKeeper session (its own
KazooClient) and thread, as on separate hosts but on this machine's cores. The parent drives a
worker through a pipe: ``("kill", pid)`` closes that processor's session without unregistering
(a death), ``("status", None)`` answers each live processor's (running version, store writes,
store reads, ZooKeeper requests), ``("stop", None)`` stops them all.

:func:`count_requests` makes every client count the requests it sends (``client.requests``):
the stores' own reads and writes, and the re-reads kazoo's watch recipes make when a watch fires
(one ``multi`` is one request; pings are not counted).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import structlog
from kazoo.client import KazooClient

from coordinator.member.processor import ProcessorClient
from metadata.model import TaskModel
from metadata.zk import ZkMetadataStore, connect
from metadata.zk.connection import DirectClient

__all__ = ["count_requests", "cpu_seconds", "quiet", "requests_of", "worker_main"]

_counting = False


def count_requests() -> None:
    """From now on, every client of this process (made by ``metadata.zk.connect``: a
    :class:`~metadata.zk.connection.DirectClient`) counts its requests in ``.requests``."""
    global _counting
    if _counting:
        return
    _counting = True
    original = DirectClient._call

    def counted(self: Any, request: Any, async_object: Any) -> Any:
        self.requests = getattr(self, "requests", 0) + 1
        return original(self, request, async_object)

    DirectClient._call = counted  # type: ignore[method-assign]


def requests_of(client: KazooClient | None) -> int:
    return 0 if client is None else int(getattr(client, "requests", 0))


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far, from /proc."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def _ignore(version: int | None, tasks: Mapping[str, TaskModel]) -> None:
    return None


@dataclass
class _Processor:
    pid: str
    client: KazooClient
    store: ZkMetadataStore
    agent: ProcessorClient
    stop: threading.Event
    thread: threading.Thread
    alive: bool = True


def _start(
    hosts: str, job: tuple[str, str, str], member: tuple[str, str, str], session_s: float
) -> _Processor:
    job_folder, run_id, job_name = job
    pid, location, host = member
    client = connect(hosts, session_timeout_s=session_s, connect_timeout_s=60)
    store = ZkMetadataStore(client, job_folder, run_id=run_id, retry_deadline_s=120)
    agent = ProcessorClient(
        client, store, pid, location, on_start=_ignore, on_stop=_ignore, host=host, job=job_name
    )
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), name=pid, daemon=True)
    thread.start()
    return _Processor(pid, client, store, agent, stop, thread)


def worker_main(
    conn: Connection,
    hosts: str,
    job: tuple[str, str, str],
    members: list[tuple[str, str, str]],
    session_s: float,
) -> None:
    """A worker process: the processors ``members`` (id, location, host) of ``job`` (folder,
    run id, name), each with its own session and thread; answers the parent on ``conn``."""
    quiet()
    count_requests()
    processors = {m[0]: _start(hosts, job, m, session_s) for m in members}
    conn.send("ready")
    while True:
        command, argument = conn.recv()
        if command == "kill":
            victim = processors[str(argument)]
            victim.alive = False
            victim.client.stop()
            conn.send(True)
        elif command == "status":
            conn.send(
                {
                    p.pid: (
                        p.agent.running_version,
                        p.store.ops,
                        p.store.reads,
                        requests_of(p.client),
                    )
                    for p in processors.values()
                    if p.alive
                }
            )
        elif command == "stop":
            for processor in processors.values():
                processor.stop.set()
            for processor in processors.values():
                processor.thread.join(30)
                if processor.alive:
                    processor.client.stop()
                processor.client.close()
            conn.send(True)
            return
