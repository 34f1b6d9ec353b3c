"""``AesGcmCodec``: AES-GCM with the key id stored beside each value, so keys rotate
without rewriting what was stored (extra ``crypto``: ``pip install 'pikku-mongo[crypto]'``,
the ``cryptography`` package).

A stored value is ``01 | len(key id) | key id | nonce (12 bytes) | ciphertext and tag``:
a version byte, the key id in UTF-8 (1 to 255 bytes), a random nonce per value, and
AES-GCM's output (the plaintext's length plus a 16-byte tag). New values use the
``current`` key; a value decodes with the key its id names, while the codec holds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from engine_core.errors import CodecError

_VERSION = 1
_NONCE = 12
_KEY_SIZES = (16, 24, 32)


def _aead(key_id: str, key: object) -> Any:
    if not isinstance(key_id, str) or not 1 <= len(key_id.encode("utf-8")) <= 255:
        raise CodecError(f"a key id must be a string of 1 to 255 bytes, not {key_id!r:.80}")
    if not isinstance(key, bytes | bytearray) or len(key) not in _KEY_SIZES:
        size = f"{len(key)} bytes" if isinstance(key, bytes | bytearray) else type(key).__name__
        raise CodecError(
            f"key {key_id!r} is {size}; AES-GCM takes a key of 16, 24 or 32 bytes "
            "(make one with os.urandom(32))"
        )
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - the extra is part of the test install
        raise ImportError(
            "AesGcmCodec needs the cryptography package: pip install 'pikku-mongo[crypto]'"
        ) from exc
    return AESGCM(bytes(key))


class AesGcmCodec:
    """AES-GCM (``keys``: key id to a 16, 24 or 32 byte key) encoding new values with the
    key ``current`` and decoding each value with the key its stored id names.

    Rotation: add the new key to ``keys`` in every process first, then make it
    ``current``; keep an old key as long as values encrypted with it are stored (their
    runs' ``retention``). A value whose key id the codec does not hold raises
    :class:`~engine_core.CodecError` naming the id. Bad keys, an empty ``keys`` or a
    ``current`` not in ``keys`` raise :class:`~engine_core.CodecError` (a ``ValueError``)
    here."""

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise CodecError("AesGcmCodec needs at least one key: keys={'k1': key, ...}")
        self._aeads = {key_id: _aead(key_id, key) for key_id, key in keys.items()}
        if current not in self._aeads:
            raise CodecError(
                f"current={current!r} is not among the key ids {sorted(self._aeads)}; "
                "pass the id of one of the keys"
            )
        self.current = current
        kid = current.encode("utf-8")
        self._header = bytes([_VERSION, len(kid)]) + kid
        self._current = self._aeads[current]

    def __repr__(self) -> str:  # never the keys themselves
        return f"AesGcmCodec(keys={sorted(self._aeads)}, current={self.current!r})"

    def encode(self, data: bytes) -> bytes:
        """``data`` encrypted with the current key, its id and nonce in front."""
        nonce = os.urandom(_NONCE)
        sealed: bytes = self._current.encrypt(nonce, data, None)
        return self._header + nonce + sealed

    def decode(self, data: bytes) -> bytes:
        """The plaintext of a value :meth:`encode` made with any key this codec holds."""
        if len(data) < 2 or data[0] != _VERSION or len(data) < 2 + data[1] + _NONCE + 16:
            raise CodecError("a stored value is not in AesGcmCodec's format")
        end = 2 + data[1]
        key_id = data[2:end].decode("utf-8", "replace")
        aead = self._aeads.get(key_id)
        if aead is None:
            raise CodecError(
                f"a stored value is encrypted with key id {key_id!r}, which this "
                f"AesGcmCodec does not hold (it holds {sorted(self._aeads)}): add that key "
                "to keys="
            )
        nonce = data[end : end + _NONCE]
        try:
            plain: bytes = aead.decrypt(nonce, data[end + _NONCE :], None)
        except Exception as exc:  # cryptography's InvalidTag
            raise CodecError(
                f"a stored value failed authentication with key id {key_id!r}: a different "
                "key under that id, or altered data"
            ) from exc
        return plain
