"""The report of ``benchmarks/spark_affinity.py``: per-phase figures of the three strategies, the
standby replicas' cost, and the Markdown section of docs/benchmarks.md."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from affinity_pipeline import BatchReport
from affinity_pipeline.standby import StandbyStage

from benchmarks._report import machine, table

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
NEW_HOST = "127.0.0.5"
LOCALITY_WAIT = "30s"
STANDBY = "affinity + standby"
STRATEGIES = ("affinity", STANDBY, "spark default")
PLANNED = ("affinity", STANDBY)
TARGET = 0.99

Phases = list[tuple[str, dict[str, "PhaseStats"]]]


@dataclass
class PhaseStats:
    """One phase, one strategy."""

    batches: list[BatchReport] = field(default_factory=list)
    versions: int = 0  # job models published (affinity)
    moved: int = 0  # tasks whose processor changed (affinity)
    standbys: list[StandbyStage] = field(default_factory=list)  # affinity + standby
    deferred: list[int] = field(default_factory=list)  # per plan: moves held back by warm-up

    @property
    def warm(self) -> int:
        return sum(b.warm for b in self.batches)

    @property
    def cold(self) -> int:
        return sum(b.cold for b in self.batches)

    @property
    def warm_ratio(self) -> float | None:
        known = self.warm + self.cold
        return self.warm / known if known else None

    @property
    def bytes_restored(self) -> int:
        return sum(b.bytes_restored for b in self.batches)

    @property
    def batch_seconds(self) -> float:
        return statistics.fmean(b.seconds for b in self.batches) if self.batches else 0.0

    @property
    def pinned(self) -> tuple[int, int]:
        return sum(b.pinned_ok for b in self.batches), sum(b.pinned_total for b in self.batches)

    @property
    def checkpoint_bytes(self) -> int:
        return sum(o.checkpoint_bytes for b in self.batches for o in b.outcomes.values())

    @property
    def settled_after(self) -> int | None:
        """Plans until warm-up held nothing back any more (None: never held, or never settled)."""
        if not any(self.deferred):
            return None
        last = max(i for i, d in enumerate(self.deferred) if d)
        return last + 2 if last + 1 < len(self.deferred) else None


# ---------------------------------------------------------------------- figures


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}" if value in (0, 1) else f"{value:.1%}"


def _kib(value: float) -> str:
    return f"{value / 1024:,.1f} KiB" if value else "0"


def _totals(name: str, phases: Phases) -> dict[str, Any]:
    warm = sum(s[name].warm for _, s in phases)
    cold = sum(s[name].cold for _, s in phases)
    return {
        "warm_ratio": round(warm / (warm + cold), 4) if warm + cold else None,
        "warm": warm,
        "cold": cold,
        "bytes_restored": sum(s[name].bytes_restored for _, s in phases),
    }


def _standby_cost(phases: Phases) -> dict[str, Any]:
    stages = [st for _, s in phases for st in s[STANDBY].standbys]
    batches = len(stages) or 1
    checkpoints = sum(s[STANDBY].checkpoint_bytes for _, s in phases)
    return {
        "stages": len(stages),
        "delta_bytes_per_batch": round(sum(st.delta_bytes for st in stages) / batches),
        "catchup_bytes_per_batch": round(sum(st.catchup_bytes for st in stages) / batches),
        "checkpoint_bytes_per_batch": round(checkpoints / batches),
        "stage_seconds": round(statistics.fmean(st.seconds for st in stages), 3) if stages else 0,
        "pinned": [sum(st.pinned_ok for st in stages), sum(st.pinned_total for st in stages)],
    }


def summary(phases: Phases) -> dict[str, Any]:
    """The headline figures (also printed as JSON with ``--json``)."""

    def named(word: str) -> Phases:
        return [p for p in phases if word in p[0]]

    groups = {
        "after_failures": phases[2:],
        "worker_killed": named("killed"),
        "worker_back": named("back"),
        "rolling_restart": named("rolling"),
        "scale_out": named("scale-out"),
        "all": phases,
    }
    figures: dict[str, Any] = {
        name: {group: _totals(name, chosen) for group, chosen in groups.items()}
        for name in STRATEGIES
    }
    for name in PLANNED:
        pinned = [s[name].pinned for _, s in phases]
        figures[name]["pinned"] = {
            "ok": sum(p[0] for p in pinned),
            "total": sum(p[1] for p in pinned),
        }
        figures[name]["versions"] = sum(s[name].versions for _, s in phases)
        figures[name]["tasks_moved"] = sum(s[name].moved for _, s in phases)
    figures[STANDBY]["standby_cost"] = _standby_cost(phases)
    figures[STANDBY]["standby_cost_steady"] = _standby_cost(named("steady"))
    scale = named("scale-out")
    if scale:
        stats = scale[0][1][STANDBY]
        figures[STANDBY]["scale_out_warmup"] = {
            "deferred_per_plan": stats.deferred,
            "settled_after_plans": stats.settled_after,
            "moved": stats.moved,
        }
    return figures


# ---------------------------------------------------------------------- Markdown


def _phase_rows(phases: Phases) -> list[list[object]]:
    rows: list[list[object]] = []
    for label, stats in phases:
        for name in STRATEGIES:
            s = stats[name]
            pinned_ok, pinned_total = s.pinned
            rows.append(
                [
                    label,
                    len(s.batches),
                    name,
                    _ratio(s.warm_ratio),
                    f"{s.warm}/{s.cold}",
                    _kib(s.bytes_restored),
                    f"{s.batch_seconds:.2f} s",
                    f"{pinned_ok}/{pinned_total}" if name in PLANNED else "-",
                    f"{s.versions}/{s.moved}" if name in PLANNED else "-",
                ]
            )
    return rows


def _standby_rows(phases: Phases) -> list[list[object]]:
    rows: list[list[object]] = []
    for label, stats in phases:
        s = stats[STANDBY]
        n = len(s.standbys) or 1
        rows.append(
            [
                label,
                sum(st.count("delta") for st in s.standbys),
                sum(st.count("catch-up") for st in s.standbys),
                _kib(sum(st.delta_bytes for st in s.standbys) / n),
                _kib(sum(st.catchup_bytes for st in s.standbys) / n),
                _kib(s.checkpoint_bytes / n),
                f"{statistics.fmean(st.seconds for st in s.standbys):.2f} s" if s.standbys else "-",
                ", ".join(str(d) for d in s.deferred) or "-",
            ]
        )
    return rows


def _intro(sizes: Any, seconds: float) -> list[str]:
    return [
        "## Spark: host affinity through executor loss and restarts",
        "",
        f"`python benchmarks/spark_affinity.py` on {machine()}; whole run {seconds:.0f} s. "
        f"Standalone master + 3 workers on {', '.join(HOSTS)} (1 core, one 512 MB executor "
        f"each; a 4th on {NEW_HOST} in the last phase); {sizes.tasks} tasks, {sizes.keys:,} keys, "
        f"{sizes.events:,} events per batch; spark.locality.wait {LOCALITY_WAIT}. The three "
        "pipelines run in the same application, batch by batch, through the same failures.",
        "",
        "- **affinity**: placement from a job model (host-affinity grouper over the executors "
        "registered in ZooKeeper, task locality = where each task last ran), tasks pinned with "
        "preferred locations; **affinity + standby**: the same with `standby_replicas=1`, "
        "`max_warmup_replicas=2`, `acceptable_recovery_lag=0`: after each batch a second pinned "
        "stage applies the batch's checkpoint delta to each task's standby copy on its host, and "
        "the copies' lags (ZooKeeper `standbyLag`) are the grouper's `task_state`; **spark "
        "default**: the same stages without preferred locations.",
        "- **warm ratio**: tasks that found their previous batch's state in the local store of "
        "the host they ran on, over all tasks that had state (batch 0 has none); **warm/cold**: "
        "task runs; **bytes restored**: checkpoint bytes read by cold tasks; **batch time**: "
        "mean wall time of a batch (driver: plan, submit, run, collect; the standby stage not "
        "included; after each failure a no-op task on every executor starts its Python workers "
        "first, as that costs all the same). **pinned**: tasks that ran on the executor the job "
        "model named; **models/moved**: job-model versions published and tasks they moved.",
        "",
    ]


def _standby_lines(figures: dict[str, Any], phases: Phases) -> list[str]:
    cost, steady = figures[STANDBY]["standby_cost"], figures[STANDBY]["standby_cost_steady"]
    warmup = figures[STANDBY].get("scale_out_warmup", {})
    return [
        "",
        "Standby cost (affinity + standby): copies brought up to date per phase from the "
        "batch's **delta** (the copy was one batch behind) or by a **catch-up** from the full "
        "checkpoint (the copy was new, absent or further behind); bytes read per batch, against "
        "the full checkpoints the active tasks write per batch; the standby stage's mean wall "
        "time; **deferred**: per plan, the moves balance wanted that warm-up held back.",
        "",
        table(
            [
                "phase",
                "delta applies",
                "catch-ups",
                "delta bytes / batch",
                "catch-up bytes / batch",
                "checkpoints / batch",
                "standby stage",
                "deferred per plan",
            ],
            _standby_rows(phases),
        ),
        "",
        f"- Standby cost over the run: {_kib(cost['delta_bytes_per_batch'])} of deltas and "
        f"{_kib(cost['catchup_bytes_per_batch'])} of catch-ups applied per batch (steady state: "
        f"{_kib(steady['delta_bytes_per_batch'])} of deltas, the full checkpoints being "
        f"{_kib(steady['checkpoint_bytes_per_batch'])}); standby stage "
        f"{cost['stage_seconds']:.2f} s on average; {cost['pinned'][0]}/{cost['pinned'][1]} "
        "copies applied on the executor the job model named.",
        f"- Scale-out to 4 executors with warm-up: deferred moves per plan "
        f"{warmup.get('deferred_per_plan')}, settled after {warmup.get('settled_after_plans')} "
        f"plans, {warmup.get('moved')} tasks moved; affinity + standby "
        f"{figures[STANDBY]['scale_out']['cold']} cold task runs, affinity "
        f"{figures['affinity']['scale_out']['cold']}.",
    ]


def report(experiment: Any, figures: dict[str, Any], output_ok: bool, seconds: float) -> str:
    """The Markdown section ``spark_affinity``."""
    phases: Phases = experiment.phases
    headers = [
        "phase",
        "batches",
        "placement",
        "warm ratio",
        "warm/cold",
        "bytes restored",
        "batch time",
        "pinned",
        "models/moved",
    ]
    killed = {name: figures[name]["worker_killed"]["warm_ratio"] for name in STRATEGIES}
    verdict = "met" if (killed[STANDBY] or 0) >= TARGET else "MISSED"
    rolling = figures["affinity"]["rolling_restart"]["warm_ratio"]
    pinned = [figures[name]["pinned"] for name in PLANNED]
    lines = [*_intro(experiment.sizes, seconds), table(headers, _phase_rows(phases)), ""]
    lines += [
        f"- Worker killed: affinity + standby {_ratio(killed[STANDBY])} warm (target: at least "
        f"{TARGET:.0%} with one standby: **{verdict}**), affinity {_ratio(killed['affinity'])}, "
        f"spark default {_ratio(killed['spark default'])}. Worker back: affinity + standby "
        f"{_ratio(figures[STANDBY]['worker_back']['warm_ratio'])}, affinity "
        f"{_ratio(figures['affinity']['worker_back']['warm_ratio'])}.",
        f"- During and after the rolling restart: affinity {_ratio(rolling)} warm, spark default "
        f"{_ratio(figures['spark default']['rolling_restart']['warm_ratio'])}.",
        "- All phases after the first failure: "
        + "; ".join(
            f"{name} {_ratio(figures[name]['after_failures']['warm_ratio'])} warm, "
            f"{_kib(figures[name]['after_failures']['bytes_restored'])} restored"
            for name in STRATEGIES
        )
        + ".",
        f"- Pinned: {pinned[0]['ok']}/{pinned[0]['total']} (affinity) and "
        f"{pinned[1]['ok']}/{pinned[1]['total']} (affinity + standby) tasks ran on the executor "
        "the job model named. Output equal to the single-process reference for every batch of "
        f"the three pipelines: **{'yes' if output_ok else 'NO'}**.",
        "- The cold tasks of affinity are the ones no placement can keep warm without a copy: "
        "the killed worker's tasks (their host is gone) and the tasks balance moves onto a "
        "returning or new worker (its state is stale or absent). With a standby the first fail "
        "over to their caught-up copy, and warm-up holds the second back until the target's "
        "copy reports lag 0. A lost task fails over to its copy only into the room balance "
        "leaves its copy's processor (the grouper's rule: balance first); each processor's "
        "copies are split evenly over the others, so they all find room.",
    ]
    lines += _standby_lines(figures, phases)
    return "\n".join(lines)
