"""The folders executors get on their PYTHONPATH: the folder *above* a package, the folder *of*
a one-file module (issue: a user's single-file module failed on the executors with
ModuleNotFoundError), the top package's parent for a module inside a package."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from coordinator.launchers.cluster import executor_pythonpath, import_root


@pytest.fixture
def user_code(tmp_path: Path) -> Path:
    (tmp_path / "single_counts.py").write_text("VALUE = 1\n")
    package = tmp_path / "jobs_pkg" / "inner"
    package.mkdir(parents=True)
    (tmp_path / "jobs_pkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "steps.py").write_text("VALUE = 2\n")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in ("single_counts", "jobs_pkg", "jobs_pkg.inner", "jobs_pkg.inner.steps"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize(
    "name", ["single_counts", "jobs_pkg", "jobs_pkg.inner", "jobs_pkg.inner.steps"]
)
def test_the_import_root_is_where_the_module_imports_from(user_code: Path, name: str) -> None:
    module = importlib.import_module(name)
    assert import_root(module) == user_code.resolve()


def test_the_executors_path_holds_the_module_folder_and_affinitys(user_code: Path) -> None:
    module = importlib.import_module("single_counts")
    folders = executor_pythonpath(module).split(":")
    assert str(user_code.resolve()) in folders
    assert str(Path(__file__).resolve().parents[2]) in folders  # coordinator's and locality's
