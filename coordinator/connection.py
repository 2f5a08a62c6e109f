"""A job's ZooKeeper client and metadata store, built from its configuration (hosts, session
timeout, credentials, TLS, job folder, run id, retention, log level): the one place every role
connects (the CLI's commands, the Spark driver's streaming runtime)."""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient

from coordinator.config import JobConfig
from coordinator.observability import job_logger
from metadata.zk import ZkMetadataStore, connect

__all__ = ["client_from_config", "store_from_config"]


def client_from_config(config: JobConfig) -> KazooClient:
    """A started KazooClient for ``config.zookeeper`` (hosts, session timeout, auth, TLS)."""
    zk = config.zookeeper
    return connect(
        zk.connect,
        session_timeout_s=zk.session_timeout_ms / 1000,
        connect_timeout_s=zk.connect_timeout_ms / 1000,
        auth=zk.auth,
        use_ssl=zk.use_ssl,
        ca=zk.ca,
        certfile=zk.certfile,
        keyfile=zk.keyfile,
        verify_certs=zk.verify_certs,
        log=job_logger("metadata.zk", config.logging.level),
    )


def store_from_config(config: JobConfig, client: KazooClient, **options: Any) -> ZkMetadataStore:
    """The job's ZkMetadataStore (folder, run id, credentials, retention from ``config``)."""
    return ZkMetadataStore(
        client,
        config.job_folder,
        run_id=config.job.run_id,
        auth=config.zookeeper.auth,
        retention=config.coordinator.retention,
        log=job_logger("metadata.zk", config.logging.level),
        **options,
    )
