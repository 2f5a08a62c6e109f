"""A job on a real ZooKeeper with real coordinator and processor processes, for integration tests.

``JobHarness`` writes a job config, starts ``affinity coordinator run`` replicas and ``affinity
processor run`` sample processors as subprocesses, kills them (SIGKILL), freezes them (SIGSTOP,
to make a session expire while the process lives), and reads the job's state back through a
``ZkMetadataStore`` and the processors' status files and event logs. ``server`` is anything
with a ``hosts`` connect string: one ``EmbeddedZooKeeper`` or a ``ZooKeeperEnsemble``; ``name``
picks the job's folder, so several jobs may share one server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from coordinator.launchers.ensemble import ZooKeeperEnsemble
from coordinator.launchers.zookeeper import EmbeddedZooKeeper
from metadata.model import JobModel
from metadata.zk import ZkMetadataStore, connect

AFFINITY = str(Path(sys.executable).with_name("affinity"))
ZooKeeperServer = EmbeddedZooKeeper | ZooKeeperEnsemble


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


class JobHarness:
    def __init__(
        self,
        server: ZooKeeperServer,
        workdir: Path,
        *,
        partitions: int = 12,
        session_timeout_ms: int = 4000,
        debounce_ms: int = 300,
        debounce_max_ms: int = 2000,
        barrier_timeout_ms: int = 12000,
        processor_grace_ms: int = 0,
        grouper_options: dict[str, Any] | None = None,
        name: str = "clicks",
        coordinator_options: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.name = name
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.session_timeout_s = session_timeout_ms / 1000
        self.config = workdir / "job.yaml"
        options = json.dumps(grouper_options or {})
        more = "".join(
            f", {key}: {json.dumps(value)}" for key, value in (coordinator_options or {}).items()
        )
        self.config.write_text(
            f"job: {{name: {name}, id: '1', run_id: r1}}\n"
            f"zookeeper: {{connect: '{server.hosts}', root: /affinity,"
            f" session_timeout_ms: {session_timeout_ms}}}\n"
            f"inputs: [{{system: kafka, stream: events, partitions: {partitions}}}]\n"
            f"grouper: {{name: host-affinity, options: {options}}}\n"
            f"coordinator: {{debounce_ms: {debounce_ms}, debounce_max_ms: {debounce_max_ms},"
            f" barrier_timeout_ms: {barrier_timeout_ms},"
            f" processor_grace_ms: {processor_grace_ms}, http_port: 0{more}}}\n"
            "logging: {format: json}\n"
        )
        self.coordinators: dict[str, Proc] = {}
        self.processors: dict[str, Proc] = {}
        self.locations: dict[str, str] = {}
        self._client: KazooClient | None = None
        self._store: ZkMetadataStore | None = None

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, args: list[str]) -> Proc:
        log = self.workdir / f"{name}.log"
        handle = open(log, "ab")  # noqa: SIM115 - the child owns it
        popen = subprocess.Popen(
            [AFFINITY, *args], stdout=handle, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
        handle.close()
        return Proc(name, popen, log)

    def start_coordinator(self, name: str) -> Proc:
        proc = self._spawn(name, ["coordinator", "run", "--config", str(self.config)])
        self.coordinators[name] = proc
        return proc

    def start_processor(
        self, pid: str, location: str, *extra: str, connect: str | None = None
    ) -> Proc:
        """``extra``: more ``affinity processor run`` arguments (``--capacity``, ...);
        ``connect``: another ZooKeeper address for it alone (e.g. a pausable relay)."""
        status = self.workdir / f"{pid}.json"
        config = self.config
        if connect is not None:
            config = self.workdir / f"{pid}.yaml"
            config.write_text(self.config.read_text().replace(self.server.hosts, connect))
        proc = self._spawn(
            pid,
            [
                "processor",
                "run",
                "--config",
                str(config),
                "--processor-id",
                pid,
                "--location",
                location,
                "--status-file",
                str(status),
                *extra,
            ],
        )
        self.processors[pid] = proc
        self.locations[pid] = location
        return proc

    def kill(self, proc: Proc) -> None:
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(10)

    def stop_all(self) -> None:
        for proc in [*self.processors.values(), *self.coordinators.values()]:
            if proc.popen.poll() is None:
                try:
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in [*self.processors.values(), *self.coordinators.values()]:
            try:
                proc.popen.wait(15)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(5)
        if self._client is not None:
            self._client.stop()
            self._client.close()

    # ------------------------------------------------------------------ observing

    @property
    def store(self) -> ZkMetadataStore:
        if self._store is None:
            self._client = connect(self.server.hosts, session_timeout_s=10.0)
            self._store = ZkMetadataStore(self._client, f"/affinity/{self.name}-1", run_id="r1")
        return self._store

    def done_model(self) -> JobModel | None:
        """The newest job model whose barrier is DONE."""
        latest = self.store.job_models.latest_version()
        if latest is None:
            return None
        for version in range(latest, 0, -1):
            if self.store.barriers.state(version) == "DONE":
                return self.store.job_models.read(version)
        return None

    def running(self, pid: str) -> dict[str, int]:
        """Task -> version, as processor ``pid`` last reported it."""
        status = self.workdir / f"{pid}.json"
        if not status.exists():
            return {}
        data: dict[str, Any] = json.loads(status.read_text())
        return dict(data["tasks"])

    def events(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for path in self.workdir.glob("*.json.events"):
            records += [json.loads(line) for line in path.read_text().splitlines() if line]
        return sorted(records, key=lambda r: r["t"])

    def leader(self) -> str | None:
        """Name of the coordinator whose log says it leads now (last 'leading' after any
        'step_down')."""
        current = None
        latest = 0.0
        for name, proc in self.coordinators.items():
            if proc.popen.poll() is not None:
                continue
            for line in proc.log.read_text(errors="replace").splitlines():
                if '"coordinator.leading"' in line or '"coordinator.step_down"' in line:
                    record = json.loads(line)
                    stamp = record["timestamp"]
                    leading = record["event"] == "coordinator.leading"
                    key = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float(
                        "0." + stamp[20:26]
                    )
                    if key >= latest:
                        latest, current = key, (name if leading else None)
        return current

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Poll until ``predicate()``; returns the seconds it took; fails naming ``what``."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            try:
                if predicate():
                    return time.monotonic() - start
            except Exception:  # the store may be mid-restart; keep polling
                pass
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{self.diagnose()}")

    def settled(self) -> bool:
        """A DONE model is in force, every live processor runs exactly its tasks in it, and the
        model names exactly the live processors."""
        model = self.done_model()
        if model is None:
            return False
        live = {pid for pid, p in self.processors.items() if p.popen.poll() is None}
        if set(model.containers) != live:
            return False
        latest = self.store.job_models.latest_version()
        if latest != model.version:
            return False
        return all(set(self.running(pid)) == set(model.containers[pid].tasks) for pid in live)

    def diagnose(self) -> str:
        lines = []
        try:
            latest = self.store.job_models.latest_version()
            lines.append(f"latest version {latest}")
            if latest:
                lines.append(f"barrier {self.store.barriers.state(latest)}")
            model = self.done_model()
            if model:
                lines.append(
                    f"done model v{model.version}: "
                    + ", ".join(f"{p}:{len(c.tasks)}" for p, c in sorted(model.containers.items()))
                )
        except Exception as exc:
            lines.append(f"store: {exc!r}")
        for pid in self.processors:
            lines.append(f"{pid} runs {sorted(self.running(pid))}")
        return "\n".join(lines)

    def assert_no_task_ran_twice_at_once(self) -> None:
        """From the processors' event logs: no task was running on two processors at a time."""
        owner: dict[str, str] = {}
        for record in self.events():
            for task in record["tasks"]:
                if record["event"] == "start":
                    assert task not in owner or owner[task] == record["processor"], (
                        f"{task} started on {record['processor']} while running on {owner[task]}"
                    )
                    owner[task] = record["processor"]
                elif owner.get(task) == record["processor"]:
                    del owner[task]

    def mark_dead(self, pid: str) -> None:
        """A killed processor: drop its stale 'running' from the ownership log."""
        events = self.workdir / f"{pid}.json.events"
        running = self.running(pid)
        if running:
            with open(events, "a", encoding="utf-8") as handle:
                handle.write(
                    json.dumps(
                        {
                            "t": time.time(),
                            "event": "stop",
                            "processor": pid,
                            "version": None,
                            "tasks": sorted(running),
                        }
                    )
                    + "\n"
                )
        status = self.workdir / f"{pid}.json"
        if status.exists():
            status.unlink()
