"""JSON values, compact encoding, field checks and the object space's errors.

Every other module of the package imports this one; it imports none of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

__all__ = [
    "JSON",
    "CorruptCheckpointError",
    "ObjectKind",
    "ObjectSpaceError",
    "check_batch",
    "check_json",
    "check_name",
    "dumps",
    "int_field",
    "json_list",
    "json_problem",
    "parse",
    "positive_int",
]

#: A JSON value as the object space stores it.
JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

ObjectKind = Literal["value", "list", "map"]


class ObjectSpaceError(ValueError):
    """Wrong use of an object space, or a state that cannot be loaded."""


class CorruptCheckpointError(ObjectSpaceError):
    """A checkpoint file (or serialized space) that cannot be read; ``location`` names it."""

    def __init__(self, location: str, problem: str) -> None:
        super().__init__(f"{location}: {problem}")
        self.location = location
        self.problem = problem


def json_problem(value: object) -> str | None:
    """None if ``value`` is a JSON value, else where (a suffix like ``[3]['a']``) and why."""
    if value is None or isinstance(value, str | int):  # bool is an int
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f": {value!r} is not JSON (not finite)"
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = json_problem(item)
            if problem is not None:
                return f"[{index}]{problem}"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f": dict key {key!r} is not a str"
            problem = json_problem(item)
            if problem is not None:
                return f"[{key!r}]{problem}"
        return None
    return (
        f": a {type(value).__name__} is not a JSON value "
        "(None, bool, int, finite float, str, list, dict with str keys)"
    )


def check_json(value: object, where: str) -> None:
    problem = json_problem(value)
    if problem is not None:
        raise TypeError(f"{where}{problem}")


def dumps(document: object) -> bytes:
    """Compact JSON, keys sorted (the form of every checkpoint file)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode(
        "ascii"
    )


def parse(data: bytes, location: str) -> dict[str, Any]:
    """A JSON object, or :class:`CorruptCheckpointError` naming ``location``."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(location, f"not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptCheckpointError(location, "not a JSON object")
    return document


def int_field(document: Mapping[str, Any], name: str, location: str, minimum: int = 0) -> int:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CorruptCheckpointError(
            location, f"field {name!r} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def json_list(items: Iterable[JSON]) -> list[JSON]:
    out: list[JSON] = []
    out.extend(items)
    return out


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"an object name must be a non-empty str, got {name!r}")
    return name


def positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def check_batch(batch: object) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise ValueError(f"batch must be an integer >= 0, got {batch!r}")
    return batch
