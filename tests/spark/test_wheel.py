"""A Spark user installs affinity from a wheel, on a machine with a JRE and no ``javac``.

The wheel is built as ``make dist`` builds it (``python -m build``: an sdist, then the wheel from
it, its Spark jar compiled at build time), installed with ``pip install --no-deps`` into a fresh
virtualenv whose other packages (pyspark, pandas, ...) are this test environment's (a ``.pth``
line: no 500 MB download per run; they are not affinity), and the README's quick start runs in
it as written: ``affinity dev up`` from the wheel, a stateful query whose tasks are pinned
(``stateful_foreach_batch``: the jar's PinnedRDD and KeyHash), ``affinity dev down``. ``PATH``
has every program of this one's but ``javac``, and the jar cache is empty: only the jar the
wheel carries can serve.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from docs_snippets import snippet

from coordinator.dev import DevError, dev_down

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = {"javac"}


def path_without_javac(links: Path) -> str:
    """A folder of links to every program on ``PATH`` but ``javac`` (and no virtualenv's bin)."""
    links.mkdir()
    for folder in map(Path, os.environ.get("PATH", "").split(os.pathsep)):
        if not folder.is_dir() or (folder.parent / "pyvenv.cfg").exists():
            continue
        for program in folder.iterdir():
            link = links / program.name
            if program.name not in HIDDEN and not link.exists():
                link.symlink_to(program)
    return str(links)


def build_wheel(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("affinity_coordinator-*.whl")
    return wheel


def fresh_venv(where: Path, wheel: Path) -> Path:
    """A virtualenv with the wheel installed; its dependencies come from this environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    return where


def test_an_installed_wheel_runs_the_quick_start_without_javac(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    jars = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".jar")]
    assert jars == [f"locality/spark/jars/affinity-spark-{pyspark_version()}.jar"]

    venv = fresh_venv(tmp_path / "venv", wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{path_without_javac(tmp_path / 'bin')}"
    env["AFFINITY_JAR_DIR"] = str(tmp_path / "empty-jar-cache")
    probe = (
        "import shutil, coordinator, locality.spark.jvm as jvm;"
        "print(shutil.which('javac'), coordinator.__file__, jvm.session_conf()['spark.jars'])"
    )
    found = subprocess.run(
        [venv / "bin" / "python", "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr
    javac, package, jar = found.stdout.split()
    assert javac == "None"
    assert Path(package).is_relative_to(venv) and Path(jar).is_relative_to(venv)
    printed = subprocess.run(
        ["affinity", "spark", "jar"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert printed.stdout.strip() == jar

    work = tmp_path / "work"
    work.mkdir()
    try:
        done = subprocess.run(
            ["bash", "-c", snippet("README.md", "quickstart")],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        with contextlib.suppress(DevError):  # only if the block's own `down` did not run
            dev_down(work / ".affinity-dev")
    lines = done.stdout.splitlines()
    assert "0 [('a', 2), ('b', 1)]" in lines, done.stdout + done.stderr[-3000:]
    assert "1 [('b', 2), ('c', 1)]" in lines
    assert lines[-1] == "affinity dev: down (4 daemon(s) stopped)"
    assert done.returncode == 0
    assert not Path(env["AFFINITY_JAR_DIR"]).exists() or not any(
        Path(env["AFFINITY_JAR_DIR"]).glob("*.jar")
    )


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)
