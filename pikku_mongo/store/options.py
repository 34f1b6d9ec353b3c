"""``MongoStore``'s options and their defaults, checked before anything is made: the
write and read concerns, the clock skew bound, targeted polling, and the codec every
collection reads with."""

from __future__ import annotations

from datetime import UTC

from bson.codec_options import CodecOptions
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from engine_core.common.durations import Duration, parse_duration
from pikku_mongo.wire.documents import Doc

#: Acknowledged by a majority of the replica set and journaled; a ``WTimeoutError``
#: rather than an endless wait when no majority answers within 10 s.
DEFAULT_WRITE_CONCERN = WriteConcern(w="majority", j=True, wtimeout=10_000)
#: What a failover cannot roll back (used with a majority write concern).
DEFAULT_READ_CONCERN = ReadConcern("majority")
#: The bound on the clock difference between any two hosts (see "Clocks" in
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
