"""``affinity dev up`` / ``down`` / ``status``: a private ZooKeeper and a Spark standalone cluster
on loopback, as daemons (each in a session of its own) that outlive the command.

``dev up`` writes into its directory (default ``.affinity-dev/`` in the current directory):

- ``state.json``: the ZooKeeper connect string and process id, the Spark master URL, the worker
  hosts and the process group of every Spark daemon (:class:`DevEnvironment`);
- ``job.yaml``: a job config for ``stateful_foreach_batch`` on them (one input of 4 virtual
  tasks, state under ``state/``, logging at warning);
- the daemons' work directories and logs (``zookeeper/``, ``spark/``);
- ``up.lock``: held while ``dev up`` starts, so a second ``dev up`` there is refused.

A state file is trusted only if it names its own directory (a copied project's state file names
the original's: refused, nothing stopped nor removed). ``dev up`` over a dead environment keeps
the directory (a query's ``checkpoint/``, ZooKeeper's data); SIGTERM while it starts stops what
it started, as SIGINT does.

``dev down`` stops every process the state file names (SIGTERM, then SIGKILL; a process whose
command line does not name the directory is not ours and is left alone) and removes the
directory (``keep=True`` keeps it). Everything binds to 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from coordinator.config import JobConfig, load_config
from coordinator.launchers.cluster import StandaloneCluster, spark_session
from coordinator.launchers.processes import group_alive, stop_group
from coordinator.launchers.zookeeper import EmbeddedZooKeeper

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_DIR", "DevEnvironment", "DevError", "dev_down", "dev_up"]

DEFAULT_DIR = Path(".affinity-dev")
STATE_FILE = "state.json"
CONFIG_FILE = "job.yaml"
LOCK_FILE = "up.lock"
WORKER_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
REGISTERED = "Successfully registered with master"


class DevError(RuntimeError):
    """The dev environment cannot do what was asked (the message says why and what to run)."""


@dataclass(frozen=True)
class DevEnvironment:
    """What ``affinity dev up`` started (read back from ``<directory>/state.json``)."""

    directory: str
    zookeeper: str  # connect string, 127.0.0.1:<port>
    zookeeper_pid: int
    master_url: str | None  # None: started without Spark (workers=0)
    workers: tuple[str, ...]
    spark_groups: tuple[int, ...]  # process group of each Spark daemon, the master first
    config_path: str

    @classmethod
    def load(cls, directory: str | Path = DEFAULT_DIR) -> DevEnvironment:
        """The environment ``affinity dev up`` started in ``directory`` (DevError if there is
        none, or if the state file is not one ``dev up`` wrote for this very directory)."""
        path = Path(directory) / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise DevError(
                f"no dev environment in {directory}: run `affinity dev up` first"
            ) from None
        except (OSError, ValueError) as exc:
            raise DevError(f"{path} is unreadable ({exc}): remove {directory} by hand") from None
        try:
            env = _from_state(data)
        except (KeyError, TypeError, ValueError) as exc:
            problem = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise DevError(
                f"{path} is not a state file of `affinity dev up` ({problem}): nothing stopped "
                f"nor removed; stop its daemons and remove {directory} by hand"
            ) from None
        here = Path(directory).resolve()
        if Path(env.directory) != here or Path(env.config_path).parent != here:
            raise DevError(
                f"{path} names another directory, {env.directory} (a copied or moved "
                f"directory?): nothing stopped nor removed; remove {directory} by hand"
            )
        return env

    def save(self) -> None:
        path = Path(self.directory) / STATE_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(self), indent=2) + "\n")
        temporary.replace(path)

    def config(self) -> JobConfig:
        """The job config ``dev up`` wrote (the file alone: no ``AFFINITY_*`` overrides)."""
        return load_config(self.config_path, environ={})

    def spark_session(self, app_name: str = "affinity-dev", **options: Any) -> SparkSession:
        """A SparkSession on this environment's master (:func:`coordinator.launchers.cluster.
        spark_session`: loopback, lean executors, affinity's jar)."""
        if self.master_url is None:
            raise DevError("this dev environment has no Spark: run `affinity dev up --workers 2`")
        return spark_session(self.master_url, app_name=app_name, **options)

    def processes(self) -> dict[str, bool]:
        """Each daemon (``zookeeper``, ``spark-<pgid>``) and whether it still runs."""
        alive = {"zookeeper": _ours(self.zookeeper_pid, self.directory)}
        for group in self.spark_groups:
            alive[f"spark-{group}"] = _ours(group, self.directory) and group_alive(group)
        return alive


def _from_state(data: object) -> DevEnvironment:
    """The environment a state file's JSON describes (KeyError, TypeError or ValueError naming
    what is wrong)."""
    if not isinstance(data, dict):
        raise TypeError(f"a JSON object expected, got {type(data).__name__}")
    master = data.get("master_url")
    if master is not None and not isinstance(master, str):
        raise TypeError(f"master_url should be a string, got {master!r:.60}")
    return DevEnvironment(
        directory=_text(data, "directory"),
        zookeeper=_text(data, "zookeeper"),
        zookeeper_pid=_pid(data["zookeeper_pid"]),
        master_url=master,
        workers=tuple(_text({"worker": w}, "worker") for w in _list(data, "workers")),
        spark_groups=tuple(_pid(g) for g in _list(data, "spark_groups")),
        config_path=_text(data, "config_path"),
    )


def _text(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key} should be a non-empty string, got {value!r:.60}")
    return value


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise TypeError(f"{key} should be a list, got {value!r:.60}")
    return value


def _pid(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a process id should be a whole number >= 0, got {value!r:.60}")
    return value


def _ours(pid: int, directory: str) -> bool:
    """Process ``pid`` runs and its command line names ``directory`` (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return directory in cmdline


def job_config_data(zookeeper: str, directory: Path) -> dict[str, Any]:
    """The job config ``dev up`` writes: one input of 4 virtual tasks, state under ``state/``."""
    return {
        "job": {"name": "dev", "id": "1", "run_id": "r1"},
        "zookeeper": {"connect": zookeeper, "root": "/affinity"},
        "inputs": [{"system": "spark", "stream": "events", "partitions": 1}],
        "ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": 4}},
        "coordinator": {"debounce_ms": 200, "debounce_max_ms": 1000},
        "state": {
            "checkpoint_dir": str(directory / "state" / "durable"),
            "local_dir": str(directory / "state" / "local"),
            "max_parallelism": 64,
        },
        "logging": {"level": "warning"},
    }


def dev_up(directory: str | Path = DEFAULT_DIR, workers: int = 2) -> DevEnvironment:
    """Start ZooKeeper and (``workers`` > 0) a Spark master with ``workers`` workers, as daemons;
    write the state file and the job config. Refuses if an environment is up there, or another
    ``dev up`` is starting there. Over a dead environment, the directory is kept (its
    ``checkpoint/``, state and ZooKeeper data): only the daemons and the state file are new."""
    if not 0 <= workers <= len(WORKER_HOSTS):
        raise DevError(f"--workers must be between 0 and {len(WORKER_HOSTS)}, got {workers}")
    root = Path(directory).resolve()
    with _only_one_up(root, directory), _sigterm_interrupts():
        if (root / STATE_FILE).exists():
            running = DevEnvironment.load(root).processes()
            if any(running.values()):
                raise DevError(
                    f"a dev environment is already up in {directory}: `affinity dev down`"
                )
            (root / STATE_FILE).unlink()
        env = _start(root, WORKER_HOSTS[:workers])
        env.save()
    return env


def _start(root: Path, hosts: tuple[str, ...]) -> DevEnvironment:
    """Start the daemons in ``root``; stop those started if anything fails or interrupts."""
    zookeeper = EmbeddedZooKeeper(root / "zookeeper", detach=True)
    cluster: StandaloneCluster | None = None
    try:
        zookeeper.start()
        if hosts:
            cluster = StandaloneCluster(root / "spark", hosts, stop_at_exit=False)
            cluster.start()  # (assigned first: an interrupted start is stopped too)
            _wait_registered(root / "spark", hosts, cluster.startup_timeout_s)
    except BaseException:
        zookeeper.stop()
        if cluster is not None:
            cluster.stop()
        raise
    config_path = root / CONFIG_FILE
    config_path.write_text(yaml.safe_dump(job_config_data(zookeeper.hosts, root), sort_keys=False))
    return DevEnvironment(
        directory=str(root),
        zookeeper=zookeeper.hosts,
        zookeeper_pid=zookeeper.pid or 0,
        master_url=cluster.master_url if cluster else None,
        workers=tuple(hosts),
        spark_groups=tuple(cluster.process_groups) if cluster else (),
        config_path=str(config_path),
    )


@contextlib.contextmanager
def _only_one_up(root: Path, directory: str | Path) -> Iterator[None]:
    """Hold ``root``'s start lock (DevError if another ``dev up`` holds it)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK_FILE).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DevError(
                f"another `affinity dev up` is starting in {directory}: wait for it to finish, "
                "then `affinity dev status`"
            ) from None
        yield


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile (as SIGINT does), so a ``dev up`` stopped
    while its daemons start stops them instead of leaving them orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait_registered(workdir: Path, hosts: tuple[str, ...], timeout_s: float) -> None:
    """Wait until every worker says it registered with the master (its log)."""
    deadline = time.monotonic() + timeout_s
    waiting = set(hosts)
    while waiting:
        for host in list(waiting):
            with contextlib.suppress(OSError):
                if REGISTERED in (workdir / f"worker-{host}-0.log").read_text(errors="replace"):
                    waiting.discard(host)
        if waiting and time.monotonic() > deadline:
            raise DevError(f"Spark workers {sorted(waiting)} did not register; see {workdir}")
        time.sleep(0.2)


def dev_down(directory: str | Path = DEFAULT_DIR, *, keep: bool = False) -> list[str]:
    """Stop every daemon of the environment in ``directory``; remove the directory unless
    ``keep``. Returns what was stopped."""
    env = DevEnvironment.load(directory)
    stopped = []
    for group in env.spark_groups:
        if _ours(group, env.directory):
            stop_group(group)
            stopped.append(f"spark-{group}")
    if _ours(env.zookeeper_pid, env.directory):
        stop_group(env.zookeeper_pid)
        stopped.append("zookeeper")
    if keep:
        (Path(env.directory) / STATE_FILE).unlink(missing_ok=True)
    else:
        shutil.rmtree(env.directory, ignore_errors=True)
    return stopped


def describe(env: DevEnvironment, cwd: Path | None = None) -> list[str]:
    """Lines ``dev up`` and ``dev status`` print."""
    here = (cwd or Path.cwd()).resolve()

    def short(path: str) -> str:
        with contextlib.suppress(ValueError):
            return os.path.relpath(path, here) if Path(path).is_relative_to(here) else path
        return path

    alive = env.processes()
    lines = [
        f"ZooKeeper     {env.zookeeper}  (pid {env.zookeeper_pid}, "
        f"{'running' if alive['zookeeper'] else 'NOT running'})",
    ]
    if env.master_url is not None:
        spark_up = sum(v for k, v in alive.items() if k.startswith("spark-"))
        lines.append(
            f"Spark master  {env.master_url}  (workers {', '.join(env.workers)}; "
            f"{spark_up}/{len(env.spark_groups)} daemons running)"
        )
    lines += [
        f"job config    {short(env.config_path)}  "
        "(DevEnvironment.load().config(), or load_config(path, environ={}))",
        f"state         {short(str(Path(env.directory) / STATE_FILE))}",
    ]
    return lines
