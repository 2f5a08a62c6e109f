"""How the streaming race reads its figures (no cluster needed): the state bytes Spark's RocksDB
state store loaded (from its progress metrics and its checkpoint's changelog files), the input
and its single-process reference, and the function's state padding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.demo.race_function import padding
from coordinator.demo.race_ways import RaceInput, SparkWay


def checkpoint(root: Path, stores: dict[int, dict[str, int]]) -> Path:
    """A Spark checkpoint's state folder: store -> {file name: size}."""
    for store, files in stores.items():
        folder = root / "state" / "0" / str(store)
        folder.mkdir(parents=True)
        for name, size in files.items():
            (folder / name).write_bytes(b"x" * size)
    return root


def progress(batch: int, **metrics: int) -> dict[str, Any]:
    return {
        "batchId": batch,
        "numInputRows": 10,
        "durationMs": {"triggerExecution": 2500},
        "stateOperators": [{"customMetrics": metrics}],
    }


def test_every_store_loaded_counts_the_changelogs_after_its_latest_snapshot(tmp_path: Path) -> None:
    root = checkpoint(
        tmp_path,
        {
            0: {"1.changelog": 100, "2.changelog": 200, "3.changelog": 300},
            1: {"1.changelog": 10, "2.zip": 5, "2.changelog": 20, "3.changelog": 30},
        },
    )
    way = SparkWay(RaceInput(tmp_path / "in"), root, partitions=2)
    # batch 3 loads version 3: store 0 replays 1..3; store 1 loads snapshot 2 and replays 3
    figures = way._figures(
        progress(3, rocksdbNumLoadedFromDfs=2, rocksdbNumReplayChangelogFiles=4,
                 rocksdbBytesCopied=7),
        "restart",
    )  # fmt: skip
    assert figures.bytes_loaded == 7 + 100 + 200 + 300 + 30
    assert (figures.warm, figures.tasks, figures.seconds) == (0, 2, 2.5)


def test_some_stores_loaded_counts_their_replayed_files_at_the_mean_size(tmp_path: Path) -> None:
    root = checkpoint(tmp_path, {0: {"1.changelog": 100}, 1: {"1.changelog": 300}})
    way = SparkWay(RaceInput(tmp_path / "in"), root, partitions=2)
    figures = way._figures(
        progress(1, rocksdbNumLoadedFromDfs=1, rocksdbNumReplayChangelogFiles=1), "kill"
    )
    assert figures.bytes_loaded == 200 and figures.warm == 1


def test_a_batch_that_loads_nothing_ignores_the_stale_bytes_copied(tmp_path: Path) -> None:
    """Spark 4.3's RocksDB provider keeps the last load's rocksdbBytesCopied on warm stores."""
    way = SparkWay(RaceInput(tmp_path / "in"), checkpoint(tmp_path, {}), partitions=4)
    figures = way._figures(progress(5, rocksdbNumLoadedFromDfs=0, rocksdbBytesCopied=9_999), "x")
    assert figures.bytes_loaded == 0 and figures.warm == 4


def test_the_input_fills_every_user_then_draws_clicks(tmp_path: Path) -> None:
    source = RaceInput(tmp_path, users=5, rows=7, pad=3)
    assert sorted(r["user"] for r in source.batch(0)) == [f"u{u:06d}" for u in range(5)]
    assert len(source.batch(1)) == 7 and source.batch(1) == source.batch(1)
    reference = source.reference(range(2))
    assert [clicks for _, clicks, _ in reference[0]] == [1] * 5
    touched = {r["user"] for r in source.batch(1)}
    assert {u for u, _, _ in reference[1]} == touched
    source.drop(1, "spark")
    assert (tmp_path / "spark" / "clicks-000001.json").read_text().count("\n") == 7


def test_padding_is_drawn_from_the_user_alone() -> None:
    assert padding("u1", 11) == padding("u1", 11) != padding("u2", 11)
    assert len(padding("u1", 11)) == 11 and int(padding("u1", 11), 16) >= 0
