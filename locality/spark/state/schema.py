"""The flat schemas of a stateful query: ``"user string, clicks long"`` (Spark DDL) or a
pyspark ``StructType``, parsed without a SparkContext, and the check that a state value fits.

The state store keeps a key's state as a JSON list, so a state schema may only use types with an
exact JSON form: integers (``tinyint``/``byte``, ``smallint``/``short``, ``int``/``integer``,
``bigint``/``long``), ``float``/``double``, ``string`` and ``boolean``; every field may be null.
Anything else (timestamps, decimals, nested types) is refused with the field named: keep times as
``long`` milliseconds. Imports only the standard library (and pyspark's types, lazily, for a
``StructType``).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Field", "SchemaError", "StateValueError", "check_state", "parse_schema", "to_python"]

_INTEGER = {"tinyint": 8, "byte": 8, "smallint": 16, "short": 16, "int": 32, "integer": 32}
_INTEGER |= {"bigint": 64, "long": 64}
_KINDS = {**dict.fromkeys(_INTEGER, "integer"), "float": "double", "double": "double"}
_KINDS |= {"string": "string", "boolean": "boolean", "bool": "boolean"}
_FIELD_RE = re.compile(
    r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s*:?\s+([A-Za-z]+)\s*(NOT\s+NULL)?\s*$", re.I
)


class SchemaError(ValueError):
    """A schema that cannot be parsed, or uses a type the state store cannot keep."""


class StateValueError(ValueError):
    """A value given to ``state.update`` that does not fit the state schema."""


@dataclass(frozen=True, slots=True)
class Field:
    """One column: its name, its Spark type name (``long``...) and its kind
    (``integer``/``double``/``string``/``boolean``)."""

    name: str
    type: str
    kind: str
    nullable: bool = True


def parse_schema(schema: object, what: str, *, any_type: bool = False) -> tuple[Field, ...]:
    """``schema`` (a DDL string or a ``StructType``) as fields; ``what`` names it in errors.

    ``any_type=True`` accepts every Spark type (an output schema goes to Spark, which checks
    it); else only the kinds of the module docstring.
    """
    if isinstance(schema, str):
        pairs = [_parse_field(part, what) for part in _split(schema, what)]
    elif hasattr(schema, "fields"):
        pairs = [(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields]
    else:
        raise SchemaError(f"{what} must be a DDL string or a StructType, got {schema!r}")
    fields = []
    for name, type_name, nullable in pairs:
        kind = _KINDS.get(type_name.lower())
        if kind is None and not any_type:
            raise SchemaError(
                f"{what}: field {name!r} has type {type_name!r}, which the affinity state store "
                f"cannot keep (use one of {', '.join(sorted(_KINDS))}; times as long milliseconds)"
            )
        fields.append(Field(name, type_name.lower(), kind or "other", nullable))
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise SchemaError(f"{what}: a field name is repeated in {names}")
    if not fields:
        raise SchemaError(f"{what} has no fields")
    return tuple(fields)


def _split(text: str, what: str) -> list[str]:
    if "<" in text or "(" in text:
        raise SchemaError(f"{what}: nested or parameterized types are not supported: {text!r}")
    return [part for part in text.split(",") if part.strip()]


def _parse_field(text: str, what: str) -> tuple[str, str, bool]:
    match = _FIELD_RE.match(text)
    if match is None:
        raise SchemaError(f"{what}: cannot parse {text.strip()!r} as '<name> <type>'")
    return match.group(1), match.group(2), match.group(3) is None


def to_python(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value (``np.int64(3)`` -> ``3``); NaN/NA -> None."""
    if value is None:
        return None
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, str | bytes):
        with contextlib.suppress(ValueError, TypeError):
            value = item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if type(value).__name__ in {"NAType", "NaTType"}:
        return None
    return value


def check_state(value: object, fields: Sequence[Field]) -> list[Any]:
    """``value`` (a tuple for ``state.update``) as a JSON list, or :class:`StateValueError`
    naming the field that does not fit."""
    if value is None:
        raise StateValueError("state.update(None): the state cannot be None (use state.remove())")
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise StateValueError(
            f"state.update expects a tuple of {len(fields)} value(s) "
            f"({', '.join(f'{f.name} {f.type}' for f in fields)}), got {value!r}"
        )
    if len(value) != len(fields):
        raise StateValueError(
            f"state.update got {len(value)} value(s) {tuple(value)!r}; the state schema has "
            f"{len(fields)}: {', '.join(f'{f.name} {f.type}' for f in fields)}"
        )
    return [_check_value(to_python(v), f) for v, f in zip(value, fields, strict=True)]


def _check_value(value: Any, field: Field) -> Any:
    if value is None:
        if not field.nullable:
            raise StateValueError(f"state field {field.name!r} ({field.type} NOT NULL) got None")
        return None
    ok = False
    if field.kind == "integer":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if ok and not -(2 ** (_INTEGER[field.type] - 1)) <= int(value) < 2 ** (
            _INTEGER[field.type] - 1
        ):
            raise StateValueError(f"state field {field.name!r} ({field.type}) overflows: {value}")
        value = int(value) if ok else value
    elif field.kind == "double":
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        value = float(value) if ok else value
        if ok and not math.isfinite(value):
            raise StateValueError(f"state field {field.name!r} ({field.type}) got {value}")
    elif field.kind == "string":
        ok = isinstance(value, str)
    elif field.kind == "boolean":
        ok = isinstance(value, bool)
    if not ok:
        raise StateValueError(
            f"state field {field.name!r} is {field.type}, got {type(value).__name__} {value!r}"
        )
    return value
