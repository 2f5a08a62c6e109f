"""``SparkDriverMember.in_force`` when a batch begins before the application's executors have
registered with the driver (a busy machine: each executor is a JVM its worker launches): it
syncs again while none is registered, so they join within the same timeout; with executors
registered it waits for their model without syncing; with none ever, ``NotInForce`` says so.
The registrar and the member group are stand-ins (no Spark, no ZooKeeper)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from coordinator.member import spark_driver
from coordinator.member.spark_driver import NotInForce, SparkDriverMember
from locality.spark import SparkExecutor

TASKS = {"Partition 0": object(), "Partition 1": object()}


class Registrar:
    """Executors that are live (and registered by a sync) from the ``appear_at``-th sync on."""

    def __init__(self, appear_at: int | None) -> None:
        self.appear_at = appear_at
        self.syncs = 0
        self._registered: dict[str, SparkExecutor] = {}

    @property
    def registrations(self) -> dict[str, SparkExecutor]:
        return dict(self._registered)

    def executors(self) -> list[SparkExecutor]:
        live = self.appear_at is not None and self.syncs >= self.appear_at
        return [SparkExecutor("0", "127.0.0.2")] if live else []

    def sync(self) -> None:
        self.syncs += 1
        self._registered = {f"app-exec-{e.executor_id}": e for e in self.executors()}


class Group:
    """Every registered executor runs version 1 (both tasks on the first), once ``done``."""

    def __init__(self, registrar: Registrar, done: bool = True) -> None:
        self.registrar, self.done = registrar, done

    def running(self) -> dict[str, tuple[int | None, dict[str, Any]]]:
        version = 1 if self.done else None
        return {pid: (version, TASKS) for pid in self.registrar.registrations}

    def standbys(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        return {pid: (1, ()) for pid in self.registrar.registrations}


def driver(registrar: Registrar, group: Group) -> SparkDriverMember:
    member = SparkDriverMember.__new__(SparkDriverMember)  # no Spark context, no ZooKeeper
    member._changed = threading.Condition()
    member.registrar = registrar  # type: ignore[assignment]
    member.group = group  # type: ignore[assignment]
    return member


@pytest.fixture(autouse=True)
def quick_resync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_driver, "RESYNC_S", 0.05)


def test_executors_that_register_late_join_within_the_timeout() -> None:
    registrar = Registrar(appear_at=3)
    registrar.sync()  # the batch's own sync: no executor yet
    assignment = driver(registrar, Group(registrar)).in_force(30.0, tuple(TASKS))
    assert registrar.syncs == 3  # synced again until they came, then stopped
    assert assignment.version == 1
    assert dict(assignment.task_to_processor) == {t: "app-exec-0" for t in TASKS}


def test_registered_executors_wait_for_their_model_without_syncing_again() -> None:
    registrar = Registrar(appear_at=0)
    registrar.sync()
    with pytest.raises(NotInForce, match=r"for \['app-exec-0'\] within 0s") as caught:
        driver(registrar, Group(registrar, done=False)).in_force(0.4)
    assert registrar.syncs == 1
    assert "no executor registered" not in str(caught.value)


def test_no_executor_ever_is_named_when_the_timeout_runs_out() -> None:
    registrar = Registrar(appear_at=None)
    registrar.sync()
    with pytest.raises(NotInForce, match=r"no executor registered \(live executors: \[\]\)"):
        driver(registrar, Group(registrar)).in_force(0.5)
    assert registrar.syncs > 2  # it kept looking
