"""Checked access to the fields of a decoded job-model document (formats 1 and 2 share these).

Each check raises :class:`~metadata.errors.JobModelFormatError` naming the field path and the
problem, e.g. ``version: expected an integer, got '7'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metadata.errors import JobModelFormatError
from metadata.model import JobModel

__all__ = ["JobModelDocument", "as_int", "as_obj", "as_str", "describe", "field"]


@dataclass(frozen=True, slots=True)
class JobModelDocument:
    """A decoded job-model document: the model plus the envelope fields (run id, grouper)."""

    model: JobModel
    run_id: str = ""
    grouper: str = ""


def describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field(obj: Mapping[str, Any], key: str, path: str, *, default: Any = ...) -> Any:
    """``obj[key]``; a missing key is ``default``, or an error when there is none."""
    if key in obj:
        return obj[key]
    if default is ...:
        raise JobModelFormatError(f"{path}.{key}" if path else key, "missing required field")
    return default


def as_str(value: Any, path: str, *, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise JobModelFormatError(path, f"expected a string, got {describe(value)}")
    return value


def as_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobModelFormatError(path, f"expected an integer, got {describe(value)}")
    return value


def as_obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise JobModelFormatError(
            path or "<document>", f"expected an object, got {describe(value)}"
        )
    return value
