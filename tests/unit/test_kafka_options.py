"""A librdkafka setting the client refuses (an unknown option, a bad value) is a
:class:`KafkaOptionError` naming it, from the reader, the sink and the admin calls alike, not a
raw ``cimpl.KafkaException`` (issue 37, case 14). No broker: librdkafka refuses at creation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from locality.spark.kafka import (
    KafkaClientConfig,
    KafkaOptionError,
    OffsetRange,
    partition_counts,
    read_range,
    write_records,
)

CALLS: dict[str, Callable[[KafkaClientConfig], Any]] = {
    "reader": lambda c: read_range(c, OffsetRange("events", 0, 0, 1)),
    "sink": lambda c: write_records(c, "events", pd.DataFrame({"key": [b"k"], "value": [b"v"]})),
    "admin": lambda c: partition_counts(c, ["events"]),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"foo.bar": "1"}, 'No such configuration property: "foo.bar"'),
        ({"session.timeout.ms": "soon"}, 'configuration property "session.timeout.ms"'),
    ],
)
def test_a_refused_setting_is_named(call: str, options: dict[str, str], named: str) -> None:
    config = KafkaClientConfig("127.0.0.1:1", options)
    with pytest.raises(KafkaOptionError) as info:
        CALLS[call](config)
    assert named in str(info.value) and "\n" not in str(info.value)
