"""docs/spark.md step 2's table of a streaming query's config rules quotes the errors the handler
gives: each quoted error is what ``stateful_foreach_batch`` raises for that bad config, before
any Spark or ZooKeeper is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coordinator.config import load_config
from coordinator.streaming import stateful_foreach_batch

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()


def config(tmp_path: Path, **changes: Any) -> Any:
    data: dict[str, Any] = {
        "job": {"name": "clicks"},
        "inputs": [{"system": "spark", "stream": "clicks", "partitions": 1}],
        "ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": 8}},
        "state": {"checkpoint_dir": str(tmp_path), "max_parallelism": 1024},
    }
    data.update(changes)
    return load_config(data=data, environ={})


def error_of(job_config: Any) -> str:
    with pytest.raises(Exception) as raised:
        stateful_foreach_batch(
            lambda key, pdfs, state: iter(()),
            key_columns=["user"],
            output_schema="user string, clicks long",
            state_schema="clicks long",
            sink=lambda df, batch: None,
            config=job_config,
        )
    return str(raised.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"ssp_grouper": {"name": "group-by-partition", "options": {"elasticity_factor": 6}}},
        {"state": {"checkpoint_dir": "/x", "max_parallelism": 1020}},
        {"inputs": [{"system": "spark", "stream": s, "partitions": 1} for s in ("a", "b")]},
    ],
    ids=["factor-not-a-power-of-two", "max-parallelism-not-a-multiple", "two-inputs"],
)
def test_the_documented_error_is_the_one_raised(tmp_path: Path, changes: dict[str, Any]) -> None:
    error = error_of(config(tmp_path, **changes))
    assert f"`{error}`" in PAGE, error


def test_a_missing_checkpoint_dir_is_documented_as_raised(tmp_path: Path) -> None:
    error = error_of(config(tmp_path, state={"max_parallelism": 1024}))
    head = error.split(":")[0]
    assert f"`{head}: ...`" in PAGE, error


def test_a_valid_config_of_the_table_makes_a_handler(tmp_path: Path) -> None:
    handler = stateful_foreach_batch(
        lambda key, pdfs, state: iter(()),
        key_columns=["user"],
        output_schema="user string, clicks long",
        state_schema="clicks long",
        sink=lambda df, batch: None,
        config=config(tmp_path),
    )
    assert len(handler.keyspace.key_groups()) == 8
