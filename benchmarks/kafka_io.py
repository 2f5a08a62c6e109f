"""The Kafka broker of the tests and the demo, and the clients the executors use: how fast.

On a private broker (``coordinator.launchers.kafka.KafkaBroker``: KRaft, one node, Maven Central's
jars) on loopback:

- the broker: the jar cache's size; wall time of a first start (format and start, until a
  Metadata request lists the broker) and the broker's CPU time until then, with the default
  JVM options (C1 only) and with C2; of a start after a graceful stop and after ``kill -9``, of
  a graceful stop; the broker's memory (RSS) once started. Medians over ``--repeat`` fresh
  brokers. Wall times grow with the machine's load (the table says it); CPU times much less;
- the clients (``locality.spark.kafka``), on the last broker: records/s of
  :func:`write_records` (idempotent, one process) into a topic of 12 partitions, of
  :func:`read_range` over every partition (one partition after the other, one process), and
  the time of :func:`end_offsets` for the topic.
  Records are ~20-byte keys over 1,000 keys and ~60-byte values.

Usage: ``python benchmarks/kafka_io.py [--quick] [--records N] [--doc PATH] [--no-write]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import pandas as pd  # noqa: E402

from benchmarks._report import DOC, machine, table, write_section  # noqa: E402
from coordinator.launchers.kafka import KafkaBroker  # noqa: E402
from locality.spark.kafka import OffsetRange, end_offsets, read_range, write_records  # noqa: E402
from locality.spark.maven import KAFKA_BROKER, KAFKA_VERSION, SPARK_SQL_KAFKA, jars  # noqa: E402

PARTITIONS = 12


def _mib(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.glob("*.jar")) / 2**20


def _proc(pid: int | None) -> tuple[float, float]:
    """(RSS in MiB, CPU seconds used so far) of process ``pid``."""
    rss = float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _c2_start(workdir: Path, times: dict[str, list[float]]) -> None:
    full = KafkaBroker(workdir, jvm_options=())
    try:
        full.start()
        times["first C2"].append(full.last_start_s or 0.0)
        times["cpu C2"].append(_proc(full.pid)[1])
    finally:
        full.stop()


def _life_cycle(broker: KafkaBroker, times: dict[str, list[float]]) -> None:
    """Start a fresh broker, stop it, start it, kill it, start it: it is left running."""
    broker.start()
    times["first"].append(broker.last_start_s or 0.0)
    rss, cpu = _proc(broker.pid)
    times["rss"].append(rss)
    times["cpu"].append(cpu)
    began = time.monotonic()
    broker.stop()
    times["stop"].append(time.monotonic() - began)
    broker.start()
    times["after stop"].append(broker.last_start_s or 0.0)
    broker.kill()
    broker.start()
    times["after kill"].append(broker.last_start_s or 0.0)


def _records(count: int) -> pd.DataFrame:
    keys = [f"user-{i % 1000:06d}-key-pad" for i in range(count)]
    values = [
        f'{{"n": {i}, "event": "click", "page": "/p/{i % 97}", "pad": "x"}}' for i in range(count)
    ]
    return pd.DataFrame({"key": keys, "value": values})


def client_rates(broker: KafkaBroker, count: int) -> dict[str, float]:
    servers = broker.bootstrap_servers
    broker.create_topic("bench", PARTITIONS)
    rows = _records(count)
    began = time.monotonic()
    write_records(servers, "bench", rows)
    write_s = time.monotonic() - began
    began = time.monotonic()
    ends = end_offsets(servers, ["bench"])
    offsets_s = time.monotonic() - began
    began = time.monotonic()
    read = sum(
        read_range(servers, OffsetRange("bench", p.partition, 0, end)).num_rows
        for p, end in ends.items()
    )
    read_s = time.monotonic() - began
    assert read == count, (read, count)
    return {"write": count / write_s, "read": count / read_s, "offsets_ms": offsets_s * 1000}


def measure(
    repeat: int, count: int, with_c2: bool
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Broker times over ``repeat`` fresh brokers; the clients' rates on the last of them."""
    names = ["first", "cpu", "first C2", "cpu C2", "after stop", "after kill", "stop", "rss"]
    times: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, float] = {}
    for run in range(repeat):
        with tempfile.TemporaryDirectory(prefix="kafka-bench-") as work:
            if with_c2:
                _c2_start(Path(work) / "c2", times)
            broker = KafkaBroker(Path(work) / "default")
            try:
                _life_cycle(broker, times)
                if run == repeat - 1:
                    rates = client_rates(broker, count)
            finally:
                broker.stop()
    return times, rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one broker, no C2, 20,000 records")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    repeat, count = (1, 20_000) if args.quick else (args.repeat, args.records)

    broker_mib, connector_mib = _mib(jars(KAFKA_BROKER)), _mib(jars(SPARK_SQL_KAFKA))
    times, rates = measure(repeat, count, with_c2=not args.quick)

    def med(name: str) -> str:
        return f"{statistics.median(times[name]):.2f}" if times[name] else "not run (--quick)"

    broker_rows = [
        ["jar cache (broker + Spark connector)", f"{broker_mib:.0f} + {connector_mib:.1f} MiB"],
        ["first start (format + start), s", med("first")],
        ["  the broker's CPU until ready, s", med("cpu")],
        ["first start with C2 (`jvm_options=()`), s", med("first C2")],
        ["  the broker's CPU until ready, s", med("cpu C2")],
        ["start after a graceful stop, s", med("after stop")],
        ["start after kill -9, s", med("after kill")],
        ["graceful stop, s", med("stop")],
        ["broker RSS once started, MiB", f"{statistics.median(times['rss']):.0f}"],
    ]
    client_rows = [
        [f"write_records ({count:,} records, idempotent)", f"{rates['write']:,.0f} records/s"],
        [f"read_range over {PARTITIONS} partitions", f"{rates['read']:,.0f} records/s"],
        [f"end_offsets ({PARTITIONS} partitions)", f"{rates['offsets_ms']:.0f} ms"],
    ]
    markdown = "\n\n".join(
        [
            f"## Kafka broker and clients (`benchmarks/kafka_io.py`)\n\nKafka {KAFKA_VERSION} "
            f"(KRaft, one node, `-Xmx512m`, C1 only unless said), confluent-kafka, one process "
            f"each, on {machine()}; medians over {repeat} fresh broker(s); the machine's load "
            f"average was {os.getloadavg()[0]:.1f} at the end.",
            table(["broker", "value"], broker_rows),
            table(["client (one process)", "value"], client_rows),
        ]
    )
    print(markdown)
    if not args.no_write:
        write_section("kafka_io", markdown, args.doc)


if __name__ == "__main__":
    main()
