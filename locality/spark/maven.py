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
  that resolves, and runs on pyspark 4.3.0 (``tests/spark/test_kafka_connector.py``);
- :data:`SPARK35_SQL_KAFKA`: the same for pyspark 3.5 (Scala 2.12),
  ``org.apache.spark:spark-sql-kafka-0-10_2.12`` 3.5.7 with ``kafka-clients``,
  ``spark-token-provider-kafka-0-10_2.12`` and ``commons-pool2``. Maven Central serves no 3.5.9
  (pyspark's) jar of it (``dependency:get``: "not found"); 3.5.7 is its newest 3.5 release and
  runs on pyspark 3.5.9 (``tests/spark/test_spark_versions.py``, ``make spark35``, which fetches
  it).

:func:`connector_for` picks the connector of a Spark version, :func:`spark_jars_conf` the
installed pyspark's.

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
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from locality.spark.jvm import jar_dir

__all__ = [
    "JAR_SETS",
    "KAFKA_BROKER",
    "KAFKA_VERSION",
    "SPARK35_KAFKA_VERSION",
    "SPARK35_SQL_KAFKA",
    "SPARK_KAFKA_VERSION",
    "SPARK_SQL_KAFKA",
    "JarSet",
    "MavenFetchFailed",
    "connector_for",
    "fetch",
    "jar_files",
    "jars",
    "spark_jars_conf",
]

#: The Kafka broker's version (4.x runs on Java 17).
KAFKA_VERSION = "4.4.0"
#: Spark's Kafka connector: the newest served by Maven Central (none for pyspark 4.3.0).
SPARK_KAFKA_VERSION = "4.2.0"
#: Spark's Kafka connector for pyspark 3.5 (Scala 2.12): the newest 3.5 one Maven Central serves.
SPARK35_KAFKA_VERSION = "3.5.7"
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
SPARK35_SQL_KAFKA = JarSet("spark35-sql-kafka", "spark.kafka.version", SPARK35_KAFKA_VERSION)
JAR_SETS = {s.name: s for s in (KAFKA_BROKER, SPARK_SQL_KAFKA, SPARK35_SQL_KAFKA)}


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


def connector_for(spark_version: str) -> JarSet:
    """The Kafka connector's jar set for Spark ``spark_version`` (``"4.3.0"``, ``"3.5.9"``): a
    ``ValueError`` for a Spark older than 3.5 (none is kept)."""
    major, _, rest = spark_version.partition(".")
    minor = rest.partition(".")[0]
    if major.isdigit() and int(major) >= 4:
        return SPARK_SQL_KAFKA
    if (major, minor) == ("3", "5"):
        return SPARK35_SQL_KAFKA
    raise ValueError(f"no Kafka connector kept for Spark {spark_version} (3.5 or 4 needed)")


def spark_jars_conf(spark_version: str | None = None) -> str:
    """Spark's Kafka connector as a ``spark.jars`` value (comma-separated paths), for Spark
    ``spark_version`` (default: the installed pyspark's)."""
    if spark_version is None:
        try:
            spark_version = version("pyspark")
        except PackageNotFoundError:
            raise ValueError("pyspark is not installed: name the Spark version") from None
    return ",".join(str(p) for p in jar_files(connector_for(spark_version)))


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
