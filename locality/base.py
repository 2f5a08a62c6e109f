"""What every LocationIdProvider shares: the :class:`LocationIdProvider` protocol and
:class:`LocationError`.

A module of its own so that :mod:`locality.providers` (which builds providers by name) and the
provider modules (:mod:`locality.kubernetes`, :mod:`locality.spark`) depend on it and not on
each other. Imports nothing of this project.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["LocationError", "LocationIdProvider"]


class LocationError(RuntimeError):
    """A location id could not be determined; the message names what was tried."""


@runtime_checkable
class LocationIdProvider(Protocol):
    """Gives the location id of the process that calls it."""

    def location_id(self) -> str: ...
