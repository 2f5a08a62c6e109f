"""Reading a job's YAML file safely: at most ``MAX_CONFIG_BYTES``, UTF-8, YAML's safe loader with
no aliases (a few hundred bytes of nested aliases expand to billions of values), at most
``MAX_YAML_NODES`` values nested at most ``MAX_YAML_DEPTH`` deep. Every problem is a
:class:`ConfigError` naming the file (:mod:`coordinator.config` validates what it holds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "ConfigError",
    "read_config_file",
]

#: A configuration file larger than this is refused before it is parsed.
MAX_CONFIG_BYTES = 1 << 20
#: At most this many YAML nodes, nested at most this deep (a job config has a few dozen).
MAX_YAML_NODES = 10_000
MAX_YAML_DEPTH = 32


class ConfigError(ValueError):
    """The job configuration is unusable; the message names each bad key."""


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases (a few hundred bytes of nested aliases expand to
    billions of values) and with at most MAX_YAML_NODES nodes, MAX_YAML_DEPTH deep."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        line = f"line {mark.line + 1}" if mark is not None else "line ?"
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(f"YAML aliases (*{event.anchor}, {line}) are not supported")
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise ConfigError(f"more than {MAX_YAML_NODES} YAML values ({line})")
        if self._depth >= MAX_YAML_DEPTH:
            raise ConfigError(f"values nested more than {MAX_YAML_DEPTH} deep ({line})")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The file's top-level mapping; ConfigError naming the file for anything unusable."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {source}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"configuration file {source} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"configuration file {source} is not UTF-8 text: {exc}") from None
    loader = _ConfigLoader(text)
    try:
        data = loader.get_single_data() or {}
    except ConfigError as exc:
        raise ConfigError(f"configuration file {source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration file {source} is not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"configuration file {source} must hold a mapping at the top level")
    return data
