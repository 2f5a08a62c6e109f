"""The one line a bad job configuration gets: pydantic's errors as ``<key>: <problem> (got
<value>)``, joined, for :func:`coordinator.config.load_config`. A value is cut to
``MAX_ECHO_CHARS``; a credential (``zookeeper.auth``, ``AFFINITY_ZK_AUTH``) is never echoed,
not even inside another message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

__all__ = ["MAX_ECHO_CHARS", "STORE_LIMIT", "format_errors", "scrub", "secrets_given"]

#: The error type of a job above what the metadata store holds (its message names the key).
STORE_LIMIT = "store_limit"
#: An echoed value ("got ...") is cut to this many characters.
MAX_ECHO_CHARS = 80


#: Where the credentials live: values at these paths (and unknown keys beside them, a mistyped
#: ``auth``) are never echoed in an error.
_SECRET_PATHS = {(), ("zookeeper",), ("zookeeper", "auth")}
_SECRET_ENV = {"AFFINITY_ZK_AUTH", "AFFINITY_ZOOKEEPER__AUTH"}


def secrets_given(file_data: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """The credential strings given (whole, and the password part), longest first."""
    found: list[str] = []
    section = file_data.get("zookeeper")
    if isinstance(section, Mapping) and isinstance(section.get("auth"), str):
        found.append(section["auth"])
    found += [v for k, v in environ.items() if k.upper() in _SECRET_ENV]
    found += [value.partition(":")[2] for value in found]
    return sorted({value for value in found if len(value) >= 3}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _echo(loc: tuple[Any, ...], kind: str, value: Any) -> str:
    """`` (got <value>)``, cut to MAX_ECHO_CHARS; nothing for credentials or whole sections."""
    if kind == "missing" or isinstance(value, dict):
        return ""
    if loc in _SECRET_PATHS or (loc[:1] == ("zookeeper",) and kind == "extra_forbidden"):
        return " (value not shown)"
    text = repr(value)
    if len(text) > MAX_ECHO_CHARS:
        text = f"{text[:MAX_ECHO_CHARS]}... ({len(text)} characters)"
    return f" (got {text})"


def format_errors(exc: ValidationError, source: str, secrets: Iterable[str]) -> str:
    """One line for every error of ``exc`` (the configuration read from ``source``), scrubbed."""
    lines = []
    for err in exc.errors():
        if err["type"] == STORE_LIMIT:  # names its own key
            lines.append(err["msg"])
            continue
        where = ".".join(str(p) for p in err["loc"]) or "<top level>"
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"{where}: {message}{_echo(tuple(err['loc']), err['type'], err.get('input'))}")
    return scrub(f"invalid configuration in {source}: " + "; ".join(lines), secrets)
