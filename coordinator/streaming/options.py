"""The options both stateful queries take (``stateful_foreach_batch``'s :class:`StatefulQuery`
and the Kafka query), in one place: each query's constructor takes its own arguments and
``**options: Unpack[QueryOptions]``, passed on to
:class:`~coordinator.streaming.runtime.QueryRuntime` as they are.

- :class:`RuntimeOptions`: the driver's: ``timeout`` (``"NoTimeout"``, as
  ``applyInPandasWithState``'s), ``storage`` (None: ``state.checkpoint_dir``), ``coordinator``
  (``"embedded"``: a coordinator replica in the driver, or ``"external"``), ``locality_wait``
  (``"30s"``: how long a task waits for its executor) and ``in_force_timeout_s`` (120: how long a
  batch waits for a job model every executor follows);
- :class:`OutputOptions`: a Kafka output topic's: ``output_topic`` (None: none),
  ``output_key_column`` (``"key"``; None: no key), ``output_value_column`` (None: the row as
  JSON), ``transactional`` (True) and ``delivery`` (``"exactly-once"`` or ``"at-least-once"``).

Python does not check a ``TypedDict``'s keys at run time: :func:`check_options` names a
misspelt one (a ``TypeError``, as for any unknown keyword argument). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from locality.spark.state import Storage

__all__ = ["OutputOptions", "QueryOptions", "RuntimeOptions", "check_options"]


class RuntimeOptions(TypedDict, total=False):
    """The driver's options (module docstring)."""

    timeout: str
    storage: Storage | None
    coordinator: str
    locality_wait: str | None
    in_force_timeout_s: float


class OutputOptions(TypedDict, total=False):
    """A Kafka output topic's options (module docstring)."""

    output_topic: str | None
    output_key_column: str | None
    output_value_column: str | None
    transactional: bool
    delivery: str


class QueryOptions(RuntimeOptions, OutputOptions, total=False):
    """Both."""


def check_options(options: Mapping[str, Any], where: str) -> None:
    """A ``TypeError`` naming the first of ``options`` no query takes (``where``: the caller)."""
    known = QueryOptions.__optional_keys__ | QueryOptions.__required_keys__
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
