"""The build backend of affinity-coordinator: setuptools' own, plus affinity's Spark jar in every
wheel (``make dist``, ``python -m build``).

- :func:`get_requires_for_build_wheel` asks for a pyspark (:data:`SPARK_FOR_THE_JAR`) besides
  setuptools: the jar's classes compile against its jars. Only a wheel's build needs it; the
  editable install of a source checkout (``make venv``) and the sdist do not.
- :class:`BuildPy` (setup.py's ``build_py``) compiles the Java sources of
  ``locality/spark/java`` with ``javac --release 17`` against that pyspark's jars, exactly as
  :func:`locality.spark.jvm.build_jar` does in a source checkout, into the wheel's
  ``locality/spark/jars/affinity-spark-<pyspark version>.jar``; at run time
  :func:`locality.spark.jvm.spark_jar` takes that jar, so an installed wheel needs no ``javac``.
  A wheel build without a JDK fails, naming it; an editable install compiles nothing.

Standard library and setuptools only; ``locality/spark/jvm.py`` is loaded from its file (the
project itself is not importable while it builds).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook of setuptools' backend)
from setuptools.command.build_py import build_py

#: The pyspark a wheel's jar is compiled against (Spark 4 lines are binary compatible for the
#: jar's classes: RDD, UDF1, Row; Spark 3 runs Scala 2.12, whose collections the classes do not
#: use).
SPARK_FOR_THE_JAR = "pyspark>=4.0,<5"
ROOT = Path(__file__).resolve().parents[1]


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return [*_setuptools.get_requires_for_build_wheel(config_settings), SPARK_FOR_THE_JAR]


def _jvm() -> ModuleType:
    """``locality/spark/jvm.py``, loaded from its file (standard library only)."""
    spec = importlib.util.spec_from_file_location(
        "_affinity_build_jvm", ROOT / "locality" / "spark" / "jvm.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPy(build_py):
    """setuptools' ``build_py``, then affinity's jar into the build (not in editable mode)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        jvm = _jvm()
        jars = Path(self.build_lib, "locality", "spark", jvm.PACKAGED_JARS.name)
        destination = jars / jvm.packaged_jar_name()
        try:
            jvm.build_jar(destination)
        except jvm.JvmClassesMissing as exc:
            raise SystemExit(f"error: a wheel of affinity carries its Spark jar: {exc}") from None
        print(f"affinity: built {destination.name} into the wheel")
