"""A stateful query's ZooKeeper side on the driver: its connections, the commit log, the embedded
coordinator replica and the driver member (the live executors as processors).

One job: :meth:`QueryConnections.start` connects once (a query starts them at its first batch),
:meth:`QueryConnections.restart_coordinator` starts the embedded coordinator again with a grown
job config (a Kafka partition added), :meth:`QueryConnections.close` stops everything. Usage::

    connections = QueryConnections(config, storage, "embedded", log)
    driver = connections.start(spark.sparkContext)     # the driver member, synced per batch
    latest = connections.commits.latest()
    connections.close()
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

from kazoo.client import KazooClient

from coordinator.config import JobConfig
from coordinator.connection import client_from_config, store_from_config
from coordinator.member.spark_driver import SparkDriverMember
from coordinator.observability import job_logger
from coordinator.streaming.commits import CommitLog
from locality.spark.state import Storage
from metadata.zk import ZkMetadataStore

__all__ = ["QueryConnections"]


class QueryConnections:
    """A query's connections and the threads behind them (module docstring)."""

    def __init__(self, config: JobConfig, storage: Storage, coordinator: str, log: Any) -> None:
        self.config, self.storage, self.coordinator, self.log = config, storage, coordinator, log
        self.commits: CommitLog | None = None
        self.store: ZkMetadataStore | None = None
        self.driver: SparkDriverMember | None = None
        self._clients: list[KazooClient] = []
        self._stop = threading.Event()
        self._coordinator_thread: threading.Thread | None = None

    def start(self, sc: Any) -> SparkDriverMember:
        """Connect, start the embedded coordinator (if so configured) and the driver member."""
        if self.driver is not None:
            return self.driver
        store = self._connect()
        store.ensure_layout()
        driver_name = f"{sc.applicationId}@{socket.gethostname()}:{os.getpid()}"
        self.commits = CommitLog.open(store, self.storage, driver_name, self.log)
        if self.coordinator == "embedded":
            self._start_coordinator(sc)
        self.store = store
        self.driver = SparkDriverMember(
            store.client,
            store,
            sc,
            job=f"{self.config.job.name}-{self.config.job.id}",
            log=job_logger("affinity.member", self.config.logging.level),  # logging.level
        )
        return self.driver

    def restart_coordinator(self, sc: Any, config: JobConfig) -> None:
        """From now on ``config`` (the job's tasks changed); a started embedded coordinator is
        started again with it."""
        self.config = config
        if self._coordinator_thread is None:
            return
        self._stop.set()
        self._coordinator_thread.join(10)
        self._stop = threading.Event()
        self._start_coordinator(sc)

    def close(self) -> None:
        """Stop the driver member and the embedded coordinator; close the connections."""
        if self.driver is not None:
            with contextlib.suppress(Exception):
                self.driver.close()
        self._stop.set()
        if self._coordinator_thread is not None:
            self._coordinator_thread.join(10)
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()
        self.driver = self.store = self.commits = None
        self._coordinator_thread = None
        self._clients = []
        self._stop = threading.Event()

    def _connect(self) -> ZkMetadataStore:
        client = client_from_config(self.config)
        self._clients.append(client)
        return store_from_config(self.config, client)

    def _start_coordinator(self, sc: Any) -> None:
        # The embedded default runs a coordinator replica in the driver (DESIGN.md "Spark
        # streaming"); the one place the member side starts the leader side.
        from coordinator.leader.service import CoordinatorService

        store = self._connect()
        service = CoordinatorService(
            self.config, store.client, store, identifier=f"driver-{sc.applicationId}"
        )
        self._coordinator_thread = threading.Thread(
            target=service.run, args=(self._stop,), name="affinity-coordinator", daemon=True
        )
        self._coordinator_thread.start()
