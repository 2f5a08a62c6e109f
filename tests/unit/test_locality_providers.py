"""The simple LocationIdProviders and the provider registry."""

from __future__ import annotations

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


def test_locality_imports_only_metadata_model() -> None:
    import ast
    from pathlib import Path

    import locality

    root = Path(locality.__file__).parent
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in ("coordinator", "groupers"), f"{path.name} imports {name}"
                if top == "metadata":
                    assert name == "metadata.model", f"{path.name} imports {name}"
