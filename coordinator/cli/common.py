"""The one path every command takes: load the job config, connect to ZooKeeper, report errors.

A command handler raises; :func:`report` (called by :func:`coordinator.cli.main`) turns the
error into one line on stderr, ``affinity: error: <what is wrong>``, and the exit code: 2 for bad
input (:class:`~coordinator.config.ConfigError`, an unknown or misconfigured grouper, a location
that cannot be found, :class:`CommandError` with code 2), 1 for a failure at run time (ZooKeeper
unreachable, access denied, corrupt data: every :class:`~metadata.errors.MetadataError`).

Usage::

    def show(args):
        config = load_config(args.config)          # ConfigError -> exit 2
        with job_store(config) as store:           # connect; closes the client after
            ...
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from coordinator.config import ConfigError, JobConfig
from coordinator.connection import client_from_config, store_from_config
from coordinator.observability import silence_job_loggers
from groupers import GrouperError
from locality.providers import LocationError
from metadata.errors import MetadataError
from metadata.zk import PermissionDenied, StoreUnavailable, ZkMetadataStore

__all__ = [
    "CommandError",
    "starting",
    "check_access",
    "client_from_config",
    "job_store",
    "quiet_logging",
    "report",
    "stop_on_signals",
    "store_from_config",
]


class CommandError(Exception):
    """What a command cannot do, said in one line; ``code`` 2 for bad input, 1 at run time."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


#: Errors that are bad input (exit 2); every other reported error is a run-time failure (1).
_BAD_INPUT: tuple[type[Exception], ...] = (ConfigError, GrouperError, LocationError)
_REPORTED: tuple[type[Exception], ...] = (CommandError, MetadataError, *_BAD_INPUT)


def report(exc: BaseException) -> int | None:
    """Print ``exc`` as one line and return its exit code; None if it is not ours to report."""
    if not isinstance(exc, _REPORTED):
        return None
    text = " ".join(str(exc).split())
    print(f"affinity: error: {text}", file=sys.stderr)
    if isinstance(exc, CommandError):
        return exc.code
    return 2 if isinstance(exc, _BAD_INPUT) else 1


@contextmanager
def job_store(config: JobConfig, **options: Any) -> Iterator[ZkMetadataStore]:
    """Connect, and yield the job's store; the client is closed on the way out."""
    client = client_from_config(config)
    try:
        yield store_from_config(config, client, **options)
    finally:
        client.stop()
        client.close()


@contextmanager
def existing_job_store(config: JobConfig, **options: Any) -> Iterator[ZkMetadataStore]:
    """:func:`job_store` for a command that reads a job: a job not on ZooKeeper is an error
    naming the job, the ensemble and the folder looked for."""
    with job_store(config, **options) as store:
        if not store.job_exists():
            raise CommandError(
                f"no job {config.job.name}-{config.job.id} on ZooKeeper {config.zookeeper.connect} "
                f"(no folder {config.job_folder})"
            )
        yield store


@contextmanager
def starting(what: str) -> Iterator[None]:
    """Around the start-up of a long-running command (``coordinator run``, ``processor run``):
    not reaching ZooKeeper, or credentials it refuses, means the process cannot start with this
    configuration: one line, exit 2 (the same failure later, while running, is a run-time one)."""
    try:
        yield
    except (StoreUnavailable, PermissionDenied) as exc:
        raise CommandError(f"{what} cannot start: {exc}", code=2) from None


def check_access(store: ZkMetadataStore) -> None:
    """Fail at once, with :class:`~metadata.zk.PermissionDenied` naming the path, when the job's
    folder is protected by credentials other than ours (instead of retrying for ever)."""
    store.ensure_layout()
    store.job_models.versions()  # a read the job's ACL refuses to other credentials


def quiet_logging() -> None:
    """Keep stdout for the answer and stderr for the one error line: the store's diagnostics are
    silenced, unless the process configured logging itself."""
    if not structlog.is_configured():
        structlog.configure(
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
            wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        )
        silence_job_loggers()  # they follow the job config's level, not the process's
    kazoo_logger = logging.getLogger("kazoo")
    if kazoo_logger.level == logging.NOTSET:
        kazoo_logger.setLevel(logging.CRITICAL)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (long-running commands stop cleanly on either)."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
