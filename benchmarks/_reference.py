"""A yardstick for this machine's moment: the CPU of one plain ZooKeeper ``get`` round trip.

The survivor's CPU per rebalance (``benchmarks/rebalance.py``, ``benchmarks/survivor_cpu.py``)
moves by about 30% between runs of the same code on a shared VM. Measured in the same run, the
CPU that one ``get`` of a small node costs with kazoo as it ships (a plain ``KazooClient``: the
caller's thread and kazoo's connection thread, in a process doing nothing else) tells how fast
the machine is at that moment, and dividing by it gives a survivor's rebalance in round trips: a
figure that runs on different days, or different machines, can compare. It is kazoo's own client,
not ``metadata.zk.connect``'s, so that making ours cheaper does not move the yardstick.

Usage::

    before = get_round_trip_cpu(server.hosts)  # seconds of CPU per get
    ... the benchmark ...
    after = get_round_trip_cpu(server.hosts)
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection

__all__ = ["get_round_trip_cpu"]

NODE = "/affinity-benchmark-reference"
PAYLOAD = b"x" * 100  # about a barrier state or a version pointer's size
WARM_UP = 50


def get_round_trip_cpu(hosts: str, gets: int = 200, batches: int = 5) -> float:
    """The median over ``batches`` of the CPU (all threads of a fresh process) per ``get`` of a
    100-byte node, ``gets`` sequential gets per batch, in seconds."""
    parent, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_measure, args=(child, hosts, gets, batches), daemon=True
    )
    process.start()
    try:
        deadline = time.monotonic() + 120
        while not parent.poll(0.2):
            if not process.is_alive():
                raise RuntimeError(f"the reference process died (exit {process.exitcode})")
            if time.monotonic() > deadline:
                raise TimeoutError("the reference process did not answer in 120 s")
        answer = parent.recv()
    finally:
        process.join(30)
    if isinstance(answer, str):
        raise RuntimeError(f"the reference process failed: {answer}")
    return float(answer)


def _measure(conn: Connection, hosts: str, gets: int, batches: int) -> None:
    from kazoo.client import KazooClient  # (in the child only)

    try:
        client = KazooClient(hosts=hosts, timeout=10.0)
        client.start(timeout=30)
        try:
            client.ensure_path(NODE)
            client.set(NODE, PAYLOAD)
            for _ in range(WARM_UP):
                client.get(NODE)
            costs = []
            for _ in range(batches):
                started = time.process_time()
                for _ in range(gets):
                    client.get(NODE)
                costs.append((time.process_time() - started) / gets)
        finally:
            client.stop()
            client.close()
        conn.send(statistics.median(costs))
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(f"{type(exc).__name__}: {exc}")
