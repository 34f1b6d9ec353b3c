"""The clock-skew bound every expiry a store writes is checked against (see "Clocks" in
:mod:`pikku_mongo.store.mongo_store`): shared by the store and its parts."""

from __future__ import annotations

from pikku_mongo.errors import LeaseTooShortError
from pikku_mongo.wire.checks import check_seconds


class SkewBound:
    """``max_clock_skew`` (seconds) and the check of a lease or claim ``ttl`` against it."""

    def __init__(self, max_clock_skew: float) -> None:
        self.max_clock_skew = max_clock_skew
        #: The bound in microseconds, as stored times are.
        self.skew_us = round(max_clock_skew * 1_000_000)

    def ttl(self, ttl: float, what: str) -> float:
        """``ttl`` in seconds, checked against the clock skew bound."""
        seconds = check_seconds(ttl, what)
        if seconds < 2 * self.max_clock_skew:
            raise LeaseTooShortError(
                f"a {what} of {seconds:g} s is shorter than twice max_clock_skew "
                f"({self.max_clock_skew:g} s): the holder would count it lost after "
                f"{seconds - self.max_clock_skew:g} s; use a longer lease_ttl or a smaller "
                "MongoStore(max_clock_skew=...)"
            )
        return seconds
