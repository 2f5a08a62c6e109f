"""The project's JVM classes for Spark: their build, and the check that a session has them.

Small classes (source in ``locality/spark/java/affinity/spark/``) do what PySpark cannot:

- ``affinity.spark.PinnedRDD``: wraps a shuffled RDD one to one and gives each partition the
  preferred location the job model names (:mod:`locality.spark.pinned_shuffle`);
- ``affinity.spark.KeyHash``: the key hash of ``stateful_foreach_batch`` as a SQL function, so
  rows are routed to their task on the executors (exactly ``groupers.keys.stable_hash`` of the
  key's JSON text);
- ``affinity.spark.PinnedKafkaProvider`` (``readStream.format("affinity-kafka")``, registered by
  ``java/META-INF/services``): Spark's own Kafka source, its input partitions preferring the
  executors ``affinity.spark.KafkaPlacement`` names (:mod:`locality.spark.kafka_source`).

Where the jar comes from (:func:`spark_jar`; ``session_conf()``, ``affinity spark jar``, ``make
jar`` and the tests call it):

- an installed wheel carries it, compiled when the wheel was built
  (``build_support/affinity_build.py``): ``locality/spark/jars/affinity-spark-<spark
  version>.jar`` (:func:`packaged_jar`), taken when its Spark major version is the installed
  pyspark's; no ``javac`` needed. For a pyspark of another major version (the wheel's jar is
  compiled against Spark 4, Scala 2.13; Spark 3.5 runs Scala 2.12) it is compiled as below;
- a source checkout has no ``jars`` folder: :func:`build_jar` compiles the classes with ``javac
  --release 17`` against the jars of the installed pyspark into :func:`jar_dir`
  (``$AFFINITY_JAR_DIR``, else ``~/.cache/affinity``) as ``affinity-spark-<spark
  version>-<source hash>.jar``, once (rebuilt when the sources or the Spark version change).

No binary is committed. A session must be started with the jar on its class
path (``spark.jars``, before the first ``getOrCreate()``): :func:`session_conf` gives the
setting, :func:`require_classes` says exactly that when a session lacks it, or when it is a
Spark Connect session (no JVM to reach).

``python -m locality.spark.jvm`` builds the jar and prints its path. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

__all__ = [
    "JAR_CONF_KEY",
    "MIN_PYSPARK",
    "JVM_CLASSES",
    "KEY_HASH_FUNCTION",
    "JvmClassesMissing",
    "build_jar",
    "PACKAGED_JARS",
    "jar_dir",
    "packaged_jar",
    "packaged_jar_name",
    "register_key_hash",
    "require_classes",
    "resource_files",
    "session_conf",
    "source_files",
    "spark_jar",
]

#: The classes the jar holds (``spark._jvm`` names).
JVM_CLASSES = (
    "affinity.spark.PinnedRDD",
    "affinity.spark.KeyHash",
    "affinity.spark.KafkaPlacement",
)
#: The Spark setting that puts the jar on the driver's and the executors' class paths.
JAR_CONF_KEY = "spark.jars"
#: The SQL function :func:`register_key_hash` registers (``affinity.spark.KeyHash``).
KEY_HASH_FUNCTION = "affinity_key_hash"
_SOURCES = Path(__file__).resolve().parent / "java"
#: The oldest pyspark affinity runs on (``pyproject.toml``'s floor; README "Spark versions").
MIN_PYSPARK = (3, 5)
#: Where a wheel carries its jar (absent in a source checkout).
PACKAGED_JARS = Path(__file__).resolve().parent / "jars"


class JvmClassesMissing(RuntimeError):
    """The Spark session cannot reach the project's JVM classes (the message says the fix)."""


def source_files() -> list[Path]:
    """The Java sources, sorted."""
    return sorted(_SOURCES.rglob("*.java"))


def resource_files() -> list[Path]:
    """The jar's other files (``META-INF/services``: the ``affinity-kafka`` source's
    registration), sorted; each goes into the jar at its path from ``META-INF`` on."""
    return sorted(p for p in _SOURCES.joinpath("META-INF").rglob("*") if p.is_file())


def jar_dir() -> Path:
    """Where jars are built: ``$AFFINITY_JAR_DIR``, else ``~/.cache/affinity``."""
    configured = os.environ.get("AFFINITY_JAR_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "affinity"


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def _jar_name() -> str:
    digest = hashlib.sha256()
    for path in [*source_files(), *resource_files()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"affinity-spark-{_spark_version()}-{digest.hexdigest()[:12]}.jar"


def build_jar(destination: Path | None = None) -> Path:
    """Compile the classes against the installed pyspark's jars into a jar; returns its path.

    Raises :class:`JvmClassesMissing` when ``javac`` is missing or the compilation fails
    (with the compiler's output)."""
    javac = shutil.which("javac")
    if javac is None:
        raise JvmClassesMissing(
            "javac not found: building affinity's Spark jar needs a JDK 17+ (apt-get install "
            "openjdk-17-jdk-headless)"
        )
    target = destination or jar_dir() / _jar_name()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="affinity-jar-") as work:
        classes = Path(work) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-cp", f"{_pyspark_jars()}/*"]
        command += ["-d", str(classes), *map(str, source_files())]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JvmClassesMissing(f"javac failed:\n{done.stderr or done.stdout}")
        partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
            for path in resource_files():
                jar.write(path, "/".join(path.parts[path.parts.index("META-INF") :]))
        os.replace(partial, target)
    return target


def packaged_jar_name(spark_version: str | None = None) -> str:
    """The name of a wheel's jar compiled against pyspark ``spark_version`` (the installed one)."""
    return f"affinity-spark-{spark_version or _spark_version()}.jar"


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def _packaged() -> dict[str, Path]:
    """The jars an installed wheel carries, by the pyspark version each is compiled against."""
    if not PACKAGED_JARS.is_dir():
        return {}
    jars = sorted(PACKAGED_JARS.glob("affinity-spark-*.jar"))
    return {jar.name.removeprefix("affinity-spark-").removesuffix(".jar"): jar for jar in jars}


def packaged_jar() -> Path | None:
    """The jar an installed wheel carries for the installed pyspark (same Spark major version:
    one Scala binary version); None in a source checkout, or when the wheel has none for it."""
    installed = _major(_spark_version())
    found = [jar for version, jar in _packaged().items() if _major(version) == installed]
    return found[-1] if found else None


def spark_jar() -> Path:
    """affinity's jar for the installed pyspark: the one an installed wheel carries
    (:func:`packaged_jar`), else the one built from the sources (a source checkout, or a pyspark
    whose major version the wheel has no jar for), compiled first when it is missing."""
    installed = _spark_version()
    if tuple(int(part) for part in installed.split(".")[:2]) < MIN_PYSPARK:
        raise JvmClassesMissing(
            f"affinity needs pyspark>={'.'.join(map(str, MIN_PYSPARK))}; the installed "
            f"pyspark is {installed}"
        )
    packaged = packaged_jar()
    if packaged is not None:
        return packaged
    target = jar_dir() / _jar_name()
    if target.is_file():
        return target
    try:
        return build_jar(target)
    except JvmClassesMissing as exc:
        if not _packaged():
            raise
        raise JvmClassesMissing(
            f"affinity's packaged Spark jar is for pyspark {', '.join(_packaged())}, the "
            f"installed pyspark is {_spark_version()}: it compiles its own, and {exc}"
        ) from None


def session_conf() -> dict[str, str]:
    """The setting a SparkSession needs for affinity's JVM classes (builds the jar if needed):
    ``SparkSession.builder.config(map=session_conf())`` before the first ``getOrCreate()``."""
    return {JAR_CONF_KEY: str(spark_jar())}


def require_classes(spark: Any) -> None:
    """Raise :class:`JvmClassesMissing`, naming the fix, unless ``spark`` (a SparkSession) is a
    classic session whose JVM has the project's classes."""
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None)
    if jvm is None or not hasattr(spark, "_jsparkSession"):
        raise JvmClassesMissing(
            "stateful_foreach_batch needs a classic SparkSession with a JVM: a Spark Connect "
            "session has no JVM handle to pin tasks with (start the application with a classic "
            f"session, and {JAR_CONF_KEY} set to affinity's jar: `affinity spark jar` prints it)"
        )
    from py4j.java_gateway import JavaClass

    for name in JVM_CLASSES:
        target: Any = jvm
        for part in name.split("."):
            target = getattr(target, part)
        if not isinstance(target, JavaClass):
            raise JvmClassesMissing(
                f"the Spark session does not have affinity's JVM class {name}: start it with "
                f"{JAR_CONF_KEY}={_suggested_jar()} (SparkSession.builder.config("
                f"'{JAR_CONF_KEY}', ...) before the first getOrCreate(), or spark-submit --jars; "
                "`affinity spark jar` builds it and prints its path)"
            )


def register_key_hash(spark: Any) -> str:
    """Register ``affinity.spark.KeyHash`` in ``spark`` as the SQL function
    :data:`KEY_HASH_FUNCTION` (over ``struct(<key columns>)``, a non-negative long); returns
    its name."""
    from pyspark.sql.types import LongType

    spark.udf.registerJavaFunction(KEY_HASH_FUNCTION, "affinity.spark.KeyHash", LongType())
    return KEY_HASH_FUNCTION


def _suggested_jar() -> str:
    packaged = packaged_jar()
    if packaged is not None:
        return str(packaged)
    target = jar_dir() / _jar_name()
    return str(target) if target.is_file() else f"{target} (not built yet)"


if __name__ == "__main__":  # pragma: no cover
    try:
        sys.stdout.write(f"{spark_jar()}\n")
    except JvmClassesMissing as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
