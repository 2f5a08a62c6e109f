"""setup.py: only to give setuptools affinity's ``build_py`` (it compiles the Spark jar into the
wheel: build_support/affinity_build.py, the build backend, which pyproject.toml names); the
project's metadata is pyproject.toml's."""

from affinity_build import BuildPy
from setuptools import setup

setup(cmdclass={"build_py": BuildPy})
