"""A replica set's clock on a wire server's replies, for :mod:`tests.support.proxy`:
the test servers return no ``operationTime`` or ``$clusterTime``, so the driver never
sends ``readConcern.afterClusterTime`` to them. :func:`stamp_times` adds both to an
``OP_MSG`` reply (a timestamp that grows with every reply), as a replica set member's
replies carry them."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import bson

_HEADER = struct.Struct("<iiii")
_CHECKSUM_PRESENT = 1


@dataclass
class Exchange:
    """A request's command and the operation time stamped on its reply (if any)."""

    command: dict[str, Any]
    operation_time: bson.Timestamp | None = None

    @property
    def name(self) -> str:
        return next(iter(self.command), "")


def stamp_times(message: bytes, at: bson.Timestamp) -> bytes:
    """``message`` (an OP_MSG reply) with ``operationTime`` and ``$clusterTime`` =
    ``at`` appended to its body document; any checksum is dropped."""
    (flags,) = struct.unpack_from("<I", message, _HEADER.size)
    kind_at = _HEADER.size + 4
    if message[kind_at] != 0:
        return message
    (size,) = struct.unpack_from("<i", message, kind_at + 1)
    body = message[kind_at + 1 : kind_at + 1 + size]
    signature = {"hash": b"\x00" * 20, "keyId": bson.Int64(0)}
    extra = bson.encode(
        {"operationTime": at, "$clusterTime": {"clusterTime": at, "signature": signature}}
    )
    document = body[:-1] + extra[4:-1] + b"\x00"
    document = struct.pack("<i", len(document)) + document[4:]
    rest = message[kind_at + 1 + size :]
    if flags & _CHECKSUM_PRESENT:
        flags &= ~_CHECKSUM_PRESENT
        rest = rest[:-4]
    out = struct.pack("<I", flags) + b"\x00" + document + rest
    _length, request_id, response_to, op_code = _HEADER.unpack_from(message)
    return _HEADER.pack(_HEADER.size + len(out), request_id, response_to, op_code) + out
