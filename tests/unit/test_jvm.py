"""affinity's JVM classes (locality.spark.jvm): built with javac against the installed
pyspark's jars into a jar named by the Spark version and the sources' hash, rebuilt only when
those change; no javac, or a session without a JVM (Spark Connect), is one clear error."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from locality.spark import jvm


def test_the_jar_is_built_once_per_sources_and_spark_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AFFINITY_JAR_DIR", str(tmp_path))
    jar = jvm.spark_jar()
    assert jar.parent == tmp_path and jar.name.startswith("affinity-spark-")
    names = set(zipfile.ZipFile(jar).namelist())
    assert {"affinity/spark/PinnedRDD.class", "affinity/spark/KeyHash.class"} <= names
    # the pinned Kafka source is registered under its format name by the class the jar holds
    service = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
    registered = zipfile.ZipFile(jar).read(service).decode().split()
    assert registered == ["affinity.spark.PinnedKafkaProvider"]
    assert "affinity/spark/PinnedKafkaProvider.class" in names
    built = jar.stat().st_mtime_ns
    assert jvm.spark_jar() == jar and jar.stat().st_mtime_ns == built  # not built again
    assert jvm.session_conf() == {"spark.jars": str(jar)}

    # other sources: another jar name (a stale jar is never used)
    edited = tmp_path / "src" / "Extra.java"
    edited.parent.mkdir()
    edited.write_text("package affinity.spark; final class Extra {}\n")
    sources = jvm.source_files()
    monkeypatch.setattr(jvm, "source_files", lambda: [*sources, edited])
    assert jvm.spark_jar() != jar
    monkeypatch.setattr(jvm, "source_files", lambda: sources)
    resource = tmp_path / "src" / "META-INF" / "services" / "x"  # a resource: another jar too
    resource.parent.mkdir(parents=True)
    resource.write_text("affinity.spark.Extra\n")
    resources = jvm.resource_files()
    monkeypatch.setattr(jvm, "resource_files", lambda: [*resources, resource])
    assert jvm.spark_jar() != jar


def test_no_javac_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    with pytest.raises(jvm.JvmClassesMissing, match=r"javac not found.*JDK 17"):
        jvm.build_jar(tmp_path / "x.jar")


def test_a_session_without_a_jvm_is_refused_with_the_fix() -> None:
    class ConnectLike:  # what a Spark Connect session lacks: sparkContext, _jsparkSession
        conf = None

    with pytest.raises(
        jvm.JvmClassesMissing, match=r"Spark Connect session has no JVM.*spark\.jars"
    ):
        jvm.require_classes(ConnectLike())


def test_affinity_spark_jar_prints_the_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main

    monkeypatch.setenv("AFFINITY_JAR_DIR", str(tmp_path))
    assert main(["spark", "jar"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed.is_file() and printed == jvm.spark_jar()
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    monkeypatch.setenv("AFFINITY_JAR_DIR", str(tmp_path / "empty"))
    assert main(["spark", "jar"]) == 2
    assert "javac not found" in capsys.readouterr().err


def test_a_packaged_jar_is_taken_first_and_needs_no_javac(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed wheel's jars folder: the jar of the installed pyspark's major version is
    taken (no javac, nothing built into the cache); with one for another major only, the jar is
    compiled, and without javac the error names both versions."""
    packaged = tmp_path / "jars"
    packaged.mkdir()
    monkeypatch.setattr(jvm, "PACKAGED_JARS", packaged)
    monkeypatch.setattr(jvm, "_spark_version", lambda: "3.5.9")
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    monkeypatch.setenv("AFFINITY_JAR_DIR", str(tmp_path / "cache"))
    (packaged / jvm.packaged_jar_name("4.3.0")).write_bytes(b"")
    with pytest.raises(
        jvm.JvmClassesMissing, match=r"for pyspark 4\.3\.0, the installed pyspark is 3\.5\.9.*javac"
    ):
        jvm.spark_jar()
    monkeypatch.setattr(jvm, "_spark_version", lambda: "4.1.0")
    assert jvm.spark_jar() == packaged / "affinity-spark-4.3.0.jar"
    assert jvm.session_conf() == {"spark.jars": str(packaged / "affinity-spark-4.3.0.jar")}
    assert not (tmp_path / "cache").exists()


def test_a_pyspark_older_than_the_floor_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AFFINITY_JAR_DIR", str(tmp_path))
    monkeypatch.setattr(jvm, "_spark_version", lambda: "3.4.1")
    with pytest.raises(jvm.JvmClassesMissing) as refused:
        jvm.session_conf()
    assert str(refused.value) == "affinity needs pyspark>=3.5; the installed pyspark is 3.4.1"
    assert list(tmp_path.iterdir()) == []  # nothing compiled
