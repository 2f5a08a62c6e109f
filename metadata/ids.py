"""What a processor id and a location id may be: the one rule, checked where an id is registered
or written (a ``ValueError`` naming the problem) and where one is read back (the entry is skipped
with a warning, as malformed registrations are).

- a processor id: printable text (no control characters: no newline, escape or bell), 1 to
  :data:`MAX_PROCESSOR_ID` characters;
- a location id (``zone/rack/host``): printable text of 1 to :data:`MAX_LOCATION_ID` characters,
  at most :data:`MAX_LOCATION_DEPTH` ``/``-separated segments, none of them empty (``zone-a/``
  and ``zone-a//host`` are refused: they would name another place than they look like).

Usage::

    problem = location_id_problem("zone-a/rack-1/host-3")   # None: valid
    check_location_id(location)                             # ValueError naming the problem
"""

from __future__ import annotations

__all__ = [
    "MAX_LOCATION_DEPTH",
    "MAX_LOCATION_ID",
    "MAX_PROCESSOR_ID",
    "check_location_id",
    "check_processor_id",
    "location_id_problem",
    "processor_id_problem",
]

#: Longest processor id, in characters (a Kubernetes pod or node name is at most 253).
MAX_PROCESSOR_ID = 253
#: Longest location id, in characters.
MAX_LOCATION_ID = 1024
#: Most segments of a location id (``zone/rack/host`` is 3).
MAX_LOCATION_DEPTH = 16


def _text_problem(what: str, value: object, limit: int) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{what} must be a non-empty string, got {value!r:.80}"
    if len(value) > limit:
        return f"{what} must be at most {limit} characters, got {len(value)}: {value!r:.80}"
    if not value.isprintable():
        return f"{what} must be printable text (no control characters), got {value!r:.80}"
    return None


def processor_id_problem(value: object) -> str | None:
    """Why ``value`` is not a processor id, or None."""
    return _text_problem("processor id", value, MAX_PROCESSOR_ID)


def location_id_problem(value: object) -> str | None:
    """Why ``value`` is not a location id, or None."""
    problem = _text_problem("location id", value, MAX_LOCATION_ID)
    if problem is not None or not isinstance(value, str):
        return problem
    segments = value.split("/")
    if len(segments) > MAX_LOCATION_DEPTH:
        return (
            f"location id must have at most {MAX_LOCATION_DEPTH} '/'-separated segments, "
            f"got {len(segments)}: {value!r:.80}"
        )
    if "" in segments:
        return (
            "location id must not have an empty segment (a leading, trailing or double '/'), "
            f"got {value!r:.80}"
        )
    return None


def check_processor_id(value: object) -> str:
    """``value`` if it is a processor id, else ValueError naming the problem."""
    problem = processor_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    assert isinstance(value, str)
    return value


def check_location_id(value: object) -> str:
    """``value`` if it is a location id, else ValueError naming the problem."""
    problem = location_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    assert isinstance(value, str)
    return value
