# affinity: `make test` (everything CI runs) and `make demo` (the main job).
# Each target does its own set-up on a fresh machine: Debian's zookeeper package, a virtualenv
# with the project and its test extras, and (for the chart tests) the helm binary.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PKGS   := coordinator groupers metadata locality
ZK_JAR := /usr/share/java/zookeeper.jar

.PHONY: test demo lint typecheck unit venv spark35 zookeeper kafka helm chromium promtool jar dist bench clean

test: venv zookeeper kafka helm chromium promtool jar lint typecheck
	$(PY) -m pytest -q -p no:cacheprovider
	@$(MAKE) --no-print-directory spark35

# The oldest Spark pyproject.toml allows (pyspark 3.5, Scala 2.12), smoke-tested in a virtualenv
# of its own: the README's quick start, one pinned stateful query through an executor kill and
# one over format("affinity-kafka") on the real broker (affinity's jar compiled against its jars
# on first use; the broker's jars and Spark's Kafka connector for Scala 2.12 fetched as in
# `make kafka`). About 2.5 minutes once installed.
SPARK35       := .venv-spark35
SPARK35_TESTS := tests/spark/test_quickstart.py tests/spark/test_spark_versions.py

spark35: $(SPARK35)/.installed zookeeper
	$(call apt_install,mvn,maven,Kafka broker's and Spark connector's jars)
	@$(SPARK35)/bin/python -m locality.spark.maven kafka-broker spark35-sql-kafka >/dev/null
	$(SPARK35)/bin/python -m pytest -q -p no:cacheprovider $(SPARK35_TESTS)

$(SPARK35)/.installed: export PYTHONWARNINGS := ignore:Editable installation
$(SPARK35)/.installed: export PIP_DISABLE_PIP_VERSION_CHECK := 1
$(SPARK35)/.installed: pyproject.toml examples/pipeline/pyproject.toml
	$(PYTHON) -m venv $(SPARK35)
	$(SPARK35)/bin/python -m pip install -q --upgrade pip
	$(SPARK35)/bin/python -m pip install -q -e '.[spark]' 'pyspark>=3.5,<3.6' \
	  'pytest>=8' 'pytest-timeout>=2.3' -e examples/pipeline
	touch $@

demo: venv zookeeper kafka jar
	$(VENV)/bin/affinity demo

# affinity's Spark jar (locality/spark/java: the pinned shuffle's PinnedRDD, the key hash),
# compiled with javac against the installed pyspark's jars into ~/.cache/affinity; no binary
# is committed. Rebuilt only when the sources or the Spark version change.
jar: venv
	@$(PY) -m locality.spark.jvm >/dev/null

# An sdist and a wheel in dist/; the wheel carries affinity's Spark jar, compiled at build time
# (build_support/affinity_build.py) against the venv's pyspark, so `pip install` of it needs no
# javac. `python -m build` does the same in an isolated environment (it installs a pyspark 4).
dist: venv
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .

# Maven Central's jars of a Kafka broker (KRaft) and of Spark's Kafka connector, copied by mvn
# (poms in locality/spark/maven/, Debian's maven package installed when missing) into
# ~/.cache/affinity (see `jar`); no binary is committed. The first fetch takes about 10-20 s;
# once cached, a stat.
kafka: venv
	$(call apt_install,mvn,maven,Kafka broker's and Spark connector's jars)
	@$(PY) -m locality.spark.maven kafka-broker spark-sql-kafka >/dev/null

venv: $(VENV)/.installed

# Quiet installs: for every editable install setuptools says "Editable installation." (a warning
# that is information only, which pip shows for a local build): that message alone is filtered
# out, any other warning still shows. The venv's pip was just upgraded: no version check.
$(VENV)/.installed: export PYTHONWARNINGS := ignore:Editable installation
$(VENV)/.installed: export PIP_DISABLE_PIP_VERSION_CHECK := 1
$(VENV)/.installed: pyproject.toml examples/grouper_plugin/pyproject.toml examples/pipeline/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	$(PY) -m pip install -q -e examples/grouper_plugin -e examples/pipeline
	touch $@

zookeeper:
	@if [ ! -f $(ZK_JAR) ]; then \
	  echo "installing Debian's zookeeper package (needed by the ZooKeeper tests)"; \
	  if [ "$$(id -u)" != 0 ]; then echo "error: $(ZK_JAR) is missing and installing it needs root (apt-get install zookeeper)" >&2; exit 1; fi; \
	  apt-get update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq zookeeper >/dev/null \
	    || { echo "error: could not install Debian's zookeeper package; install it by hand (apt-get install zookeeper)" >&2; exit 1; }; \
	fi
	@test -f $(ZK_JAR) || { echo "error: $(ZK_JAR) still missing after install" >&2; exit 1; }

# Debian packages some tests drive: chromium (the status page test) and promtool (the chart's
# PrometheusRule, from the prometheus package). Installed when missing, as zookeeper above.
define apt_install
	@if ! command -v $(1) >/dev/null 2>&1; then \
	  echo "installing Debian's $(2) package (needed by the $(3))"; \
	  if [ "$$(id -u)" != 0 ]; then echo "error: $(1) is missing and installing it needs root (apt-get install $(2))" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $(2) >/dev/null \
	    || { echo "error: could not install Debian's $(2) package; install it by hand (apt-get install $(2))" >&2; exit 1; }; \
	fi
	@command -v $(1) >/dev/null || { echo "error: $(1) still missing after install" >&2; exit 1; }
endef

chromium:
	$(call apt_install,chromium,chromium,status page test)

promtool:
	$(call apt_install,promtool,prometheus,chart's alert rules test)

helm: venv
	PYTHON=$(PY) scripts/install-helm.sh

# ruff, and the dependency rule of DESIGN.md: import-linter contracts in pyproject.toml
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check $(PKGS) tests benchmarks examples
	$(VENV)/bin/lint-imports --no-cache

typecheck: venv
	$(VENV)/bin/mypy $(PKGS)
	MYPYPATH=examples/pipeline:examples/grouper_plugin $(VENV)/bin/mypy -p affinity_pipeline -p affinity_example_grouper

bench: venv zookeeper
	$(PY) benchmarks/groupers.py

clean:
	rm -rf $(VENV) $(SPARK35) .mypy_cache .ruff_cache .pytest_cache .hypothesis dist build
