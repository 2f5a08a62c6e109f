"""The simple LocationIdProviders and the provider registry."""

from __future__ import annotations

import ast
import socket

import pytest

from locality.providers import (
    EnvLocationIdProvider,
    HostnameLocationIdProvider,
    LocationError,
    LocationIdProvider,
    get_location_provider,
)


def test_hostname_provider_is_the_host_name() -> None:
    assert HostnameLocationIdProvider().location_id() == socket.gethostname()


def test_hostname_provider_rejects_an_empty_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "")
    with pytest.raises(LocationError, match="empty host name"):
        HostnameLocationIdProvider().location_id()


def test_env_provider_reads_the_default_variable() -> None:
    provider = EnvLocationIdProvider(environ={"AFFINITY_LOCATION_ID": "zone-a/rack-2/host-9"})
    assert provider.location_id() == "zone-a/rack-2/host-9"


def test_env_provider_reads_a_named_variable() -> None:
    provider = EnvLocationIdProvider("MY_LOC", environ={"MY_LOC": " host-1 "})
    assert provider.location_id() == "host-1"


def test_env_provider_reads_os_environ_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = EnvLocationIdProvider("AFFINITY_TEST_LOCATION")
    monkeypatch.setenv("AFFINITY_TEST_LOCATION", "late")
    assert provider.location_id() == "late"


def test_env_provider_names_the_unset_variable() -> None:
    with pytest.raises(LocationError, match="AFFINITY_LOCATION_ID is not set"):
        EnvLocationIdProvider(environ={}).location_id()


def test_env_provider_names_the_empty_variable() -> None:
    with pytest.raises(LocationError, match="MY_LOC is empty"):
        EnvLocationIdProvider("MY_LOC", environ={"MY_LOC": "  "}).location_id()


def test_registry_builds_each_provider() -> None:
    host = get_location_provider("host")
    env = get_location_provider("env", var="X_LOC", environ={"X_LOC": "here"})
    assert isinstance(host, HostnameLocationIdProvider)
    assert isinstance(env, EnvLocationIdProvider)
    assert env.location_id() == "here"
    for provider in (host, env, get_location_provider("kubernetes")):
        assert isinstance(provider, LocationIdProvider)


def test_registry_rejects_unknown_names_and_options() -> None:
    with pytest.raises(
        ValueError, match=r"unknown location provider 'spark'.*host, env, kubernetes"
    ):
        get_location_provider("spark")
    with pytest.raises(ValueError, match="takes no options"):
        get_location_provider("host", var="X")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bogus'\]"):
        get_location_provider("env", bogus=1)
    with pytest.raises(ValueError, match="location provider 'kubernetes'"):
        get_location_provider("kubernetes", bogus=1)


#: Imports of locality that reach up: none (``stateful_foreach_batch`` lives in
#: ``coordinator.streaming``, DESIGN.md "Spark streaming").
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (type hints only, never run)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            hidden.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return hidden


def _locality_imports() -> dict[str, set[str]]:
    """Module name -> absolute names it imports (anywhere in the module but under ``if
    TYPE_CHECKING:``), for every module of the ``locality`` package and its subpackages."""
    from pathlib import Path

    import locality

    root = Path(locality.__file__).parent
    imports: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names: set[str] = set()
        tree = ast.parse(path.read_text())
        hidden = _type_checking_blocks(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.level == 0, f"{module}: relative import of {node.module}"
                names.add(node.module)
        imports[module] = names
    return imports


def test_locality_imports_only_metadata_model() -> None:
    imports = _locality_imports()
    assert {"locality.providers", "locality.spark.pinning"} <= set(imports)
    for module, names in imports.items():
        for name in names:
            top = name.split(".")[0]
            if (module, name) in ALLOWED_UPWARD:
                continue
            assert top not in ("coordinator", "groupers"), f"{module} imports {name}"
            if top == "metadata":
                assert name == "metadata.model", f"{module} imports {name}"


def test_locality_modules_import_each_other_without_cycles() -> None:
    imports = _locality_imports()
    graph = {
        module: {name for name in names if name in imports and name != module}
        for module, names in imports.items()
    }
    # A package's __init__ re-exports its modules: an edge into a package is one into its
    # modules, so only module -> module edges (package __init__ excluded as a target) count.
    packages = {"locality", "locality.spark"}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for name in sorted(graph[module] - packages):
            visit(name, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert "locality.providers" not in graph["locality.kubernetes"]
    assert graph["locality.base"] == set()


def test_public_names_stay_where_they_were() -> None:
    import locality.base
    import locality.providers
    import locality.spark

    assert locality.providers.LocationError is locality.base.LocationError
    assert locality.providers.LocationIdProvider is locality.base.LocationIdProvider
    # Every public name of the former locality/spark.py module except executor registration
    # (now coordinator.member.executors).
    spark_names = {
        "DRIVER_ID",
        "EXECUTOR_LOCATION_ENV",
        "LOCALITY_WAIT_KEYS",
        "PinnedRun",
        "PinnedTask",
        "ProbedLocations",
        "SparkExecutor",
        "SparkExecutorLocationIdProvider",
        "SparkExecutors",
        "current_executor_host",
        "current_executor_id",
        "executor_host_location",
        "pinned_rdd",
        "run_pinned",
    }
    # (the Structured Streaming API moved up to coordinator.streaming: placement only here)
    assert set(locality.spark.__all__) == spark_names
    for name in spark_names:
        assert hasattr(locality.spark, name), name
