"""LocationIdProviders: how a processor learns where it runs.

A location id names the place a processor's local state lives. It may be hierarchical,
``zone/rack/host``: the host-affinity grouper treats the longest common prefix as "nearest".

Three providers are built in, chosen by name with :func:`get_location_provider`:

``host``
    :class:`HostnameLocationIdProvider`: ``socket.gethostname()``.
``env``
    :class:`EnvLocationIdProvider`: an environment variable (``AFFINITY_LOCATION_ID`` by default).
``kubernetes``
    :class:`locality.kubernetes.KubernetesLocationIdProvider`: ``zone/node`` of the pod's node,
    from the Downward API environment or the Kubernetes API (in-cluster configuration).

Every provider raises :class:`LocationError` naming what it tried when it cannot answer.
:class:`LocationError` and the :class:`LocationIdProvider` protocol live in
:mod:`locality.base` and are re-exported here.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from locality.base import LocationError, LocationIdProvider

__all__ = [
    "PROVIDER_NAMES",
    "EnvLocationIdProvider",
    "HostnameLocationIdProvider",
    "LocationError",
    "LocationIdProvider",
    "get_location_provider",
]


class HostnameLocationIdProvider:
    """The machine's host name (``socket.gethostname()``)."""

    def location_id(self) -> str:
        name = socket.gethostname().strip()
        if not name:
            raise LocationError("socket.gethostname() returned an empty host name")
        return name

    def __repr__(self) -> str:
        return "HostnameLocationIdProvider()"


class EnvLocationIdProvider:
    """The value of one environment variable (``AFFINITY_LOCATION_ID`` by default).

    ``environ`` defaults to ``os.environ`` read at call time, so a test or a launcher can set the
    variable after the provider is built.
    """

    def __init__(
        self, var: str = "AFFINITY_LOCATION_ID", *, environ: Mapping[str, str] | None = None
    ) -> None:
        if not var:
            raise ValueError("var must name an environment variable")
        self.var = var
        self._environ = environ

    def location_id(self) -> str:
        environ = os.environ if self._environ is None else self._environ
        value = environ.get(self.var, "").strip()
        if not value:
            state = "is empty" if self.var in environ else "is not set"
            raise LocationError(
                f"environment variable {self.var} {state}; set it to this processor's "
                "location id (e.g. zone-a/node-1)"
            )
        return value

    def __repr__(self) -> str:
        return f"EnvLocationIdProvider(var={self.var!r})"


#: The names :func:`get_location_provider` accepts.
PROVIDER_NAMES: tuple[str, ...] = ("host", "env", "kubernetes")


def get_location_provider(name: str, **options: Any) -> LocationIdProvider:
    """Build the provider called ``name`` (one of :data:`PROVIDER_NAMES`) with ``options``.

    ``host`` takes no options; ``env`` takes ``var`` (and ``environ``); ``kubernetes`` takes the
    keyword arguments of :class:`locality.kubernetes.KubernetesLocationIdProvider`.
    Raises ``ValueError`` for an unknown name or option.
    """
    if name == "host":
        if options:
            raise ValueError(f"location provider 'host' takes no options (got {sorted(options)})")
        return HostnameLocationIdProvider()
    if name == "env":
        unknown = sorted(set(options) - {"var", "environ"})
        if unknown:
            raise ValueError(f"location provider 'env': unknown option(s) {unknown}")
        return EnvLocationIdProvider(**options)
    if name == "kubernetes":
        # Imported here: the kubernetes client is heavy and only this provider needs it.
        from locality.kubernetes import KubernetesLocationIdProvider

        try:
            return KubernetesLocationIdProvider(**options)
        except TypeError as exc:
            raise ValueError(f"location provider 'kubernetes': {exc}") from None
    raise ValueError(
        f"unknown location provider {name!r}; choose one of: {', '.join(PROVIDER_NAMES)}"
    )
