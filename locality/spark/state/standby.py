"""Standby copies of a task's state: another host's local copy, brought up to each commit.

With ``standby_replicas`` in the job's grouper options, a job model names for each task one or
more standby processors (executors) besides its active one. After a micro-batch is committed,
the driver runs one pinned Spark task per standby copy (:func:`refresh_on_executor`) on the
standby's executor. It brings that host's local copy of the task (the same
``<local_dir>/<scope>/<location>/`` mirror an active task there reads, :mod:`.store`) to the
committed batch:

- **incremental** (the usual case): the copy is at the previous commit (its record names that
  batch and token, and ``tasks/<task>.standby.json`` the files it held then): the durable
  files beyond those are the batch's checkpoint deltas (and any base a compaction wrote); they
  are copied (replacing a local file of the same name, which only a failed attempt that ran
  here as an active can have left), and the files durable storage no longer has (compacted
  away) are deleted;
- **full**: otherwise (a new copy, a copy that missed a commit, one that ran as an active
  since) every file of the task's key groups is copied afresh.

Then the copy's record names the commit's batch and token, so if the task fails over to this
host (its active's host lost), :func:`~locality.spark.state.store.open_task_state` finds it
``local``: warm, nothing restored. A refresh reads only the files it copies; the bytes it
copies are what a standby costs (:class:`StandbyOutcome`). Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from locality.spark.state.objectspace import DirectoryStorage
from locality.spark.state.store import StoreSpec, local_root, meta_path, read_meta, write_meta

__all__ = ["StandbyOutcome", "StandbyWork", "refresh_on_executor", "refresh_standby"]


@dataclass(frozen=True)
class StandbyWork:
    """Bring a standby copy of ``task`` to the commit ``(batch, token)``; ``previous``: the
    commit before it (None: there was none)."""

    task: str
    batch: int
    token: str
    key_groups: tuple[int, ...]
    previous: tuple[int, str] | None


@dataclass(frozen=True)
class StandbyOutcome:
    """What one refresh did, and where."""

    task: str
    batch: int
    mode: str  # "current" (nothing to do) | "incremental" | "full"
    bytes_applied: int
    files_applied: int
    files_dropped: int
    location: str
    seconds: float


def refresh_standby(spec: StoreSpec, work: StandbyWork, location: str) -> StandbyOutcome:
    """Bring this host's copy of ``work.task`` to ``work.batch`` (see the module docstring)."""
    began = time.perf_counter()
    root = local_root(spec, location)
    groups = tuple(sorted(work.key_groups))
    mirror = DirectoryStorage(root / "keygroups", fsync=False)
    mode, trusted = _mode(root, work, groups)
    applied = dropped = size = 0
    if mode != "current":
        if mode == "full":
            meta_path(root, work.task).unlink(missing_ok=True)
            for group in groups:
                shutil.rmtree(mirror.folder(group), ignore_errors=True)
        files: dict[int, list[str]] = {}
        for group in groups:
            known = set(trusted.get(group, ()))
            copied, copied_bytes, deleted, files[group] = _sync_group(spec, mirror, group, known)
            applied, size, dropped = applied + copied, size + copied_bytes, dropped + deleted
        _write_files(root, work, files)
        write_meta(root, work.task, work.batch, work.token, groups)
    return StandbyOutcome(
        work.task, work.batch, mode, size, applied, dropped, location, time.perf_counter() - began
    )


def refresh_on_executor(name: str, payload: tuple[StoreSpec, StandbyWork]) -> StandbyOutcome:
    """``run_pinned``'s function: the refresh at this executor's location id (``name`` is the
    Spark task's, ``<task>@<processor>``)."""
    from locality.spark.provider import SparkExecutorLocationIdProvider

    spec, work = payload
    assert name.startswith(f"{work.task}@"), (name, work.task)
    return refresh_standby(spec, work, SparkExecutorLocationIdProvider().location_id())


def _files_path(root: Path, task: str) -> Path:
    return meta_path(root, task).with_suffix(".standby.json")


def _write_files(root: Path, work: StandbyWork, files: Mapping[int, list[str]]) -> None:
    """Record which files the copy holds at ``(work.batch, work.token)``."""
    document = {
        "batch": work.batch,
        "token": work.token,
        "files": {str(g): n for g, n in files.items()},
    }
    path = _files_path(root, work.task)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


def _read_files(root: Path, work: StandbyWork) -> dict[int, list[str]] | None:
    """The files the copy held at ``work.previous`` (None: not recorded for that commit)."""
    try:
        document = json.loads(_files_path(root, work.task).read_bytes())
        if work.previous != (int(document["batch"]), str(document["token"])):
            return None
        return {int(g): [str(n) for n in names] for g, names in document["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _mode(
    root: Path, work: StandbyWork, groups: tuple[int, ...]
) -> tuple[str, dict[int, list[str]]]:
    """("current" | "incremental" | "full", the files trusted at the previous commit)."""
    held_groups, versions = read_meta(root, work.task)
    if held_groups == groups and versions and versions[0] == (work.batch, work.token):
        return "current", {}
    trusted = _read_files(root, work) if held_groups == groups else None
    if trusted is None or not versions or versions[0] != work.previous:
        return "full", {}
    return "incremental", trusted


def _sync_group(
    spec: StoreSpec, mirror: DirectoryStorage, group: int, trusted: set[str]
) -> tuple[int, int, int, list[str]]:
    """Copy the durable files not among the ``trusted`` ones (a local file of that name, left
    by a failed attempt, is replaced), drop the local files durable storage no longer has;
    (files copied, bytes copied, files dropped, the files held now)."""
    durable = set(spec.storage.list_files(group))
    local = set(mirror.list_files(group))
    copied = size = 0
    for name in sorted(durable - (trusted & local)):
        data = spec.storage.read_file(group, name)
        mirror.delete_file(group, name)
        mirror.create_file(group, name, data)
        copied, size = copied + 1, size + len(data)
    for name in sorted(local - durable):
        mirror.delete_file(group, name)
    return copied, size, len(local - durable), sorted(durable)
