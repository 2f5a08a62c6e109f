"""A Spark standalone cluster on one machine: a master and workers on loopback addresses (used by
``affinity demo``, ``affinity dev up``, the tests, the benchmarks and the example pipeline).

Each worker binds its own address (``127.0.0.2``, ``127.0.0.3``, ...), so its executors register
with that host: Spark (and affinity) see several hosts, and node-level locality is real.
Everything binds to loopback. Every process is started in its own process group and the whole
group (worker, its executors, their Python daemons) is killed on :meth:`StandaloneCluster.stop`,
which also runs at interpreter exit::

    with StandaloneCluster(workdir, ["127.0.0.2", "127.0.0.3"]) as cluster:
        spark = spark_session(cluster.master_url, app_name="demo")
        ...
        cluster.kill_executor(app_id, "1")      # the worker starts a replacement (new id)
        cluster.kill_worker("127.0.0.3")        # the host loses its executor
        cluster.start_worker("127.0.0.3")       # ... and gets a new one
        spark.stop()

``worker_env`` gives a worker (and the executors it starts, which inherit its environment) its
own variables, e.g. the node name a Kubernetes pod would get from the Downward API::

    StandaloneCluster(workdir, hosts, worker_env={"127.0.0.2": {"AFFINITY_NODE_NAME": "node-a"}})
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING

from coordinator.launchers.processes import (
    free_port,
    kill_process,
    port_open,
    signal_group,
    stop_processes,
    wait_until,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ExecutorProcess",
    "StandaloneCluster",
    "executor_pythonpath",
    "free_port",
    "spark_home",
    "spark_session",
]

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""


def spark_home() -> Path:
    """The Spark distribution inside the ``pyspark`` package (pip installs one)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class ExecutorProcess:
    """An executor JVM of this cluster."""

    pid: int
    app_id: str
    executor_id: str
    host: str


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _arg(args: Sequence[str], flag: str) -> str:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else ""


class StandaloneCluster:
    """A standalone master on ``master_host`` and one worker per address of ``worker_hosts``.

    Daemons get ``daemon_memory`` of heap; each worker offers ``worker_cores`` cores and
    ``worker_memory`` to executors. Logs and work directories live under ``workdir``.
    ``worker_env`` maps a worker's address to extra environment variables for it and its
    executors.
    """

    def __init__(
        self,
        workdir: str | Path,
        worker_hosts: Iterable[str] = ("127.0.0.2", "127.0.0.3"),
        *,
        master_host: str = "127.0.0.1",
        worker_cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        java_opts: str = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        startup_timeout_s: float = 90.0,
        stop_at_exit: bool = True,
        worker_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.worker_hosts = list(worker_hosts)
        self.worker_env = {host: dict(env) for host, env in (worker_env or {}).items()}
        self.master_host = master_host
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.java_opts = java_opts
        self.startup_timeout_s = startup_timeout_s
        self.master_port = 0
        self._master: subprocess.Popen[bytes] | None = None
        self._workers: dict[str, subprocess.Popen[bytes]] = {}
        self._groups: set[int] = set()
        self._restarts: dict[str, int] = {}
        # False: the daemons outlive this interpreter (``affinity dev up``); stop them by their
        # process groups (:attr:`process_groups`).
        self._atexit_registered = not stop_at_exit

    # ------------------------------------------------------------------ set-up

    @property
    def master_url(self) -> str:
        if not self.master_port:
            raise RuntimeError("the cluster is not started")
        return f"spark://{self.master_host}:{self.master_port}"

    @property
    def log4j_config(self) -> Path:
        """A log4j2 configuration (INFO) for the daemons; ``quiet_log4j_config`` for drivers."""
        return self._log4j("info")

    @property
    def quiet_log4j_config(self) -> Path:
        return self._log4j("error")

    def _log4j(self, level: str) -> Path:
        path = self.workdir / f"log4j2-{level}.properties"
        if not path.exists():
            self.workdir.mkdir(parents=True, exist_ok=True)
            path.write_text(_LOG4J.format(level=level))
        return path

    def _env(self, local_ip: str) -> dict[str, str]:
        home = spark_home()
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP=local_ip,
            SPARK_NO_DAEMONIZE="1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=(
                f"{self.java_opts} -Dlog4j2.configurationFile=file:{self.log4j_config}"
            ),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
            # Executors' scratch space (block managers, Python daemons' files) under workdir, so
            # a killed executor leaves nothing behind outside it.
            SPARK_LOCAL_DIRS=str(self.workdir / f"local-{local_ip}"),
            PYSPARK_PYTHON=sys.executable,
        )
        env.update(self.worker_env.get(local_ip, {}))
        return env

    def _spawn(self, name: str, args: list[str], local_ip: str) -> subprocess.Popen[bytes]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        log = (self.workdir / f"{name}.log").open("ab")
        try:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=self._env(local_ip),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        self._groups.add(process.pid)
        return process

    def start(self) -> StandaloneCluster:
        """Start the master (and wait until it listens), then every worker."""
        if self._master is None:
            self.master_port = free_port(self.master_host)
            self._master = self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    self.master_host,
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    "0",
                ],
                self.master_host,
            )
            host, port = self.master_host, self.master_port
            wait_until(
                lambda: port_open(host, port),
                self._master,
                self.startup_timeout_s,
                f"nothing listens on {host}:{port}",
            )
        for host in self.worker_hosts:
            if host not in self._workers:
                self.start_worker(host)
        return self

    def start_worker(self, host: str, env: Mapping[str, str] | None = None) -> None:
        """Start a worker on ``host`` (a fresh worker process; its executors get new ids), with
        ``env`` as its extra environment from now on when given."""
        if env is not None:
            self.worker_env[host] = dict(env)
        if host in self._workers and self._workers[host].poll() is None:
            return
        if host not in self.worker_hosts:
            self.worker_hosts.append(host)
        count = self._restarts.get(host, 0)
        self._restarts[host] = count + 1
        self._workers[host] = self._spawn(
            f"worker-{host}-{count}",
            [
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                host,
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                "--work-dir",
                str(self.workdir / f"work-{host}"),
                "--webui-port",
                "0",
            ],
            host,
        )

    @property
    def process_groups(self) -> list[int]:
        """The process group of every daemon started (master first): killing a group kills the
        daemon and everything it started (executors, their Python workers)."""
        return sorted(self._groups, key=lambda g: g != (self._master.pid if self._master else -1))

    # ------------------------------------------------------------------ failures

    def kill_worker(self, host: str) -> None:
        """Kill the worker on ``host`` and everything it started (its executors), like a
        machine going down."""
        process = self._workers.pop(host, None)
        if process is None:
            return
        kill_process(process, group=True)
        self._groups.discard(process.pid)

    def executors(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """The executor JVMs started by this cluster's workers (of ``app_id`` if given)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                if os.getpgid(pid) not in self._groups:
                    continue
            except ProcessLookupError:
                continue
            args = _cmdline(pid)
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
                continue
            executor = ExecutorProcess(
                pid, _arg(args, "--app-id"), _arg(args, "--executor-id"), _arg(args, "--hostname")
            )
            if app_id is None or executor.app_id == app_id:
                found.append(executor)
        return found

    def kill_executor(self, app_id: str, executor_id: str) -> int:
        """SIGKILL one executor JVM; its worker starts a replacement (a new executor id).
        Returns the pid killed."""
        for executor in self.executors(app_id):
            if executor.executor_id == executor_id:
                os.kill(executor.pid, signal.SIGKILL)
                return executor.pid
        raise LookupError(f"no executor {executor_id} of {app_id} in this cluster")

    # ------------------------------------------------------------------ tear-down

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every process this cluster started (workers first), killing what lingers."""
        processes = [*self._workers.values(), *([self._master] if self._master else [])]
        # SIGTERM each process group, then SIGKILL what is left in it (executors, Python daemons)
        stop_processes(processes, timeout_s, group=True)
        for pgid in list(self._groups):  # groups of workers replaced since
            signal_group(pgid, signal.SIGKILL)
        self._workers.clear()
        self._master = None
        self._groups.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def import_root(module: ModuleType) -> Path:
    """The folder to put on ``sys.path`` so ``module`` imports: above a package's folder, the
    folder of a one-file module (a module of a package: above its top package)."""
    path = Path(module.__file__ or "").resolve()
    depth = module.__name__.count(".") + (1 if hasattr(module, "__path__") else 0)
    for _ in range(depth + 1):
        path = path.parent
    return path


def executor_pythonpath(*modules: ModuleType) -> str:
    """Folders executors need on their ``PYTHONPATH``: those of ``coordinator`` and ``locality``
    and of each of ``modules`` (so they run even where nothing is installed into the executors'
    Python)."""
    import coordinator
    import locality

    roots = (coordinator, locality, *modules)
    folders = sorted({str(import_root(m)) for m in roots})
    if sys.prefix != sys.base_prefix:
        # A virtualenv whose python is a symlink: Python workers may start as the base
        # interpreter (seen: pyenv), without the virtualenv's packages (pandas, pyarrow).
        folders.append(sysconfig.get_path("purelib"))
    return os.pathsep.join(folders)


def spark_session(
    master: str,
    *,
    app_name: str = "affinity",
    locality_wait: str = "30s",
    executor_memory: str = "512m",
    driver_memory: str = "512m",
    log4j_config: Path | None = None,
    conf: Mapping[str, str] | None = None,
    python_modules: Iterable[ModuleType] = (),
) -> SparkSession:
    """A SparkSession on ``master``: loopback only, no UI, lean executors, the executors' Python
    is this interpreter (with ``python_modules``' folders on its path, see
    :func:`executor_pythonpath`), ``spark.locality.wait`` = ``locality_wait``, affinity's jar
    on the class path (``spark.jars``, built when missing)."""
    from pyspark.sql import SparkSession

    from locality.spark.jvm import session_conf

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = "-XX:+UseSerialGC"
    driver_opts = java_opts + (
        f" -Dlog4j2.configurationFile=file:{log4j_config}" if log4j_config else ""
    )
    settings = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.memory": executor_memory,
        "spark.executor.cores": "1",
        "spark.executor.extraJavaOptions": java_opts,
        "spark.executorEnv.PYTHONPATH": executor_pythonpath(*python_modules),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.locality.wait": locality_wait,
        "spark.speculation": "false",
        "spark.sql.shuffle.partitions": "4",
        **session_conf(),
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    if log4j_config is not None:
        session.sparkContext.setLogLevel("ERROR")
    return session
