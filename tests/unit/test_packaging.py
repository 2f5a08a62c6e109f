"""pyproject.toml as the build backend reads it (issue 26): an SPDX license string, a setuptools
that understands it, and no warning from setuptools' reading of any of our pyproject files (a
warning there is a banner on every `make test`)."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = [ROOT, ROOT / "examples" / "grouper_plugin", ROOT / "examples" / "pipeline"]


def test_license_is_an_spdx_expression_and_the_build_needs_a_setuptools_that_reads_it() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "Apache-2.0"
    (setuptools,) = [
        Requirement(r) for r in data["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert not setuptools.specifier.contains(Version("77.0.2"))  # PEP 639 strings: 77.0.3+
    assert setuptools.specifier.contains(Version("77.0.3"))


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_setuptools_reads_the_pyproject_without_a_warning(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the build backend does first with pyproject.toml, with every warning recorded: a
    license table (the old form) gives a SetuptoolsDeprecationWarning here."""
    monkeypatch.chdir(project)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), "pyproject.toml")
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    if project == ROOT:
        assert dist.metadata.license_expression == "Apache-2.0"
