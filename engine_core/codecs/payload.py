"""The codec protocol: what ``Engine(store, codec=...)`` applies to every user value at
rest (see docs/guides/data-at-rest.md)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class PayloadCodec(Protocol):
    """Turns a stored value's bytes (its JSON, UTF-8) into the bytes the store keeps, and
    back. ``decode(encode(data)) == data`` for every ``data``; ``decode`` raises (best:
    :class:`~engine_core.CodecError`, naming what it lacks) for bytes it cannot read.
    Both run for every value written or read, on the event loop: keep them fast."""

    def encode(self, data: bytes) -> bytes:
        """The bytes to store for ``data``."""

    def decode(self, data: bytes) -> bytes:
        """The bytes ``encode`` was given for ``data``."""
