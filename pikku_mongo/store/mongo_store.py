"""``MongoStore``: the engine's store protocol on MongoDB, via PyMongo's native async API.

Collections (``prefix`` + name):

* ``runs``: ``_id`` = run id; the control plane of a run's passes (status, token,
  pass counter, the run's lease, ``pending_pass``, ``inflight`` keyed by a digest of the
  step key, and the ``journal`` of step outcomes not yet copied to their step records).
  See :mod:`pikku_mongo.store.run_ops`.
* ``steps``: one document per step, ``_id`` built from (run_id, key); the attempt
  history is embedded. See :mod:`pikku_mongo.store.step_ops`.
* ``events``: ``_id`` = event id (sortable by send time); consumed oldest first.
* ``leases``: ``{_id: key, holder, token, expires_us, expires_at}`` (the store-wide
  recovery lease); queries judge ``expires_us``; the BSON date ``expires_at`` only feeds
  a TTL index that removes the document a day after the lease ended (see ``indexes``).
* ``schedules``: ``_id`` = schedule name; its timing, input and next fire. See
  :mod:`pikku_mongo.store.schedule_ops`.
* ``meta``: the storage format version (see :mod:`pikku_mongo.store.migrations`).
* ``forks``: ``_id`` = a fork's run id, while the fork is being made (its steps
  written, its run not yet): see :mod:`pikku_mongo.store.fork_ops`.
* ``dedup``: ``_id`` = a (queue, dedup id) key; the run holding it (see
  :mod:`pikku_mongo.store.dedup_ops`).
* ``streams`` and ``heartbeats``: a run's stream entries, one document each, and its
  steps' last heartbeats. See :mod:`pikku_mongo.store.stream_ops`.
* ``jobs`` and ``lines``: with targeted polling, one entry per claimable queue job (by
  step function and due time) and per run waiting in a queue's line. See
  :mod:`pikku_mongo.store.job_index` and :mod:`pikku_mongo.store.line_index`.
* ``queues``: ``_id`` = queue name; each queue's admission state, replaced by
  compare-and-set on its version. See :mod:`pikku_mongo.store.queue_ops`.

Every guard of the protocol is one filter of one single-document write, so it is
atomic on the server; expiry is always judged by the filter against the client's clock,
never by TTL deletion. Writes on the hot path are group-committed
(:mod:`pikku_mongo.writes.batcher`). See each method for what it costs in commands.

Durability: every collection handle carries the store's write concern (default
``majority``, journaled, 10 s ``wtimeout``) and read concern (default ``majority`` when
writes are majority-acknowledged, else ``local``, so the store always reads its own
writes). The client's or the URI's own concerns are not inherited: an application's
shared client often runs with ``w=1``. Pass ``write_concern=`` / ``read_concern=`` to
choose. Reads that decide something are causally consistent where the server keeps a
clock (:mod:`pikku_mongo.wire.causal`): they wait for this client's last acknowledged write.

Clocks. A lease's (or a claim's) expiry is written by its holder, from the holder's
clock (``now + ttl``), and judged by every other host against its own clock: no server
clock is used (nx-27017 serves neither ``$$NOW`` nor pipeline updates). If the clocks of
any two hosts differ by at most ``S = max_clock_skew``:

* a taker takes over only ``S`` after the stored expiry by its own clock
  (``expires <= now - S``: :meth:`MongoStore.acquire_lease`,
  :meth:`MongoStore.requeue_lapsed_claims`). A taker whose clock runs ``d <= S`` ahead
  of the holder's acts at holder time ``expires + S - d >= expires``: never while the
  holder may still hold it;
* a holder counts its lease lost ``S`` before the stored expiry (``expires > now + S``
  to renew it: :meth:`MongoStore.refresh_lease`, :meth:`MongoStore.extend_claim`; the
  ``Lease.expires_at`` it is handed is already ``S`` early). It judges a value its own
  clock wrote, so skew between hosts cancels out there; the margin covers its own
  clock being stepped (NTP) between writing the expiry and judging it, and makes the
  gap between the last moment a holder acts and the first moment a taker acts ``2 S``.

So ``ttl`` must be at least ``2 S`` (:class:`LeaseTooShortError` otherwise), and a
takeover after a holder dies takes ``ttl + S`` (plus the recovery interval). The
bound is only as good as the hosts' clock sync: :meth:`MongoStore.clock_offset`
measures this host against the server (``hello`` ``localTime``), ``init`` logs a
warning when this host is certainly more than ``S / 2`` off (two hosts each within
``S / 2`` of the server are within ``S`` of each other), and ``pikku-mongo doctor``
reports it. Due times of sleeps and retries are not leases: a skewed clock fires them a
little early or late, never twice.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, timedelta
from typing import Any, cast

from bson.codec_options import CodecOptions
from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from engine_core.durations import Duration, parse_duration
from engine_core.records import EventRecord, Lease, utcnow
from pikku_mongo.errors import MissingDatabaseError
from pikku_mongo.store.declared_ops import DeclaredOps
from pikku_mongo.store.fork_ops import ForkOps
from pikku_mongo.store.job_index import JobIndex
from pikku_mongo.store.line_index import LineIndex
from pikku_mongo.store.listing import ListingOps, backfill_made
from pikku_mongo.store.migrations import migrate
from pikku_mongo.store.queue_ops import QueueOps
from pikku_mongo.store.run_ops import RunOps
from pikku_mongo.store.schedule_ops import ScheduleOps
from pikku_mongo.store.step_ops import StepOps
from pikku_mongo.store.stream_ops import StreamOps
from pikku_mongo.store.worker_ops import WorkerOps
from pikku_mongo.wire.causal import OperationClock, find_clock
from pikku_mongo.wire.checks import check_int, check_str
from pikku_mongo.wire.command_metrics import CommandCounter
from pikku_mongo.wire.documents import (
    Doc,
    event_from_doc,
    event_to_doc,
    lease_expiry,
    lease_from_doc,
)
from pikku_mongo.wire.encoding import EPOCH, pack, to_us
from pikku_mongo.wire.filters import eq
from pikku_mongo.wire.indexes import create_indexes
from pikku_mongo.wire.journal_text import RecentTexts
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.wire.server import ClockOffset, hello, measure_clock_offset, topology
from pikku_mongo.wire.uri import database_name, redact
from pikku_mongo.wire.watch import job_inserts
from pikku_mongo.writes.batcher import Batcher
from pikku_mongo.writes.op_ids import PassOps

log = logging.getLogger("pikku_mongo.store.mongo_store")

#: Acknowledged by a majority of the replica set and journaled; a ``WTimeoutError``
#: rather than an endless wait when no majority answers within 10 s.
DEFAULT_WRITE_CONCERN = WriteConcern(w="majority", j=True, wtimeout=10_000)
#: What a failover cannot roll back (used with a majority write concern).
DEFAULT_READ_CONCERN = ReadConcern("majority")
#: The bound on the clock difference between any two hosts (see "Clocks" above).
DEFAULT_MAX_CLOCK_SKEW: Duration = "1s"

#: Datetimes come back timezone-aware in UTC; documents are plain dicts.
CODEC_OPTIONS: CodecOptions[Doc] = CodecOptions(document_class=dict, tz_aware=True, tzinfo=UTC)
_AFTER = ReturnDocument.AFTER
_BY_ID = [("_id", 1)]


class MongoStore(
    RunOps,
    ListingOps,
    StepOps,
    QueueOps,
    ScheduleOps,
    WorkerOps,
    DeclaredOps,
    ForkOps,
    StreamOps,
):
    """The engine's store on a MongoDB database (see the module docstring)."""

    def __init__(
        self,
        database: AsyncDatabase[Any],
        *,
        prefix: str = "pikku_",
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
        max_clock_skew: Duration = DEFAULT_MAX_CLOCK_SKEW,
        change_streams: bool = True,
        targeted_polling: bool | None = None,
    ) -> None:
        """``write_concern`` / ``read_concern``: pymongo objects replacing the durable
        defaults (module docstring). ``max_clock_skew``: seconds or a string such as
        ``"500ms"``, the bound on clock differences between hosts that lease expiry
        tolerates (module docstring, "Clocks"); 0 on a single host. ``change_streams``:
        wake idle workers from a change stream where the server serves one.
        ``targeted_polling``: keep the job and line indexes
        (:mod:`pikku_mongo.store.job_index`, :mod:`pikku_mongo.store.line_index`) so a worker's poll
        for due jobs and an admitter's read of its line go to one shard, not every
        shard; None (the default) turns it on at :meth:`init` when the server is a
        mongos (a sharded cluster) and leaves it off elsewhere, where it would only
        cost writes. Every process of a fleet must agree. Deciding reads are causally
        consistent when ``database``'s client has a
        :class:`~pikku_mongo.wire.causal.OperationClock` among its event listeners."""
        if not isinstance(database, AsyncDatabase):
            raise TypeError(
                "MongoStore needs a pymongo AsyncDatabase (from pymongo.AsyncMongoClient), "
                f"not {type(database).__name__}"
            )
        check_str(prefix, "collection prefix")
        self.write_concern, self.read_concern, self.max_clock_skew = _options(
            write_concern, read_concern, max_clock_skew
        )
        self._skew_us = round(self.max_clock_skew * 1_000_000)
        self._watch = bool(change_streams)
        self.targeted_polling = _check_targeting(targeted_polling)
        self.database = database
        self.prefix = prefix
        self._client: AsyncMongoClient[Any] | None = None  # set only when we own it
        # Deciding reads wait for this client's newest known operation time
        # (pikku_mongo.wire.causal); without its listener they are plain majority reads.
        self._clock = find_clock(database.client)
        self._ttl_refused = False
        self.runs = self._collection("runs")
        self.steps = self._collection("steps")
        self.events = self._collection("events")
        self.leases = self._collection("leases")
        self.meta = self._collection("meta")
        self.queues = self._collection("queues")
        self.schedules = self._collection("schedules")
        self.workers = self._collection("workers")
        self.queue_limits = self._collection("queue_limits")
        self.forks = self._collection("forks")
        self.dedup = self._collection("dedup")
        self.streams = self._collection("streams")
        self.heartbeats = self._collection("heartbeats")
        self.jobs = self._collection("jobs")
        self.lines = self._collection("lines")
        self.job_index: JobIndex | None = None
        self.line_index: LineIndex | None = None
        if targeted_polling:
            self._target_polls()
        # Group commit, one queue per collection written on the hot path. A document a
        # guarded upsert created has none of the fields every real document has.
        self.run_writes = Batcher(self.runs, {"workflow": {"$exists": False}}, beside=self.steps)
        self.pass_ops = PassOps()
        self.recent_texts = RecentTexts()
        self.step_writes = Batcher(self.steps, {"fmt": {"$exists": False}})
        self.dedup_writes = Batcher(self.dedup, {"run_id": {"$exists": False}})
        self.stream_writes = Batcher(
            self.streams, {"pos": {"$exists": False}}, ride_on=self.run_writes
        )

    @classmethod
    def from_uri(
        cls,
        uri: str,
        *,
        prefix: str = "pikku_",
        write_concern: WriteConcern | None = None,
        read_concern: ReadConcern | None = None,
        max_clock_skew: Duration = DEFAULT_MAX_CLOCK_SKEW,
        change_streams: bool = True,
        targeted_polling: bool | None = None,
        **client_kwargs: Any,
    ) -> MongoStore:
        """A store on the database named in ``uri``'s path, with a client of its own
        (closed by :meth:`close`). ``client_kwargs`` go to ``AsyncMongoClient``; the
        other options are the constructor's.

        Raises :class:`MissingDatabaseError` when the URI names no database."""
        check_str(uri, "MongoDB URI")
        name = database_name(uri)
        if not name:
            raise MissingDatabaseError(
                f"the MongoDB URI {redact(uri)!r} names no database: put one in its path, "
                "e.g. mongodb://host:27017/mydb, or pass MongoStore(database=...)"
            )
        _options(write_concern, read_concern, max_clock_skew)  # before making a client
        _check_targeting(targeted_polling)
        check_str(prefix, "collection prefix")
        listeners = [*(client_kwargs.pop("event_listeners", None) or []), CommandCounter()]
        if not any(isinstance(listener, OperationClock) for listener in listeners):
            listeners.append(OperationClock())
        client: AsyncMongoClient[Any] = AsyncMongoClient(
            uri, event_listeners=listeners, **client_kwargs
        )
        store = cls(
            client.get_database(name),
            prefix=prefix,
            write_concern=write_concern,
            read_concern=read_concern,
            max_clock_skew=max_clock_skew,
            change_streams=change_streams,
            targeted_polling=targeted_polling,
        )
        store._client = client
        return store

    def _collection(self, name: str) -> AsyncCollection[Doc]:
        collection = self.database.get_collection(
            self.prefix + name,
            codec_options=CODEC_OPTIONS,
            # The guarantees need read-your-writes: never read from a secondary.
            read_preference=ReadPreference.PRIMARY,
            write_concern=self.write_concern,
            read_concern=self.read_concern,
        )
        return cast(AsyncCollection[Doc], collection)

    def __repr__(self) -> str:
        return f"MongoStore(database={self.database.name!r}, prefix={self.prefix!r})"

    async def init(self) -> None:
        """Bring the database to this version's storage format (see
        :mod:`pikku_mongo.store.migrations`) and create every index (1 find when nothing needs
        migrating, then 3-4 ``createIndexes`` commands), then measure this host's clock
        against the server's (3 ``hello``; see :meth:`clock_offset`)."""
        await self._prepare()
        try:
            measured = await self.clock_offset(samples=3)
            self.measured_offset = measured.offset if measured is not None else None
        except Exception as exc:  # a measurement, never a reason to fail start-up
            log.info("could not measure the clock offset from the server: %s", exc)

    @transient_retry
    async def _prepare(self) -> None:
        # Before any write: on nx-27017 a command sent after an unacknowledged (w=0)
        # index build was answered with another request's reply.
        if self.targeted_polling is None and topology(await hello(self.database)) == "sharded":
            log.info("a sharded cluster: targeted polling is on (the job and line indexes)")
            self._target_polls()
        # Migrations must know their writes landed, whatever the store's write concern.
        meta, runs, steps, dedup = (
            c if c.write_concern.acknowledged else c.with_options(write_concern=WriteConcern())
            for c in (self.meta, self.runs, self.steps, self.dedup)
        )
        await migrate(meta, runs, steps, dedup)
        await backfill_made(meta, runs)
        created = await create_indexes(
            self.runs, self.steps, self.events, self.leases, ttl=not self._ttl_refused
        )
        self._ttl_refused = self._ttl_refused or not created
        await self.create_stream_indexes()
        if self.job_index is not None and self.line_index is not None:
            await self.job_index.create_indexes()
            await self.line_index.create_indexes()

    def _target_polls(self) -> None:
        """Keep the job and line indexes: polls then read one shard, not every shard."""
        self.job_index = JobIndex(self.jobs, self.steps)
        self.line_index = LineIndex(self.lines, self.runs)

    async def clock_offset(self, samples: int = 5) -> ClockOffset | None:
        """This host's clock against the server's: ``samples`` ``hello`` commands, the
        tightest kept (see :class:`~pikku_mongo.wire.server.ClockOffset`). Logs a warning
        when the offset is certainly beyond half of ``max_clock_skew``. None when the
        server reports no ``localTime``."""
        measured = await measure_clock_offset(self.database, samples)
        if measured is None:
            log.info("the server reports no localTime: the clock offset is not measured")
        elif measured.beyond(self.max_clock_skew / 2):
            log.warning(
                "this host's clock is %+.3f s (± %.3f s) off the MongoDB server's: beyond "
                "half of max_clock_skew (%g s), so lease expiry may misjudge hosts whose "
                "clocks differ by more than the bound; fix the clock sync (NTP) or raise "
                "MongoStore(max_clock_skew=...)",
                measured.offset,
                measured.uncertainty,
                self.max_clock_skew,
            )
        return measured

    def _held(self, doc: Doc) -> Lease:
        """The lease as its holder must see it: ending ``max_clock_skew`` early."""
        lease = lease_from_doc(doc)
        return replace(lease, expires_at=lease.expires_at - timedelta(microseconds=self._skew_us))

    def job_hints(self) -> AsyncIterator[None] | None:
        """A change stream of queue-job inserts (see :mod:`pikku_mongo.wire.watch`); it ends
        at once on a server without change streams."""
        return job_inserts(self.steps) if self._watch else None

    async def close(self) -> None:
        """Close the client if this store created it (``from_uri``); a database handed
        to the constructor belongs to the caller and stays open."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # ---- events -----------------------------------------------------------------

    @transient_retry
    async def insert_event(self, event: EventRecord) -> None:
        """1 insert. Event ids are unique: inserting one again (a retry whose first
        reply was lost) is a no-op."""
        try:
            await self.events.insert_one(event_to_doc(event))
        except DuplicateKeyError:
            pass

    @transient_retry
    async def consume_event(self, run_id: str, name: str, consumer: str) -> EventRecord | None:
        """1 find; when the consumer took none yet, 1 findAndModify of the oldest
        unconsumed event. (Retried as a whole: a repeat finds what it took.)"""
        run = pack(check_str(run_id, "run id"))
        taker = pack(check_str(consumer, "event consumer"))
        async with self.causal() as session:
            mine = await self.events.find_one(
                {"run_id": eq(run), "consumed_by": eq(taker)}, sort=_BY_ID, session=session
            )
        if mine is not None:
            return event_from_doc(mine)
        doc = await self.events.find_one_and_update(
            {
                "run_id": eq(run),
                "name": eq(pack(check_str(name, "event name"))),
                "consumed": eq(False),
            },
            {"$set": {"consumed": True, "consumed_by": taker}},
            sort=_BY_ID,
            return_document=_AFTER,
        )
        return event_from_doc(doc) if doc is not None else None

    # ---- leases -----------------------------------------------------------------

    @transient_retry
    async def acquire_lease(self, key: str, holder: str, ttl: float) -> Lease | None:
        """1 findAndModify: an upsert that takes over a lease expired ``max_clock_skew``
        ago (by this host's clock) or creates a first one (token 1). A live lease makes
        the upsert collide with its ``_id``: None."""
        lease_key = pack(check_str(key, "lease key"))
        who = pack(check_str(holder, "lease holder"))
        now = utcnow()
        expires = now + timedelta(seconds=self._ttl(ttl, "lease ttl"))
        try:
            doc = await self.leases.find_one_and_update(
                {"_id": lease_key, "expires_us": {"$lte": to_us(now) - self._skew_us}},
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
                "expires_us": {"$gt": to_us(now) + self._skew_us},
            },
            {"$set": lease_expiry(now + timedelta(seconds=self._ttl(ttl, "lease ttl")))},
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


def _options(
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


def _check_targeting(targeted_polling: object) -> bool | None:
    if targeted_polling is not None and not isinstance(targeted_polling, bool):
        raise TypeError(
            "targeted_polling must be True, False or None (on for a sharded cluster), "
            f"not {targeted_polling!r}"
        )
    return targeted_polling
