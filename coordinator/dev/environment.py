"""``affinity dev up`` / ``down`` / ``status``: a private ZooKeeper and a Spark standalone cluster
on loopback, as daemons (each in a session of its own) that outlive the command.

``dev up`` writes into its directory (default ``.affinity-dev/`` in the current directory):

- ``state.json``: the ZooKeeper connect string and process id, the Spark master URL, the worker
  hosts and the process group of every Spark daemon (:class:`DevEnvironment`);
- ``job.yaml``: a job config for ``stateful_foreach_batch`` on them (one input of 4 virtual
  tasks, state under ``state/``, logging at warning);
- the daemons' work directories and logs (``zookeeper/``, ``spark/``).

``dev down`` stops every process the state file names (SIGTERM, then SIGKILL; a process whose
command line does not name the directory is not ours and is left alone) and removes the
directory (``keep=True`` keeps it). Everything binds to 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
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
        """The environment ``affinity dev up`` started in ``directory``."""
        path = Path(directory) / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise DevError(
                f"no dev environment in {directory}: run `affinity dev up` first"
            ) from None
        except (OSError, ValueError) as exc:
            raise DevError(f"{path} is unreadable ({exc}): run `affinity dev down`") from None
        return cls(
            directory=str(data["directory"]),
            zookeeper=str(data["zookeeper"]),
            zookeeper_pid=int(data["zookeeper_pid"]),
            master_url=data.get("master_url"),
            workers=tuple(data.get("workers", ())),
            spark_groups=tuple(int(g) for g in data.get("spark_groups", ())),
            config_path=str(data["config_path"]),
        )

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
    write the state file and the job config. Refuses if an environment is up there."""
    if not 0 <= workers <= len(WORKER_HOSTS):
        raise DevError(f"--workers must be between 0 and {len(WORKER_HOSTS)}, got {workers}")
    root = Path(directory).resolve()
    if (root / STATE_FILE).exists():
        running = DevEnvironment.load(root).processes()
        if any(running.values()):
            raise DevError(f"a dev environment is already up in {directory}: `affinity dev down`")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    zookeeper = EmbeddedZooKeeper(root / "zookeeper", detach=True)
    cluster: StandaloneCluster | None = None
    try:
        zookeeper.start()
        hosts = WORKER_HOSTS[:workers]
        if hosts:
            cluster = StandaloneCluster(root / "spark", hosts, stop_at_exit=False).start()
            _wait_registered(root / "spark", hosts, cluster.startup_timeout_s)
    except BaseException:
        zookeeper.stop()
        if cluster is not None:
            cluster.stop()
        raise
    config_path = root / CONFIG_FILE
    config_path.write_text(yaml.safe_dump(job_config_data(zookeeper.hosts, root), sort_keys=False))
    env = DevEnvironment(
        directory=str(root),
        zookeeper=zookeeper.hosts,
        zookeeper_pid=zookeeper.pid or 0,
        master_url=cluster.master_url if cluster else None,
        workers=tuple(hosts),
        spark_groups=tuple(cluster.process_groups) if cluster else (),
        config_path=str(config_path),
    )
    env.save()
    return env


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
