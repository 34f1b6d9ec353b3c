"""The clock-skew bound every expiry a store writes is checked against: shared by the store
and its parts.

Clocks. A lease's (or a claim's) expiry is written by its holder, from the holder's
clock (``now + ttl``), and judged by every other host against its own clock: no server
clock is used (nx-27017 serves neither ``$$NOW`` nor pipeline updates). If the clocks of
any two hosts differ by at most ``S = max_clock_skew``:

* a taker takes over only ``S`` after the stored expiry by its own clock (``expires <=
  now - S``: ``MongoStore.acquire_lease``, ``MongoStore.requeue_lapsed_claims``). A
  taker whose clock runs ``d <= S`` ahead of the holder's acts at holder time ``expires
  + S - d >= expires``: never while the holder may still hold it;
* a holder counts its lease lost ``S`` before the stored expiry (``expires > now + S``
  to renew it: ``MongoStore.refresh_lease``, ``MongoStore.extend_claim``; the
  ``Lease.expires_at`` it is handed is already ``S`` early). It judges a value its own
  clock wrote, so skew between hosts cancels out there; the margin covers its own clock
  being stepped (NTP) between writing the expiry and judging it, and makes the gap
  between the last moment a holder acts and the first moment a taker acts ``2 S``.

So ``ttl`` must be at least ``2 S`` (:class:`LeaseTooShortError` otherwise), and a
takeover after a holder dies takes ``ttl + S`` (plus the recovery interval). The bound
is only as good as the hosts' clock sync: ``MongoStore.clock_offset`` measures this host
against the server (``hello`` ``localTime``), ``init`` logs a warning when this host is
certainly more than ``S / 2`` off (two hosts each within ``S / 2`` of the server are
within ``S`` of each other), and ``pikku-mongo doctor`` reports it. Due times of sleeps
and retries are not leases: a skewed clock fires them a little early or late, never
twice.
"""

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
