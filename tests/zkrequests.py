"""Counting what a kazoo client sends, in tests."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient


def requests_sent(client: KazooClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every request ``client`` sends from now on, by kind (watch re-reads included)."""
    sent: list[str] = []
    original = client._call

    def counted(request: object, async_object: object) -> object:
        sent.append(type(request).__name__)
        return original(request, async_object)

    monkeypatch.setattr(client, "_call", counted)
    return sent
