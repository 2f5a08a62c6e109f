"""Errors raised by the metadata package: each names what is wrong and where."""

from __future__ import annotations

__all__ = ["CorruptDataError", "JobModelFormatError", "MetadataError"]


class MetadataError(Exception):
    """Base class of every error the metadata package raises on purpose."""


class JobModelFormatError(MetadataError, ValueError):
    """A job-model document breaks the format: ``field`` names the path, ``problem`` says what."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class CorruptDataError(MetadataError):
    """Data read from the store is unusable: ``path`` is the ZooKeeper path, ``problem`` what."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
