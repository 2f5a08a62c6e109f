"""Which ``AFFINITY_*`` environment variables a job config reads, and the two mistakes it
refuses (:func:`check_environment`, for :func:`coordinator.config.load_config`):

- an unknown variable with the prefix (``AFFINITY_ZK_CONECT``, ``AFFINITY_FOO``,
  ``AFFINITY_NOPE__X``): a ConfigError naming it and the closest known name. Not unknown: the
  variables other parts of affinity read (:data:`OTHER_VARIABLES`, e.g. the executor's
  ``AFFINITY_NODE_NAME``) and the ones Kubernetes injects for a Service whose name starts with
  ``affinity`` (``AFFINITY_PORT``, ``AFFINITY_COORDINATOR_SERVICE_HOST``...). A typo in a
  section's key (``AFFINITY_COORDINATOR__NOPE``) is pydantic's to refuse (``extra="forbid"``);
- two variables for one key (``AFFINITY_ZK_CONNECT`` and ``AFFINITY_ZOOKEEPER__CONNECT``, or
  the whole section as JSON naming that key): a ConfigError naming both.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Mapping

from coordinator.config_file import ConfigError

__all__ = ["OTHER_VARIABLES", "check_environment"]

PREFIX = "AFFINITY_"

#: ``AFFINITY_*`` variables read by other parts of affinity (locality providers, the jar cache)
#: and by its own tests, which processes started with them inherit.
OTHER_VARIABLES = frozenset(
    {
        "AFFINITY_LOCATION_ID",
        "AFFINITY_NODE_NAME",
        "AFFINITY_ZONE",
        "AFFINITY_ZONE_LOOKUP",
        "AFFINITY_POD_NAME",
        "AFFINITY_POD_NAMESPACE",
        "AFFINITY_SERVICE_ACCOUNT_DIR",
        "AFFINITY_JAR_DIR",
        "AFFINITY_FAULT_SEED",
        "AFFINITY_FAULT_ROUNDS",
        "AFFINITY_FAULT_KINDS",
        "AFFINITY_STATUS_SCREENSHOT",
        "AFFINITY_STREAMING_SCREENSHOT",
        "AFFINITY_TEST_LOCATION",
    }
)

#: What Kubernetes injects for a Service (``<NAME>_SERVICE_HOST``, ``<NAME>_PORT_80_TCP_ADDR``...).
_SERVICE_LINK = re.compile(
    r"_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)\Z"
)


def check_environment(
    environ: Mapping[str, str],
    sections: Mapping[str, Collection[str]],
    aliases: Mapping[str, tuple[str, str]],
) -> None:
    """ConfigError for an unknown ``AFFINITY_*`` variable or two variables for one key.
    ``sections``: section -> its keys; ``aliases``: short name -> (section, key)."""
    names = {name.upper(): name for name in environ if name.upper().startswith(PREFIX)}
    nested = [f"{PREFIX}{s}__{k}".upper() for s, keys in sections.items() for k in keys]
    known = [*aliases, *nested, *(f"{PREFIX}{s}".upper() for s in sections)]
    for upper, name in sorted(names.items()):
        section = upper[len(PREFIX) :].partition("__")[0].lower()
        if (
            upper in aliases
            or upper in OTHER_VARIABLES
            or section in sections
            or _SERVICE_LINK.search(upper)
        ):
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"unknown environment variable {name}{hint}: a job config reads "
            f"{PREFIX}<SECTION>__<KEY> (sections: {', '.join(sections)}) and the short names "
            "of coordinator.config.ENV_ALIASES"
        )
    for alias, (section, key) in aliases.items():
        for other in (f"{PREFIX}{section}__{key}".upper(), f"{PREFIX}{section}".upper()):
            if alias in names and other in names and _sets(environ[names[other]], other, key):
                raise ConfigError(
                    f"{names[alias]} and {names[other]} both set {section}.{key}: set only one"
                )


def _sets(value: str, name: str, key: str) -> bool:
    """Whether variable ``name`` (a key's, or a whole section's JSON) sets ``key``."""
    if "__" in name[len(PREFIX) :]:
        return True
    try:
        document = json.loads(value)
    except ValueError:
        return False  # (not JSON: pydantic-settings says so)
    return isinstance(document, dict) and key in document
