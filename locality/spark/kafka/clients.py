"""librdkafka clients built from a :class:`~locality.spark.kafka.client.KafkaClientConfig`'s
settings: a setting librdkafka refuses (an unknown option, a bad value) is a
:class:`KafkaOptionError` naming it, not a raw ``cimpl.KafkaException``.

Usage::

    consumer = new_client(Consumer, config.consumer())
    admin = new_client(AdminClient, config.admin())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

__all__ = ["KafkaOptionError", "new_client"]

Client = TypeVar("Client")


class KafkaOptionError(ValueError):
    """librdkafka refused a client setting (the message names it)."""


def new_client(factory: Callable[[dict[str, Any]], Client], settings: dict[str, Any]) -> Client:
    """``factory(settings)`` (a Consumer, Producer or AdminClient); KafkaOptionError when
    librdkafka refuses a setting."""
    try:
        return factory(settings)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        text = error.str() if isinstance(error, KafkaError) else str(exc)
        given = ", ".join(sorted(k for k in settings if k != "logger"))
        raise KafkaOptionError(
            f"a Kafka client setting was refused: {text} (settings given: {given})"
        ) from None
