"""The scalar encodings of stored documents: identity strings, values and times.

* Values are stored as JSON text, so a user key such as ``"$set"`` or ``"a.b"`` is just
  characters inside a string; a value the engine's codec sealed as BSON binary; one kept
  in GridFS as a reference to its file (:class:`Offloaded`).
* Identity strings that filters and sorts compare go through :func:`pack`, an
  order-preserving escape of the NUL character (nx-27017 cannot match a string
  containing NUL by equality). It is the identity on every string without ``\\x00`` or
  ``\\x01``.
* Times are integer microseconds since the Unix epoch (UTC): see ``documents``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from bson import ObjectId

from engine_core.records import Apart

Doc = dict[str, Any]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_UNESCAPE = re.compile("\x01(.)", re.DOTALL)


#: Never inside a packed string (its ``\x01`` is always followed by ``\x01`` or
#: ``\x02``), so an ``_id`` made of packed parts joined by it names one tuple: a step's
#: (run id, key), a queue line's (queue, ...).
ID_SEPARATOR = "\x01\x03"


def pack(value: str) -> str:
    """Escape NUL order-preservingly: ``\\x00`` -> ``\\x01\\x01``, ``\\x01`` -> ``\\x01\\x02``."""
    if "\x00" not in value and "\x01" not in value:
        return value
    return value.replace("\x01", "\x01\x02").replace("\x00", "\x01\x01")


def unpack(value: str) -> str:
    """The string :func:`pack` made ``value`` from."""
    if "\x01" not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\x00" if m.group(1) == "\x01" else "\x01", value)


def pack_opt(value: str | None) -> str | None:
    """:func:`pack`, None kept."""
    return None if value is None else pack(value)


def unpack_opt(value: Any) -> str | None:
    """:func:`unpack`, None kept."""
    return None if value is None else unpack(cast(str, value))


def dump_text(value: Any) -> str:
    """A JSON-shaped value as JSON text (ASCII, so it always encodes as BSON)."""
    return json.dumps(value, separators=(",", ":"))


class Offloaded(Apart):
    """A value kept in GridFS (``pikku_mongo.store.offload_ops``): its file's id, its
    size as stored, and whether it is the bytes a codec made (``sealed``) or JSON text.
    A list shows it as "offloaded (N bytes)"; a write stores the reference again."""

    file_id: ObjectId
    size: int
    sealed: bool

    def __new__(cls, file_id: ObjectId, size: int, sealed: bool) -> Offloaded:
        shown = super().__new__(cls, f"offloaded ({size:,} bytes)")
        assert isinstance(shown, Offloaded)
        shown.file_id, shown.size, shown.sealed = file_id, int(size), bool(sealed)
        return shown

    def reference(self) -> Doc:
        """What its document holds in its place."""
        return {"gridfs": self.file_id, "size": self.size, "sealed": self.sealed}

    @classmethod
    def of(cls, reference: Doc) -> Offloaded:
        """The value a document's :meth:`reference` names."""
        return cls(reference["gridfs"], reference["size"], reference["sealed"])


def dump_value(value: Any) -> Any:
    """A JSON-shaped value as JSON text (ASCII, so it always encodes as BSON); a value
    the engine's codec sealed (``bytes``) as it is (BSON binary); one kept in GridFS as
    its reference (a subdocument)."""
    if type(value) is bytes:
        return value
    if type(value) is Offloaded:
        return value.reference()
    return dump_text(value)


def load_value(stored: Any) -> Any:
    """The value ``stored`` (as :func:`dump_value` wrote it) holds; None for None (one
    kept in GridFS: its :class:`Offloaded` reference, fetched where a read needs it)."""
    if stored is None or type(stored) is bytes:
        return stored
    if type(stored) is dict:
        return Offloaded.of(stored)
    return json.loads(cast(str, stored))


def to_us(moment: datetime) -> int:
    """A time as integer microseconds since the epoch (a naive time is taken as UTC,
    as PyMongo takes it)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // _ONE_US


def from_us(value: Any) -> datetime:
    """The aware UTC datetime of microseconds since the epoch."""
    return EPOCH + timedelta(microseconds=int(value))


#: Lower bound for "has a time" (``datetime.min``): ``{"$gte": MIN_TIME}`` matches every
#: stored time and never null or a missing field, on MongoDB and on both test servers
#: (``$type`` is not portable, and mongoeco counts null below any number in ``$lte``).
MIN_TIME = to_us(datetime.min)


def opt_to_us(moment: datetime | None) -> int | None:
    """:func:`to_us`, None kept."""
    return None if moment is None else to_us(moment)


def opt_from_us(value: Any) -> datetime | None:
    """:func:`from_us`, None kept."""
    return None if value is None else from_us(value)
