"""Stable key hashing for SEP-32 key buckets and Flink/Heron key groups.

``stable_hash`` is MurmurHash3 (x86, 32 bit, seed 0) of a canonical byte encoding of the key, so
it is the same in every process, on every platform and in every Python version (unlike
``hash()``, which is salted per process by ``PYTHONHASHSEED``).

Canonical encoding: a one-byte type tag, then the payload:

- ``bytes`` (and ``bytearray``/``memoryview``): ``b"b"`` + the bytes;
- ``str``: ``b"s"`` + its UTF-8 bytes;
- ``int``: ``b"i"`` + its signed decimal digits in ASCII (any size; ``bool`` is rejected);
- ``None``: SEP-32 says a null key uses the message offset, so ``offset`` is hashed as an int
  (a ``None`` key without an offset is an error).

A key bucket is ``stable_hash(key) mod factor`` with ``factor`` a power of two, so bucket ``b``
of factor ``2f`` always descends from bucket ``b mod f`` of factor ``f`` (SEP-32 split/merge).
"""

from __future__ import annotations

__all__ = ["Key", "check_factor", "key_bucket", "murmur3_32", "stable_hash"]

Key = bytes | bytearray | memoryview | str | int | None

_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32 of ``data`` (an unsigned 32-bit int)."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & _M32
    length = len(data)
    end = length - (length % 4)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (_rotl((k * c1) & _M32, 15) * c2) & _M32
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M32
    tail = data[end:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (_rotl((k * c1) & _M32, 15) * c2) & _M32
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def _encode(key: object) -> bytes:
    if isinstance(key, bytes | bytearray | memoryview):
        return b"b" + bytes(key)
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"a key must be bytes, str, int or None, got {type(key).__name__}")
    return b"i" + str(key).encode("ascii")


def stable_hash(key: Key, *, offset: int | None = None) -> int:
    """A deterministic unsigned 32-bit hash of ``key`` (``offset`` stands in for a None key)."""
    if key is None:
        if offset is None:
            raise ValueError("a None key needs the message offset (SEP-32: null keys use it)")
        return murmur3_32(_encode(offset))
    return murmur3_32(_encode(key))


def check_factor(factor: object, name: str = "elasticity_factor") -> int:
    """``factor`` if it is a power of two >= 1, else ValueError naming ``name``."""
    if isinstance(factor, bool) or not isinstance(factor, int):
        raise ValueError(f"{name} must be an integer power of two >= 1, got {factor!r}")
    if factor < 1 or factor & (factor - 1):
        raise ValueError(f"{name} must be a power of two >= 1, got {factor}")
    return factor


def key_bucket(key: Key, factor: int, *, offset: int | None = None) -> int:
    """SEP-32 key bucket: ``stable_hash(key) mod factor`` (``factor`` a power of two)."""
    check_factor(factor, "factor")
    return stable_hash(key, offset=offset) % factor
