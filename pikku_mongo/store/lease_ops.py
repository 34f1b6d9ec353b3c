"""``MongoStore``'s store-wide leases (the recovery lease): the ``leases`` collection,
``{_id: key, holder, token, expires_us, expires_at}``. Queries judge ``expires_us``
against this host's clock with the ``max_clock_skew`` margin (see
:mod:`pikku_mongo.wire.skew`); the BSON date ``expires_at`` only feeds the TTL
index that removes the document a day after the lease ended."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace
from datetime import timedelta

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from engine_core.common.clock import utcnow
from engine_core.records import Lease
from pikku_mongo.wire.checks import check_int, check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import EPOCH, pack, to_us
from pikku_mongo.wire.event_docs import lease_expiry, lease_from_doc
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.wire.skew import SkewBound

_AFTER = ReturnDocument.AFTER


@dataclass(eq=False)
class LeaseOps:
    """The lease methods of :class:`~pikku_mongo.MongoStore`."""

    leases: AsyncCollection[Doc]
    _: KW_ONLY
    skew: SkewBound

    def _held(self, doc: Doc) -> Lease:
        """The lease as its holder must see it: ending ``max_clock_skew`` early."""
        lease = lease_from_doc(doc)
        early = timedelta(microseconds=self.skew.skew_us)
        return replace(lease, expires_at=lease.expires_at - early)

    @transient_retry
    async def acquire_lease(self, key: str, holder: str, ttl: float) -> Lease | None:
        """1 findAndModify: an upsert that takes over a lease expired ``max_clock_skew``
        ago (by this host's clock) or creates a first one (token 1). A live lease makes
        the upsert collide with its ``_id``: None."""
        lease_key = pack(check_str(key, "lease key"))
        who = pack(check_str(holder, "lease holder"))
        now = utcnow()
        expires = now + timedelta(seconds=self.skew.ttl(ttl, "lease ttl"))
        try:
            doc = await self.leases.find_one_and_update(
                {"_id": lease_key, "expires_us": {"$lte": to_us(now) - self.skew.skew_us}},
                {"$set": {"holder": who, **lease_expiry(expires)}, "$inc": {"token": 1}},
                upsert=True,
                return_document=_AFTER,
            )
        except DuplicateKeyError:
            return None  # held and live
        # nx-27017 answers a colliding upsert with no document instead of an error.
        return self._held(doc) if doc is not None else None

    @transient_retry
    async def refresh_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """1 findAndModify, guarded by holder, token and expiry: a lease within
        ``max_clock_skew`` of its stored expiry counts as lost already."""
        now = utcnow()
        doc = await self.leases.find_one_and_update(
            {
                "_id": pack(check_str(lease.key, "lease key")),
                "holder": pack(check_str(lease.holder, "lease holder")),
                "token": check_int(lease.token, "lease token"),
                "expires_us": {"$gt": to_us(now) + self.skew.skew_us},
            },
            {"$set": lease_expiry(now + timedelta(seconds=self.skew.ttl(ttl, "lease ttl")))},
            return_document=_AFTER,
        )
        return self._held(doc) if doc is not None else None

    @transient_retry
    async def release_lease(self, lease: Lease) -> None:
        """1 update, guarded by holder and token; the lease expires at the epoch and its
        document (so its token) stays until garbage-collected a day from now."""
        await self.leases.update_one(
            {
                "_id": pack(check_str(lease.key, "lease key")),
                "holder": pack(check_str(lease.holder, "lease holder")),
                "token": check_int(lease.token, "lease token"),
            },
            {"$set": lease_expiry(EPOCH, gc_from=utcnow())},
        )
