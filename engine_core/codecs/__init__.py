"""Codecs for values at rest: ``Engine(store, codec=...)`` applies one to every user
value the store keeps (docs/guides/data-at-rest.md).

``PayloadCodec`` is the protocol (``encode(bytes) -> bytes``, ``decode(bytes) ->
bytes``); ``AesGcmCodec`` encrypts with AES-GCM under rotating keys (extra ``crypto``).
"""

from engine_core.codecs.aes_gcm import AesGcmCodec
from engine_core.codecs.payload import PayloadCodec

__all__ = ["AesGcmCodec", "PayloadCodec"]
