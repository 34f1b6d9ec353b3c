"""The clock-skew bound every expiry a store writes is checked against: shared by the
store (:mod:`pikku_mongo.store.mongo_store`) and its parts.

Clocks. A lease's (or a claim's) expiry is written by its holder, from the holder's
clock (``now + ttl``), and judged by every other host against its own clock: no server
clock is used (nx-27017 serves neither ``$$NOW`` nor pipeline updates). If the clocks of
any two hosts differ by at most ``S = max_clock_skew``:

* a taker takes over only ``S`` after the stored expiry by its own clock
  (``expires <= now - S``: :meth:`~pikku_mongo.MongoStore.acquire_lease`,
  :meth:`~pikku_mongo.MongoStore.requeue_lapsed_claims`). A taker whose clock runs
  ``d <= S`` ahead of the holder's acts at holder time ``expires + S - d >= expires``:
  never while the holder may still hold it;
* a holder counts its lease lost ``S`` before the stored expiry (``expires > now + S``
  to renew it: :meth:`~pikku_mongo.MongoStore.refresh_lease`,
  :meth:`~pikku_mongo.MongoStore.extend_claim`; the ``Lease.expires_at`` it is handed
  is already ``S`` early). It judges a value its own
  clock wrote, so skew between hosts cancels out there; the margin covers its own
  clock being stepped (NTP) between writing the expiry and judging it, and makes the
  gap between the last moment a holder acts and the first moment a taker acts ``2 S``.

So ``ttl`` must be at least ``2 S`` (:class:`LeaseTooShortError` otherwise), and a
takeover after a holder dies takes ``ttl + S`` (plus the recovery interval). The
bound is only as good as the hosts' clock sync:
:meth:`~pikku_mongo.MongoStore.clock_offset` measures this host against the server
(``hello`` ``localTime``), ``init`` logs a warning when this host is certainly more
than ``S / 2`` off (two hosts each within ``S / 2`` of the server are within ``S`` of
each other), and ``pikku-mongo doctor`` reports it. Due times of sleeps and retries
are not leases: a skewed clock fires them a little early or late, never twice.
"""

from __future__ import annotations

import logging

from engine_core.store import TimeSource
from pikku_mongo.errors import LeaseTooShortError
from pikku_mongo.wire.checks import check_seconds
from pikku_mongo.wire.server import ClockOffset


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


def warn_if_beyond(log: logging.Logger, measured: ClockOffset | None, bound: float) -> None:
    """Log ``measured`` (this host against the server) when it is certainly beyond half
    of the skew ``bound``: two hosts each within half of it are within it of each other."""
    if measured is None:
        log.info("the server reports no localTime: the clock offset is not measured")
    elif measured.beyond(bound / 2):
        log.warning(
            "this host's clock is %+.3f s (± %.3f s) off the MongoDB server's: beyond "
            "half of max_clock_skew (%g s), so lease expiry may misjudge hosts whose "
            "clocks differ by more than the bound; fix the clock sync (NTP) or raise "
            "MongoStore(max_clock_skew=...)",
            measured.offset,
            measured.uncertainty,
            bound,
        )


def refuse_virtual(store: object, clock: TimeSource) -> None:
    """``ValueError`` for a virtual clock: every host of a fleet judges the leases, claims
    and due times a MongoStore holds against its own real clock, and so do the CLI and the
    dashboard, so a virtual clock in one process would take other processes' leases and
    fire their timers early."""
    if clock.virtual:
        raise ValueError(
            f"{store!r} cannot follow a virtual clock ({clock!r}): the hosts of a fleet, "
            "the CLI and the dashboard judge the leases, claims and due times a "
            "MongoStore holds against their real clocks. Test with virtual time on an "
            "InMemoryStore (engine_core.memory.InMemoryStore)"
        )
