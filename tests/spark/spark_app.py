"""The Spark application the tests share (see conftest.py); importable by the test modules
(``from spark_app import SparkApp``) under a name no other test folder uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from affinity_pipeline.cluster import StandaloneCluster, spark_session

from locality.spark import SparkExecutor, SparkExecutors
from locality.spark.jvm import JAR_CONF_KEY, spark_jar
from locality.spark.maven import spark_jars_conf

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

WORKER_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
LOCALITY_WAIT = "30s"


class SparkApp:
    """The test session's Spark application (restartable)."""

    def __init__(
        self,
        cluster: StandaloneCluster,
        hosts: tuple[str, ...],
        conf: dict[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.hosts = hosts
        self.conf = dict(conf or {})
        self.session: SparkSession | None = None
        self.restarts = 0

    def start(self) -> None:
        self.session = spark_session(
            self.cluster.master_url,
            app_name="affinity-tests",
            locality_wait=LOCALITY_WAIT,
            log4j_config=self.cluster.quiet_log4j_config,
            # affinity's jar, and Spark's Kafka connector of this pyspark (Scala 2.13 on
            # Spark 4, 2.12 on 3.5: a Spark 4 one's classes break the file source on 3.5)
            conf={JAR_CONF_KEY: f"{spark_jar()},{spark_jars_conf()}", **self.conf},
        )
        self.ready()

    @property
    def sc(self) -> SparkContext:
        assert self.session is not None, "the application is stopped"
        return self.session.sparkContext

    @property
    def app_id(self) -> str:
        return str(self.sc.applicationId)

    def executors(self) -> list[SparkExecutor]:
        return SparkExecutors(self.sc).list()

    def ready(self, timeout_s: float = 120.0, exclude: tuple[str, ...] = ()) -> list[SparkExecutor]:
        """Wait until each worker host has a live executor (ids in ``exclude`` not counted)."""
        return SparkExecutors(self.sc).wait_for(
            len(self.hosts), hosts=self.hosts, exclude=exclude, timeout_s=timeout_s
        )

    @property
    def running(self) -> bool:
        """Started and not stopped (by :meth:`stop`, or by another application of the test
        session: :func:`stop_active_session`)."""
        return self.session is not None and self.session.sparkContext._jsc is not None

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None

    def restart(self) -> None:
        """Stop the application and start a new one (new application id, new executors)."""
        self.stop()
        self.restarts += 1
        self.start()


def stop_active_session() -> None:
    """Stop this process's SparkSession, whichever application it is (a process has one
    SparkContext): for a test module that runs its own cluster and application. The session's
    :class:`SparkApp` starts again when a test asks for it (``app`` in conftest.py)."""
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is not None and session.sparkContext._jsc is not None:
        session.stop()
