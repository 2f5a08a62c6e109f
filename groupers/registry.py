"""Finding groupers by name: the built-ins, then plugins from the entry-point group.

A plugin registers a factory (usually the grouper class) in its distribution metadata::

    [project.entry-points."affinity.groupers"]
    my-grouper = "my_package.module:MyGrouper"

``get_grouper("my-grouper", **options)`` calls the factory with the options. Built-in names cannot
be shadowed by a plugin.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from groupers.api import GrouperError, SspGrouper, TaskNameGrouper, UnknownGrouperError
from groupers.host_affinity import HostAffinityGrouper
from groupers.round_robin import RoundRobinGrouper
from groupers.ssp import GroupByPartition, GroupBySsp

__all__ = [
    "ENTRY_POINT_GROUP",
    "get_grouper",
    "get_ssp_grouper",
    "grouper_names",
    "ssp_grouper_names",
]

ENTRY_POINT_GROUP = "affinity.groupers"

BUILTIN_GROUPERS: Mapping[str, Callable[..., Any]] = {
    "host-affinity": HostAffinityGrouper,
    "round-robin": RoundRobinGrouper,
}

BUILTIN_SSP_GROUPERS: Mapping[str, Callable[..., Any]] = {
    "group-by-partition": GroupByPartition,
    "group-by-ssp": GroupBySsp,
}


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def grouper_names() -> list[str]:
    """Every TaskNameGrouper name: built-ins and installed plugins."""
    return sorted(set(BUILTIN_GROUPERS) | set(_plugins()))


def ssp_grouper_names() -> list[str]:
    return sorted(BUILTIN_SSP_GROUPERS)


def _build(kind: str, name: str, factory: Callable[..., Any], options: Mapping[str, Any]) -> Any:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        known = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        unknown = sorted(set(options) - set(known))
        if unknown and not accepts_any:
            takes = ", ".join(known) if known else "no options"
            raise GrouperError(
                f"{kind} {name!r} does not take option(s) {', '.join(unknown)} (it takes: {takes})",
                argument="options",
            )
    # A constructor that raises refused its options; with none given, the grouper itself fails.
    blamed = "options" if options else "name"
    try:
        return factory(**options)
    except GrouperError as exc:
        if exc.argument is None:
            exc.argument = blamed
        raise
    except Exception as exc:
        raise GrouperError(
            f"cannot create {kind} {name!r}: {type(exc).__name__}: {exc}", argument=blamed
        ) from exc


def get_grouper(name: str, **options: Any) -> TaskNameGrouper:
    """The TaskNameGrouper called ``name``, built with ``options``.

    Raises :class:`UnknownGrouperError` listing the known names, or :class:`GrouperError` when a
    plugin cannot be loaded, the options do not fit, or the result is not a grouper.
    """
    factory = BUILTIN_GROUPERS.get(name)
    if factory is None:
        plugin = _plugins().get(name)
        if plugin is None:
            raise UnknownGrouperError(
                f"unknown grouper {name!r}; known groupers: {', '.join(grouper_names())}",
                argument="name",
            )
        try:
            factory = plugin.load()
        except Exception as exc:
            raise GrouperError(
                f"grouper plugin {name!r} ({plugin.value}) failed to load: "
                f"{type(exc).__name__}: {exc}",
                argument="name",
            ) from exc
        if not callable(factory):
            raise GrouperError(
                f"grouper plugin {name!r} ({plugin.value}) is not callable", argument="name"
            )
    grouper = _build("grouper", name, factory, options)
    if not callable(getattr(grouper, "group", None)):
        raise GrouperError(
            f"grouper {name!r} has no group(tasks, metadata) method", argument="name"
        )
    result: TaskNameGrouper = grouper
    return result


def get_ssp_grouper(name: str, **options: Any) -> SspGrouper:
    """The SSP grouper called ``name`` ("group-by-partition" or "group-by-ssp")."""
    factory = BUILTIN_SSP_GROUPERS.get(name)
    if factory is None:
        raise UnknownGrouperError(
            f"unknown SSP grouper {name!r}; known SSP groupers: {', '.join(ssp_grouper_names())}",
            argument="name",
        )
    grouper: SspGrouper = _build("SSP grouper", name, factory, options)
    return grouper
