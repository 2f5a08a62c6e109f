"""benchmarks/kafka_io.py --quick runs end to end on a real broker and writes its tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchdoc import run_quick, tables

pytestmark = pytest.mark.kafka


def test_quick_benchmark_writes_its_section(tmp_path: Path) -> None:
    broker, clients = tables(run_quick("kafka_io", "kafka_io", tmp_path))
    values = {row["broker"].strip(): row["value"] for row in broker}
    for name in ["first start (format + start), s", "start after kill -9, s", "graceful stop, s"]:
        assert float(values[name]) > 0
    assert values["first start with C2 (`jvm_options=()`), s"] == "not run (--quick)"
    rates = {row["client (one process)"]: row["value"] for row in clients}
    write = rates["write_records (20,000 records, idempotent)"]
    assert write.endswith(" records/s") and int(write.split()[0].replace(",", "")) > 0
    assert int(rates["read_range over 12 partitions"].split()[0].replace(",", "")) > 0
