"""JVM jars from Maven Central: a Kafka broker's class path and Spark's Kafka connector.

Each :class:`JarSet` is a small pom in ``locality/spark/maven/`` whose dependencies are copied,
with their runtime dependencies, by ``mvn dependency:copy-dependencies`` into one directory of
the jar cache (:func:`locality.spark.jvm.jar_dir`: ``$AFFINITY_JAR_DIR``, else
``~/.cache/affinity``), named by the set, its version and a hash of the pom, e.g.
``~/.cache/affinity/kafka-broker-4.4.0-<hash>/``. No binary is committed. :func:`jars` returns
that directory, fetching it first when it is missing (once: the copy is written beside it and
renamed into place, so an interrupted fetch leaves nothing half done); a second call costs a
``stat``. ``make kafka`` (a prerequisite of ``make test`` and ``make demo``) runs
``python -m locality.spark.maven kafka-broker spark-sql-kafka``, which prints the directories.

- :data:`KAFKA_BROKER`: ``org.apache.kafka:kafka_2.13`` (the server ``kafka.Kafka`` and the
  storage tool) and an SLF4J binding for its log; run with ``java -cp '<dir>/*'``;
- :data:`SPARK_SQL_KAFKA`: ``org.apache.spark:spark-sql-kafka-0-10_2.13`` and what it needs
  beyond pyspark's own jars (``spark.jars``: :func:`spark_jars_conf`). Maven Central serves no
  connector for pyspark 4.3.0 (``dependency:get`` of 4.3.0: "Missing"); 4.2.0 is the newest
  that resolves, and runs on pyspark 4.3.0 (``tests/spark/test_kafka_connector.py``).

Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from locality.spark.jvm import jar_dir

__all__ = [
    "JAR_SETS",
    "KAFKA_BROKER",
    "KAFKA_VERSION",
    "SPARK_KAFKA_VERSION",
    "SPARK_SQL_KAFKA",
    "JarSet",
    "MavenFetchFailed",
    "fetch",
    "jar_files",
    "jars",
    "spark_jars_conf",
]

#: The Kafka broker's version (4.x runs on Java 17).
KAFKA_VERSION = "4.4.0"
#: Spark's Kafka connector: the newest served by Maven Central (none for pyspark 4.3.0).
SPARK_KAFKA_VERSION = "4.2.0"
_POMS = Path(__file__).resolve().parent / "maven"


class MavenFetchFailed(RuntimeError):
    """``mvn`` is missing, or could not fetch a jar set (the message has its output)."""


@dataclass(frozen=True)
class JarSet:
    """One pom of ``locality/spark/maven/`` and the version its property is set to."""

    name: str
    version_property: str
    version: str

    @property
    def pom(self) -> Path:
        return _POMS / f"{self.name}.xml"

    def directory(self) -> Path:
        """Where the set's jars are cached (whether fetched yet or not)."""
        digest = hashlib.sha256(self.pom.read_bytes()).hexdigest()[:12]
        return jar_dir() / f"{self.name}-{self.version}-{digest}"


KAFKA_BROKER = JarSet("kafka-broker", "kafka.version", KAFKA_VERSION)
SPARK_SQL_KAFKA = JarSet("spark-sql-kafka", "spark.kafka.version", SPARK_KAFKA_VERSION)
JAR_SETS = {s.name: s for s in (KAFKA_BROKER, SPARK_SQL_KAFKA)}


def fetch(jar_set: JarSet) -> Path:
    """Copy the set's jars from Maven Central (through ``~/.m2``) into its cache directory."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenFetchFailed(
            f"mvn not found: fetching {jar_set.name} {jar_set.version} from Maven Central needs "
            "Maven (apt-get install maven)"
        )
    target = jar_set.directory()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    command = [mvn, "-q", "-B", "-f", str(jar_set.pom), "dependency:copy-dependencies"]
    command += [f"-D{jar_set.version_property}={jar_set.version}", "-DincludeScope=runtime"]
    command += [f"-DoutputDirectory={partial}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not any(partial.glob("*.jar")):
        shutil.rmtree(partial, ignore_errors=True)
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise MavenFetchFailed(
            f"mvn could not fetch {jar_set.name} {jar_set.version} ({jar_set.pom}):\n{output}"
        )
    try:
        os.rename(partial, target)
    except OSError:  # another process put it in place first
        shutil.rmtree(partial, ignore_errors=True)
        if not target.is_dir():
            raise
    return target


def jars(jar_set: JarSet) -> Path:
    """The directory holding the set's jars, fetched first when it is missing."""
    target = jar_set.directory()
    return target if target.is_dir() else fetch(jar_set)


def jar_files(jar_set: JarSet) -> list[Path]:
    """The set's jars (fetched when missing), sorted."""
    return sorted(jars(jar_set).glob("*.jar"))


def spark_jars_conf() -> str:
    """Spark's Kafka connector as a ``spark.jars`` value (comma-separated paths)."""
    return ",".join(str(p) for p in jar_files(SPARK_SQL_KAFKA))


def main(argv: list[str]) -> int:
    """``python -m locality.spark.maven NAME...``: fetch the named sets, print directories."""
    unknown = [name for name in argv if name not in JAR_SETS]
    if not argv or unknown:
        sys.stderr.write(f"usage: python -m locality.spark.maven {{{','.join(JAR_SETS)}}}...\n")
        return 2
    try:
        for name in argv:
            sys.stdout.write(f"{jars(JAR_SETS[name])}\n")
    except MavenFetchFailed as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
