"""``MongoStore``'s options and their defaults, checked before anything is made: the
write and read concerns, the clock skew bound, targeted polling, the codec every
collection reads with, and the sizes of values (``offload_over``, ``max_value``)."""

from __future__ import annotations

from datetime import UTC

from bson.codec_options import CodecOptions
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from engine_core.common.durations import Duration, parse_duration
from engine_core.common.sizes import parse_size
from engine_core.errors import InvalidOptionError
from pikku_mongo.wire.documents import Doc

#: Acknowledged by a majority of the replica set and journaled; a ``WTimeoutError``
#: rather than an endless wait when no majority answers within 10 s.
DEFAULT_WRITE_CONCERN = WriteConcern(w="majority", j=True, wtimeout=10_000)
#: What a failover cannot roll back (used with a majority write concern).
DEFAULT_READ_CONCERN = ReadConcern("majority")
#: The bound on the clock difference between any two hosts (see
#: :mod:`pikku_mongo.wire.skew`).
DEFAULT_MAX_CLOCK_SKEW: Duration = "1s"

#: Datetimes come back timezone-aware in UTC; documents are plain dicts.
CODEC_OPTIONS: CodecOptions[Doc] = CodecOptions(document_class=dict, tz_aware=True, tzinfo=UTC)


def check_options(
    write_concern: object, read_concern: object, max_clock_skew: object
) -> tuple[WriteConcern, ReadConcern, float]:
    """The checked constructor options, defaults filled in: a majority read concern
    goes only with a majority write concern (else a read might miss our own write)."""
    if write_concern is None:
        write_concern = DEFAULT_WRITE_CONCERN
    elif not isinstance(write_concern, WriteConcern):
        raise TypeError(f"write_concern must be a pymongo WriteConcern, not {write_concern!r}")
    if read_concern is None:
        majority = write_concern.document.get("w") == "majority"
        read_concern = DEFAULT_READ_CONCERN if majority else ReadConcern("local")
    elif not isinstance(read_concern, ReadConcern):
        raise TypeError(f"read_concern must be a pymongo ReadConcern, not {read_concern!r}")
    skew = parse_duration(max_clock_skew, what="max_clock_skew")
    return write_concern, read_concern, skew


def check_targeting(targeted_polling: object) -> bool | None:
    """``targeted_polling`` checked: True, False or None."""
    if targeted_polling is not None and not isinstance(targeted_polling, bool):
        raise TypeError(
            "targeted_polling must be True, False or None (on for a sharded cluster), "
            f"not {targeted_polling!r}"
        )
    return targeted_polling


#: A value larger than this (its stored form: JSON text, or what the codec made) goes to
#: GridFS, referenced from its document.
DEFAULT_OFFLOAD_OVER = "1MiB"
#: ``offload_over`` at most: a document then holds at most about half of MongoDB's 16 MiB
#: in values (an input and an output, say), whatever their size.
MAX_OFFLOAD_OVER = 8 * 1024 * 1024
#: ``offload_over`` at least: smaller values cost a GridFS write each for little room.
MIN_OFFLOAD_OVER = 1024
#: The largest value a store keeps by default (``max_value``).
DEFAULT_MAX_VALUE = "256MiB"
#: ``max_value`` at most: a value is held whole in this process's memory.
MAX_MAX_VALUE = 2 * 1024**3


def check_sizes(offload_over: object, max_value: object) -> tuple[int, int]:
    """``offload_over`` and ``max_value`` in bytes, checked (a ``ValueError`` subclass,
    :class:`~engine_core.InvalidOptionError`, otherwise)."""
    over = parse_size(offload_over, what="offload_over")
    if not MIN_OFFLOAD_OVER <= over <= MAX_OFFLOAD_OVER:
        raise InvalidOptionError(
            f"offload_over must be from 1KiB to 8MiB (a document must stay well under "
            f"MongoDB's 16 MiB), not {offload_over!r}"
        )
    most = parse_size(max_value, what="max_value")
    if not over <= most <= MAX_MAX_VALUE:
        raise InvalidOptionError(
            f"max_value must be from offload_over ({over} bytes) to 2GiB, not {max_value!r}"
        )
    return over, most
