"""Executor side: which executor runs this Python worker, and its location id.

- :func:`current_executor_id` / :func:`current_executor_host`: which executor runs this Python
  worker (from ``SPARK_LOG_URL_STDERR`` or the executor JVM's command line in ``/proc``).
- :class:`SparkExecutorLocationIdProvider`: the executor's own location id: an environment
  variable when set (``AFFINITY_LOCATION_ID``); on Kubernetes the node its pod runs on
  (``zone/node``, the :class:`~locality.kubernetes.KubernetesLocationIdProvider`'s id), never the
  pod's address; else the executor's host.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from locality.base import LocationError

__all__ = [
    "EXECUTOR_LOCATION_ENV",
    "KUBERNETES_NODE_ENV",
    "SPARK_EXECUTOR_POD_ENV",
    "SparkExecutorLocationIdProvider",
    "current_executor_host",
    "current_executor_id",
    "on_kubernetes",
]

#: The environment variable :class:`SparkExecutorLocationIdProvider` reads first.
EXECUTOR_LOCATION_ENV = "AFFINITY_LOCATION_ID"
#: The node name from the Downward API (``fieldRef: spec.nodeName``), as the executor pod
#: template of ``affinity spark pod-template`` sets it; the first of the Kubernetes provider's
#: node variables.
KUBERNETES_NODE_ENV = "AFFINITY_NODE_NAME"
#: Set by Spark in every executor pod on Kubernetes (the pod's name).
SPARK_EXECUTOR_POD_ENV = "SPARK_EXECUTOR_POD_NAME"
#: What the Kubernetes provider reads: a resolved id holds while these are the same.
_KUBERNETES_VARS = (
    KUBERNETES_NODE_ENV,
    "NODE_NAME",
    "AFFINITY_ZONE",
    "AFFINITY_ZONE_LOOKUP",
    "AFFINITY_POD_NAME",
    "AFFINITY_POD_NAMESPACE",
    "POD_NAMESPACE",
    "AFFINITY_SERVICE_ACCOUNT_DIR",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    SPARK_EXECUTOR_POD_ENV,
)

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


def on_kubernetes(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` is a Spark executor's on Kubernetes: the pod template gave it its
    node (``AFFINITY_NODE_NAME``), or Spark named its pod (``SPARK_EXECUTOR_POD_NAME``)."""
    return any(
        environ.get(var, "").strip() for var in (KUBERNETES_NODE_ENV, SPARK_EXECUTOR_POD_ENV)
    )


_k8s_lock = threading.Lock()
_k8s_ids: dict[tuple[str, ...], str] = {}


def _pod_cache_file(environ: Mapping[str, str], key: tuple[str, ...]) -> Path:
    """Where this pod keeps its resolved id for its other Python workers: the first of the
    executor's local dirs (an emptyDir of the pod on Kubernetes), else the temp folder."""
    local_dirs = [d for d in environ.get("SPARK_LOCAL_DIRS", "").split(",") if d.strip()]
    folder = Path(local_dirs[0].strip()) if local_dirs else Path(tempfile.gettempdir())
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:24]
    return folder / f"affinity-location-{digest}"


def _read_pod_cache(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _write_pod_cache(path: Path, location: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(location)
        os.replace(tmp, path)
    except OSError:
        pass  # best effort: without it, each new Python worker asks the API once


def _kubernetes_location(environ: Mapping[str, str]) -> str:
    """``zone/node`` of this executor pod's node (the Kubernetes provider), asked once per pod:
    a pod never changes node, and every task asks. The answer is kept in this process and in
    a file of the pod's local dir, so a new Python worker of the executor (Spark forks them)
    needs no API request and keeps working while the API server is down."""
    key = tuple(environ.get(var, "") for var in _KUBERNETES_VARS)
    with _k8s_lock:
        if key in _k8s_ids:
            return _k8s_ids[key]
    cache = _pod_cache_file(environ, key)
    location = _read_pod_cache(cache)
    if location is None:
        location = _ask_kubernetes(environ)
        _write_pod_cache(cache, location)
    with _k8s_lock:
        _k8s_ids[key] = location
    return location


def _ask_kubernetes(environ: Mapping[str, str]) -> str:
    from locality.kubernetes import KubernetesLocationIdProvider

    env = dict(environ)
    pod = env.get(SPARK_EXECUTOR_POD_ENV, "").strip()
    if pod and not env.get("AFFINITY_POD_NAME", "").strip():
        env["AFFINITY_POD_NAME"] = pod  # HOSTNAME is a truncated form of it
    try:
        return KubernetesLocationIdProvider(environ=env).location_id()
    except LocationError as exc:
        raise LocationError(f"this Spark executor's Kubernetes node: {exc}") from None


class SparkExecutorLocationIdProvider:
    """The location id of the executor this code runs in (a ``LocationIdProvider``).

    In order:

    1. the environment variable ``var`` (``AFFINITY_LOCATION_ID``) when it is set and not empty
       (set it per machine, e.g. in a standalone worker's environment, to give hierarchical ids
       like ``zone-a/node-1``);
    2. on Kubernetes (:func:`on_kubernetes`: ``AFFINITY_NODE_NAME`` from the Downward API, or
       Spark's ``SPARK_EXECUTOR_POD_NAME``), ``zone/node`` of the node the pod runs on, from
       :class:`~locality.kubernetes.KubernetesLocationIdProvider` (the node from the Downward
       API, else the executor's pod read from the API; the zone as ``AFFINITY_ZONE_LOOKUP``
       says). Whatever fails there raises :class:`LocationError`: an executor pod never falls
       back to its address, which is new with every pod;
    3. the executor's host (:func:`current_executor_host`); with ``fallback_hostname`` (the
       default), the machine's host name when the code does not run in an executor at all (the
       driver in local mode).
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
        if on_kubernetes(env):
            return _kubernetes_location(env)
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
