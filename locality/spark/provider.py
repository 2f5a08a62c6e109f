"""Executor side: which executor runs this Python worker, and its location id.

- :func:`current_executor_id` / :func:`current_executor_host`: which executor runs this Python
  worker (from ``SPARK_LOG_URL_STDERR`` or the executor JVM's command line in ``/proc``).
- :class:`SparkExecutorLocationIdProvider`: the executor's own location id, from an environment
  variable when set (``AFFINITY_LOCATION_ID``), else the executor's host.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from locality.base import LocationError

__all__ = [
    "EXECUTOR_LOCATION_ENV",
    "SparkExecutorLocationIdProvider",
    "current_executor_host",
    "current_executor_id",
]

#: The environment variable :class:`SparkExecutorLocationIdProvider` reads first.
EXECUTOR_LOCATION_ENV = "AFFINITY_LOCATION_ID"

_PROC = Path("/proc")
_cache: dict[int, dict[str, str]] = {}


def _parent_pid(pid: int, proc: Path) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ..." - comm may contain spaces and parentheses.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]) if len(fields) > 1 else None


def _executor_jvm_args(proc: Path = _PROC, pid: int | None = None) -> dict[str, str]:
    """``--executor-id``, ``--hostname``, ``--app-id`` of the executor JVM this process descends
    from (walking up ``/proc``), or ``{}`` when there is none (the driver, local mode)."""
    start = os.getpid() if pid is None else pid
    if proc == _PROC and start in _cache:
        return _cache[start]
    found: dict[str, str] = {}
    current: int | None = start
    for _ in range(16):
        if current is None or current <= 1:
            break
        try:
            argv = (proc / str(current) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            break
        args = [a.decode(errors="replace") for a in argv]
        if "--executor-id" in args:
            for flag in ("--executor-id", "--hostname", "--app-id"):
                if flag in args and args.index(flag) + 1 < len(args):
                    found[flag[2:]] = args[args.index(flag) + 1]
            break
        current = _parent_pid(current, proc)
    if proc == _PROC:
        _cache[start] = found
    return found


def _log_url_query(environ: Mapping[str, str]) -> dict[str, list[str]]:
    url = environ.get("SPARK_LOG_URL_STDERR") or environ.get("SPARK_LOG_URL_STDOUT") or ""
    return parse_qs(urlparse(url).query) if url else {}


def current_executor_id(
    environ: Mapping[str, str] | None = None, *, proc: Path = _PROC
) -> str | None:
    """The id of the executor running this Python worker: ``executorId=`` of
    ``SPARK_LOG_URL_STDERR`` (set by standalone workers), else the executor JVM's
    ``--executor-id`` (found by walking up ``/proc``). None outside an executor (driver, local
    mode)."""
    env = os.environ if environ is None else environ
    ids = _log_url_query(env).get("executorId")
    if ids and ids[0]:
        return ids[0]
    return _executor_jvm_args(proc).get("executor-id")


def current_executor_host(
    environ: Mapping[str, str] | None = None, *, proc: Path = _PROC
) -> str | None:
    """The host the executor running this Python worker registered with the driver: the executor
    JVM's ``--hostname`` (``/proc``), else ``SPARK_LOCAL_IP``, else the host of
    ``SPARK_LOG_URL_STDERR``. None outside an executor."""
    env = os.environ if environ is None else environ
    host = _executor_jvm_args(proc).get("hostname")
    if host:
        return host
    if env.get("SPARK_LOCAL_IP"):
        return env["SPARK_LOCAL_IP"]
    url = env.get("SPARK_LOG_URL_STDERR", "")
    return urlparse(url).hostname if url else None


class SparkExecutorLocationIdProvider:
    """The location id of the executor this code runs in (a ``LocationIdProvider``).

    The environment variable ``var`` (``AFFINITY_LOCATION_ID``) wins when it is set and not empty
    (set it per machine, e.g. in the worker's environment or from the Kubernetes Downward API, to
    give hierarchical ids like ``zone-a/node-1``); otherwise the executor's host
    (:func:`current_executor_host`); with ``fallback_hostname`` (the default), the machine's host
    name when the code does not run in an executor at all (the driver in local mode).
    """

    def __init__(
        self,
        var: str = EXECUTOR_LOCATION_ENV,
        *,
        environ: Mapping[str, str] | None = None,
        fallback_hostname: bool = True,
        proc: Path = _PROC,
    ) -> None:
        self.var = var
        self._environ = environ
        self.fallback_hostname = fallback_hostname
        self._proc = proc

    def location_id(self) -> str:
        env = os.environ if self._environ is None else self._environ
        value = env.get(self.var, "").strip() if self.var else ""
        if value:
            return value
        host = current_executor_host(env, proc=self._proc)
        if host:
            return host
        if self.fallback_hostname:
            name = socket.gethostname().strip()
            if name:
                return name
        raise LocationError(
            f"no executor location: {self.var or 'no variable'} is not set, no executor JVM "
            "(--hostname) above this process, and SPARK_LOCAL_IP/SPARK_LOG_URL_STDERR are unset"
        )

    def __repr__(self) -> str:
        return f"SparkExecutorLocationIdProvider(var={self.var!r})"
