"""Soak: a real job on a 3-server ZooKeeper ensemble under random faults for N minutes.

A job (16 tasks) with 3 coordinator replicas and 4-6 processors on 3 hosts, all real processes
(``tests/jobharness.py``, 4 s sessions), runs on a 3-server
:class:`~coordinator.launchers.ensemble.ZooKeeperEnsemble`.
Until the time is up, the soak draws one fault after another (``random.Random(seed)``):

=====================  ============================================================================
``kill_processor``     kill -9 a processor (one joins if fewer than 4 are left or a host is empty)
``restart_processor``  kill -9 a processor and start one under a new id at its location
``join_processor``     a processor joins (at most 6)
``kill_leader``        kill -9 the leading coordinator (a replacement starts when fewer than 3 live)
``expire_processor``   SIGSTOP a processor past its session timeout, then SIGCONT
``restart_server``     kill -9 a random ZooKeeper server, down 0.5-3 s, restart on its data dir
``restart_zk_leader``  the same for the ZooKeeper leader (a new election)
``zk_mid_rebalance``   a processor joins or dies, and the ZooKeeper leader is killed while the
                       coordinator rebalances for it
=====================  ============================================================================

After each fault the soak waits until the job has converged (one DONE model at the newest
version naming exactly the live processors, each running exactly its tasks in it, one leader;
**time to converge** runs from the fault's start to that moment, and from its last act - the
kill, the SIGCONT, the restarted server - to that moment: a rebalance may finish while a server
is still down) and then runs every check of the
randomized fault test (``tests/integration/test_coordinator_faults.py``, ``FaultRun.check``):
I1-I4 over every stored model, the coordinators' publish logs and all the processors' event
logs since the start. Between the checks a monitor thread reads ZooKeeper every 0.5 s: the latest
and the DONE version never go back, a decided barrier stays decided, every published model
assigns every task exactly once to processors that existed. A failed check counts as a
violation (and the soak goes on).

Usage: ``python benchmarks/soak.py [--minutes 30] [--seed N] [--doc PATH] [--no-write]``
(not part of ``make test``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests"))
sys.path.insert(0, str(_ROOT / "tests" / "integration"))

import argparse  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import defaultdict  # noqa: E402

from jobharness import JobHarness  # noqa: E402
from test_coordinator_faults import (  # noqa: E402
    DEBOUNCE_MS,
    HOSTS,
    PARTITIONS,
    SESSION_TIMEOUT_MS,
    FaultRun,
    assignment_errors,
)

from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from coordinator.launchers.ensemble import ZooKeeperEnsemble  # noqa: E402
from metadata.zk import NotFound  # noqa: E402

FAULTS = {  # kind -> weight
    "kill_processor": 3,
    "restart_processor": 3,
    "join_processor": 2,
    "kill_leader": 3,
    "expire_processor": 1,
    "restart_server": 3,
    "restart_zk_leader": 2,
    "zk_mid_rebalance": 3,
}
MAX_PROCESSORS = 6


class SoakRun(FaultRun):
    """The fault test's job, faults and checks, on an ensemble (``server`` is the ensemble)."""

    @property
    def ensemble(self) -> ZooKeeperEnsemble:
        assert isinstance(self.server, ZooKeeperEnsemble)
        return self.server

    def fault_join_processor(self) -> str:
        if len(self.live_processors()) >= MAX_PROCESSORS:
            return self.fault_kill_processor()
        host = self.emptiest_host()
        return f"{self.start_processor(host)} joins at {host}"

    def fault_kill_leader(self) -> str:
        detail = super().fault_kill_leader()
        if len(self.live_coordinators()) < 3 and "starts" not in detail:
            detail += f"; {self.start_coordinator()} starts"
        return detail

    def _restart_server(self, index: int, what: str) -> str:
        down = round(self.rng.uniform(0.5, 3.0), 2)
        self.ensemble.restart(index, hard=True, down_s=down)
        return f"kill -9 ZooKeeper {what} {index}, down {down} s, restart"

    def fault_restart_server(self) -> str:
        index = self.rng.randrange(len(self.ensemble.servers))
        return self._restart_server(index, "server")

    def fault_restart_zk_leader(self) -> str:
        return self._restart_server(self.ensemble.leader(), "leader")

    def fault_zk_mid_rebalance(self) -> str:
        live, store = self.live_processors(), self.job.store
        if len(live) < MAX_PROCESSORS and (len(live) <= 4 or self.rng.random() < 0.5):
            pid = self.start_processor(self.emptiest_host())
            detail = f"{pid} joins"
            self.job.wait_for(lambda: pid in store.processors.locality(), 30, f"{pid} joins")
        else:
            crowded = sorted(p for p, h in live.items() if list(live.values()).count(h) > 1)
            pid = self.rng.choice(crowded)
            detail = f"kill -9 {pid}"
            self.kill_processor_now(pid)
            self.job.wait_for(
                lambda: pid not in store.processors.locality(),
                SESSION_TIMEOUT_MS / 1000 + 5,
                f"{pid}'s session to expire",
            )
        time.sleep(round(self.rng.uniform(0.0, DEBOUNCE_MS / 1000 + 0.4), 2))
        return f"{detail}; " + self._restart_server(self.ensemble.leader(), "leader")


class Monitor(threading.Thread):
    """Reads ZooKeeper every ``period_s`` between the rounds' checks (see the module docstring)."""

    def __init__(self, run: SoakRun, period_s: float = 0.5) -> None:
        super().__init__(name="soak-monitor", daemon=True)
        self.run_, self.period_s = run, period_s
        self.stopped = threading.Event()
        self.violations: list[str] = []
        self.polls = 0
        self._latest = self._done = 0
        self._decided: dict[int, str] = {}
        self._checked: set[int] = set()

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            try:
                self.poll()
            except AssertionError as exc:
                self.violations.append(str(exc))
            except Exception:  # ZooKeeper mid-restart: poll again
                continue
            self.polls += 1

    def poll(self) -> None:
        store = self.run_.job.store
        latest = store.job_models.latest_version() or 0
        assert latest >= self._latest, f"latest version went back {self._latest} -> {latest}"
        self._latest = latest
        ever = set(list(self.run_.job.processors))
        for version in range(max(1, latest - 3), latest + 1):
            state = store.barriers.state(version)
            before = self._decided.get(version)
            assert before in (None, state), f"barrier {version} went {before} -> {state}"
            if state in ("DONE", "TIMED_OUT"):
                self._decided[version] = state
            if state == "DONE":
                assert version >= self._done or version in self._decided
                self._done = max(self._done, version)
            if version not in self._checked:
                try:
                    model = store.job_models.read(version)
                except NotFound:
                    continue  # an abandoned attempt, or removed by retention
                assert assignment_errors(model, ever) == [], assignment_errors(model, ever)
                self._checked.add(version)


def draw(rng: random.Random) -> str:
    kinds = list(FAULTS)
    return rng.choices(kinds, weights=[FAULTS[k] for k in kinds])[0]


def soak(minutes: float, seed: int, workdir: Path) -> dict[str, object]:
    """Run the soak; its figures (rounds, converge times, violations) for the report."""
    ensemble = ZooKeeperEnsemble(workdir / "ensemble")
    ensemble.start()
    job = JobHarness(
        ensemble,  # type: ignore[arg-type]
        workdir / "job",
        partitions=PARTITIONS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        debounce_ms=DEBOUNCE_MS,
        debounce_max_ms=2000,
        barrier_timeout_ms=12000,
    )
    run = SoakRun(job, ensemble, random.Random(seed), seed)  # type: ignore[arg-type]
    monitor = Monitor(run)
    converge: dict[str, list[tuple[float, float]]] = defaultdict(list)
    violations: list[str] = []
    began = time.monotonic()
    try:
        run.start()
        first = job.store.job_models.latest_version() or 0
        monitor.start()
        while time.monotonic() - began < minutes * 60:
            one_round(run, draw(run.rng), converge, violations)
        last = job.store.job_models.latest_version() or 0
    finally:
        monitor.stopped.set()
        job.stop_all()
        ensemble.stop()
    return {
        "minutes": (time.monotonic() - began) / 60,
        "converge": dict(converge),
        "violations": violations + monitor.violations,
        "published": last - first,
        "polls": monitor.polls,
        "seed": seed,
        "starts": run.verified_starts,
    }


def one_round(
    run: SoakRun, kind: str, converge: dict[str, list[tuple[float, float]]], violations: list[str]
) -> None:
    number = sum(len(v) for v in converge.values()) + 1
    started = time.monotonic()
    try:
        detail = run.fault(kind)
        seconds = run.job.wait_for(run.quiet, 90, f"round {number} to converge")
        converge[kind].append((time.monotonic() - started, seconds))
        run.settle(f"round {number} ({detail})")
        run.rounds.append(run.check(kind, detail, started))
    except AssertionError as exc:
        violations.append(f"round {number} {kind}: {exc}")
        print(traceback.format_exc(), flush=True)
        return
    print(
        f"round {number:3}: {kind:<18} {detail} -> v{run.rounds[-1].done} "
        f"(converged {converge[kind][-1][0]:.1f} s after its start, {seconds:.1f} s after its "
        "last act)",
        flush=True,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]


def _row(name: str, times: list[tuple[float, float]]) -> list[object]:
    cells: list[object] = [name, len(times)]
    for which in (0, 1):
        values = [t[which] for t in times]
        cells.append(
            f"{percentile(values, 50):.1f} / {percentile(values, 99):.1f} s" if values else "-"
        )
    return cells


def report(result: dict[str, object]) -> str:
    converge: dict[str, list[tuple[float, float]]] = result["converge"]  # type: ignore[assignment]
    violations: list[str] = result["violations"]  # type: ignore[assignment]
    rows = [_row(k, converge[k]) for k in sorted(converge, key=lambda k: -len(converge[k]))]
    every = [t for times in converge.values() for t in times]
    rows.append(_row("**all**", every))
    summary = table(
        ["", "ran", "faults injected", "rebalances (versions published)", "violations"],
        [
            [
                "soak",
                f"{result['minutes']:.1f} min",
                len(every),
                result["published"],
                len(violations),
            ]
        ],
    )
    lines = [
        "## Soak: random faults on a 3-server ensemble (`benchmarks/soak.py`)",
        "",
        f"{machine()}; seed {result['seed']}; {result['minutes']:.1f} minutes. A job of "
        f"{PARTITIONS} tasks, 3 coordinator replicas and 4-6 processors on {len(HOSTS)} hosts "
        "(real processes, 4 s sessions, debounce 300 ms) on a 3-server ZooKeeper ensemble on "
        "loopback. Faults: processor kills, joins and restarts under new ids, a processor frozen "
        "past its session, coordinator leader kills, kill -9 and restart of a ZooKeeper server "
        "or of the ZooKeeper leader, and the ZooKeeper leader killed during a rebalance. After "
        "each fault: every I1-I4 check of the fault test (`FaultRun.check`, over every stored "
        "model and every processor's event log since the start); between them a monitor read "
        f"ZooKeeper {result['polls']} times (versions and barrier states never go back, every "
        f"model assigns each task once). Starts checked against their barrier: {result['starts']}."
        " **Time to converge**: from the fault's start, and from its last act (the kill, the "
        "SIGCONT, the restarted server; a rebalance may finish while a server is down), to one "
        "DONE model at the newest version that names exactly the live processors, each running "
        "exactly its tasks, and one leader.",
        "",
        summary,
        "",
        table(
            ["fault", "injected", "converge from start p50 / p99", "after last act p50 / p99"],
            rows,
        ),
    ]
    if violations:
        lines += ["", "Violations:", ""] + [f"- {v.splitlines()[0]}" for v in violations]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the job and the ensemble
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"soak: {args.minutes:g} minutes, seed {seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="affinity-soak-") as tmp:
        result = soak(args.minutes, seed, Path(tmp))
    markdown = report(result)
    print(markdown)
    if not args.no_write:
        write_section("soak", markdown, args.doc)
    violations: list[str] = result["violations"]  # type: ignore[assignment]
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
