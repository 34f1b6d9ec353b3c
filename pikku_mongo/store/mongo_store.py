"""``MongoStore``: the engine's store protocol on MongoDB, via PyMongo's native async API.

Its collections (``prefix`` + name) are listed in :mod:`pikku_mongo.store`.

Every guard of the protocol is one filter of one single-document write, so it is
atomic on the server; expiry is always judged by the filter against the client's clock,
never by TTL deletion. Writes on the hot path are group-committed
(:mod:`pikku_mongo.writes.batcher`). See each method for what it costs in commands.

Durability: every collection handle carries the store's write concern (default
``majority``, journaled) and read concern (never the client's own, often ``w=1``);
reads that decide something are causally consistent where the server keeps a clock
(:mod:`pikku_mongo.wire.causal`). In full: docs/guides/durability.md.

Clocks: a lease's or a claim's expiry is written from its holder's clock and judged by
every other host against its own, with a margin of ``max_clock_skew``
(:mod:`pikku_mongo.wire.skew` says why that is safe, and what it asks of the hosts).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, cast

from gridfs import AsyncGridFSBucket
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from engine_core.common.durations import Duration
from engine_core.store import TimeSource
from pikku_mongo.errors import MissingDatabaseError
from pikku_mongo.store.debounce_ops import DebounceOps
from pikku_mongo.store.declared_ops import DeclaredOps
from pikku_mongo.store.dedup_ops import DedupOps
from pikku_mongo.store.event_ops import EventOps
from pikku_mongo.store.fork_ops import ForkOps
from pikku_mongo.store.job_index import JobIndex
from pikku_mongo.store.key_ops import KeyOps
from pikku_mongo.store.lease_ops import LeaseOps
from pikku_mongo.store.line_index import LineIndex
from pikku_mongo.store.listing import ListingOps, backfill_made
from pikku_mongo.store.migrations import migrate
from pikku_mongo.store.offload_ops import OffloadOps
from pikku_mongo.store.options import (
    CODEC_OPTIONS,
    DEFAULT_MAX_CLOCK_SKEW,
    DEFAULT_MAX_VALUE,
    DEFAULT_OFFLOAD_OVER,
    check_options,
    check_sizes,
    check_targeting,
)
from pikku_mongo.store.owned import Owned
from pikku_mongo.store.prune_ops import PruneOps
from pikku_mongo.store.queue_ops import QueueOps
from pikku_mongo.store.run_ops import RunOps
from pikku_mongo.store.schedule_ops import ScheduleOps
from pikku_mongo.store.served import ServedBy
from pikku_mongo.store.step_ops import StepOps
from pikku_mongo.store.stream_ops import StreamOps
from pikku_mongo.store.targeting import Targeting
from pikku_mongo.store.update_ops import UpdateOps
from pikku_mongo.store.value_ops import ValueOps
from pikku_mongo.store.worker_ops import WorkerOps
from pikku_mongo.wire.causal import CausalReads, OperationClock, find_clock
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.command_metrics import CommandCounter
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.indexes import create_indexes
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.wire.server import (
    ClockOffset,
    hello,
    measure_clock_offset,
    topology,
    ttl_monitor,
)
from pikku_mongo.wire.skew import SkewBound, refuse_virtual, warn_if_beyond
from pikku_mongo.wire.uri import database_name, redact
from pikku_mongo.wire.watch import job_inserts
from pikku_mongo.writes.batcher import Batcher

log = logging.getLogger("pikku_mongo.store.mongo_store")


class MongoStore:
    """The engine's store on a MongoDB database (see the module docstring), built from
    parts it owns, one per collection or concern; each method of the store protocol is
    one part's (the table at the end of the class)."""

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
        offload_over: int | str = DEFAULT_OFFLOAD_OVER,
        max_value: int | str = DEFAULT_MAX_VALUE,
    ) -> None:
        """``offload_over`` (bytes or a size such as ``"1MiB"``, at most 8 MiB): larger
        values go to GridFS; ``max_value`` (256 MiB): the largest value kept
        (:class:`~engine_core.ValueTooLargeError`). ``write_concern`` / ``read_concern``:
        pymongo objects replacing the durable defaults (module docstring).
        ``max_clock_skew``: seconds or a string such as ``"500ms"``, the bound on clock
        differences between hosts that lease expiry tolerates
        (:mod:`pikku_mongo.wire.skew`); 0 on a single host. ``change_streams``: wake
        idle workers from a change stream where the server serves one.
        ``targeted_polling``: keep the job and line indexes
        (:mod:`pikku_mongo.store.job_index`, :mod:`pikku_mongo.store.line_index`) so a
        worker's poll for due jobs and an admitter's read of its line go to one shard,
        not every shard; None (the default) turns it on at :meth:`init` when the server
        is a mongos (a sharded cluster) and leaves it off elsewhere, where it would only
        cost writes. Every process of a fleet must agree. Deciding reads are causally
        consistent when ``database``'s client has a
        :class:`~pikku_mongo.wire.causal.OperationClock` among its event listeners."""
        if not isinstance(database, AsyncDatabase):
            raise TypeError(
                "MongoStore needs a pymongo AsyncDatabase (from pymongo.AsyncMongoClient), "
                f"not {type(database).__name__}"
            )
        check_str(prefix, "collection prefix")
        self.write_concern, self.read_concern, self.max_clock_skew = check_options(
            write_concern, read_concern, max_clock_skew
        )
        self.targeted_polling = check_targeting(targeted_polling)
        #: Read by the engine: where values go apart, and the largest one kept.
        self.offload_over_bytes, self.max_value_bytes = check_sizes(offload_over, max_value)
        self.database = database
        self.prefix = prefix
        self._client: AsyncMongoClient[Any] | None = None  # set only when we own it
        self._watch = bool(change_streams)
        self._ttl_refused = False
        #: This host's clock against the server's, as measured at ``init`` (seconds).
        self.measured_offset: float | None = None
        self._open_collections()
        # Deciding reads wait for this client's newest known operation time
        # (pikku_mongo.wire.causal); without its listener they are plain majority reads.
        self.reads = CausalReads(database, find_clock(database.client))
        self.skew = SkewBound(self.max_clock_skew)
        self.targeting = Targeting(
            jobs=self.jobs, steps=self.steps, lines=self.lines, runs=self.runs
        )
        if targeted_polling:
            self.targeting.turn_on()
        self._group_commit()
        self._make_parts()

    def _open_collections(self) -> None:
        """The store's collections (``prefix`` + name), each with its concerns."""
        self.runs, self.steps, self.events, self.leases, self.meta = self._collections(
            "runs", "steps", "events", "leases", "meta"
        )
        self.queues, self.schedules, self.workers, self.queue_limits, self.forks = (
            self._collections("queues", "schedules", "workers", "queue_limits", "forks")
        )
        self.dedup, self.streams, self.heartbeats, self.jobs, self.lines = self._collections(
            "dedup", "streams", "heartbeats", "jobs", "lines"
        )
        self.qkeys, self.debounce = self._collections("qkeys", "debounce")
        self.values, self.updates = self.talk = self._collections("values", "updates")
        self.value_files, self.value_chunks = self._collections(
            "offloaded.files", "offloaded.chunks"
        )

    def _group_commit(self) -> None:
        """A group commit for each collection written on the hot path. A document a
        guarded upsert created has none of the fields every real document has."""
        self.run_writes = Batcher(self.runs, {"workflow": {"$exists": False}}, beside=self.steps)
        self.step_writes = Batcher(self.steps, {"fmt": {"$exists": False}})
        self.dedup_writes = Batcher(self.dedup, {"run_id": {"$exists": False}})
        self.stream_writes = Batcher(
            self.streams, {"pos": {"$exists": False}}, ride_on=self.run_writes
        )
        self.value_writes = Batcher(
            self.values, {"key": {"$exists": False}}, ride_on=self.run_writes
        )

    def _make_parts(self) -> None:
        """The parts that serve the store protocol, each given what it uses."""
        reads, skew, targeting = self.reads, self.skew, self.targeting
        self.dedup_ops: DedupOps = DedupOps(
            runs=self.runs, dedup=self.dedup, dedup_writes=self.dedup_writes, reads=reads, skew=skew
        )
        self.key_ops: KeyOps = KeyOps(
            qkeys=self.qkeys, windows=self.debounce, queues=self.queues, reads=reads
        )
        self.offload_ops: OffloadOps = OffloadOps(
            files=self.value_files,
            chunks=self.value_chunks,
            bucket=AsyncGridFSBucket(
                self.database, self.prefix + "offloaded", read_preference=ReadPreference.PRIMARY
            ),
            offload_over=self.offload_over_bytes,
            max_value=self.max_value_bytes,
        )
        self.owned = Owned(
            [
                *(self.steps, self.events, self.streams, self.heartbeats, *self.talk),
                *(self.value_files, self.value_chunks),
            ],
            values=self.offload_ops,
        )
        self.run_ops: RunOps = RunOps(
            runs=self.runs,
            run_writes=self.run_writes,
            dedup=self.dedup_ops,
            keys=self.key_ops,
            targeting=targeting,
            reads=reads,
            skew=skew,
            owned=self.owned,
        )
        self.listing: ListingOps = ListingOps(self.runs)
        self.prune_ops: PruneOps = PruneOps(runs=self.runs, owned=self.owned, dedup=self.dedup_ops)
        self.step_ops: StepOps = StepOps(
            reads=reads,
            skew=skew,
            targeting=targeting,
            steps=self.steps,
            step_writes=self.step_writes,
        )
        self.queue_ops: QueueOps = QueueOps.beside(self.run_ops, queues=self.queues)
        self.debounce_ops: DebounceOps = DebounceOps(keys=self.key_ops, run_ops=self.run_ops)
        self.fork_ops: ForkOps = ForkOps(
            runs=self.runs, steps=self.steps, forks=self.forks, reads=reads, store=self
        )
        self._make_talk_parts()

    def _make_talk_parts(self) -> None:
        """The parts of streams, values, updates, events and the fleet's records."""
        reads = self.reads
        self.stream_ops: StreamOps = StreamOps(
            watch=self._watch,
            reads=reads,
            streams=self.streams,
            heartbeats=self.heartbeats,
            stream_writes=self.stream_writes,
        )
        self.event_ops: EventOps = EventOps(self.events, reads=reads)
        self.value_ops: ValueOps = ValueOps(
            values=self.values, value_writes=self.value_writes, reads=reads, watch=self._watch
        )
        self.update_ops: UpdateOps = UpdateOps(
            self.updates, runs=self.runs, run_writes=self.run_writes, reads=reads, watch=self._watch
        )
        self.lease_ops: LeaseOps = LeaseOps(self.leases, skew=self.skew)
        self.schedule_ops: ScheduleOps = ScheduleOps(self.schedules, reads=reads)
        self.worker_ops: WorkerOps = WorkerOps(
            self.workers, clock_offset=lambda: self.measured_offset
        )
        self.declared_ops: DeclaredOps = DeclaredOps(self.queue_limits)

    @property
    def job_index(self) -> JobIndex | None:
        """The index of claimable jobs while targeted polling is on, else None."""
        return self.targeting.job_index

    @property
    def line_index(self) -> LineIndex | None:
        """The index of queue lines while targeted polling is on, else None."""
        return self.targeting.line_index

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
        offload_over: int | str = DEFAULT_OFFLOAD_OVER,
        max_value: int | str = DEFAULT_MAX_VALUE,
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
        check_options(write_concern, read_concern, max_clock_skew)  # before making a client
        check_targeting(targeted_polling)
        check_sizes(offload_over, max_value)
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
            offload_over=offload_over,
            max_value=max_value,
        )
        store._client = client
        return store

    def _collections(self, *names: str) -> list[AsyncCollection[Doc]]:
        """The store's collections ``names``, each with its concerns and codecs."""
        return [
            cast(
                AsyncCollection[Doc],
                self.database.get_collection(
                    self.prefix + name,
                    codec_options=CODEC_OPTIONS,
                    # The guarantees need read-your-writes: never read from a secondary.
                    read_preference=ReadPreference.PRIMARY,
                    write_concern=self.write_concern,
                    read_concern=self.read_concern,
                ),
            )
            for name in names
        ]

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
            self.targeting.turn_on()
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
        await self.update_ops.create_update_indexes()
        await self.owned.create_indexes()
        await self.offload_ops.create_indexes()
        self.prune_ops.ttl_monitor = await ttl_monitor(self.database)
        if self.job_index is not None and self.line_index is not None:
            await self.job_index.create_indexes()
            await self.line_index.create_indexes()

    async def clock_offset(self, samples: int = 5) -> ClockOffset | None:
        """This host's clock against the server's: ``samples`` ``hello`` commands, the
        tightest kept (see :class:`~pikku_mongo.wire.server.ClockOffset`). Logs a warning
        when the offset is certainly beyond half of ``max_clock_skew``. None when the
        server reports no ``localTime``."""
        measured = await measure_clock_offset(self.database, samples)
        warn_if_beyond(log, measured, self.max_clock_skew)
        return measured

    def follow_clock(self, clock: TimeSource) -> None:
        """:meth:`Store.follow_clock <engine_core.store.Store.follow_clock>`: the real
        clock only (:func:`~pikku_mongo.wire.skew.refuse_virtual` says why)."""
        refuse_virtual(self, clock)

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

    # ---- the store protocol, each method served by one part ------------------------
    # Each group names its part, then the methods that part serves.

    _runs = ServedBy["MongoStore", RunOps](lambda store: store.run_ops)
    insert_run = _runs(RunOps.insert_run)
    get_run = _runs(RunOps.get_run)
    get_runs = _runs(RunOps.get_runs)
    begin_pass = _runs(RunOps.begin_pass)
    extend_pass = _runs(RunOps.extend_pass)
    release_pass = _runs(RunOps.release_pass)
    start_step = _runs(RunOps.start_step)
    record_steps = _runs(RunOps.record_steps)
    journals_outcomes = _runs(RunOps.journals_outcomes)
    settle_run = _runs(RunOps.settle_run)
    request_pass = _runs(RunOps.request_pass)
    request_passes = _runs(RunOps.request_passes)
    set_run_status = _runs(RunOps.set_run_status)
    list_child_runs = _runs(RunOps.list_child_runs)
    find_runs_needing_pass = _runs(RunOps.find_runs_needing_pass)
    find_idle_runs = _runs(RunOps.find_idle_runs)
    _listing = ServedBy["MongoStore", ListingOps](lambda store: store.listing)
    list_runs = _listing(ListingOps.list_runs)
    count_runs = _listing(ListingOps.count_runs)
    list_workflows = _listing(ListingOps.list_workflows)
    _prune = ServedBy["MongoStore", PruneOps](lambda store: store.prune_ops)
    delete_runs = _prune(PruneOps.delete_runs)
    expire_runs = _prune(PruneOps.expire_runs)
    _steps = ServedBy["MongoStore", StepOps](lambda store: store.step_ops)
    load_steps = _steps(StepOps.load_steps)
    load_steps_of = _steps(StepOps.load_steps_of)
    get_step = _steps(StepOps.get_step)
    get_steps = _steps(StepOps.get_steps)
    save_steps = _steps(StepOps.save_steps)
    insert_step = _steps(StepOps.insert_step)
    update_step = _steps(StepOps.update_step)
    find_unnotified_steps = _steps(StepOps.find_unnotified_steps)
    claim_steps = _steps(StepOps.claim_steps)
    find_claims = _steps(StepOps.find_claims)
    requeue_lapsed_claims = _steps(StepOps.requeue_lapsed_claims)
    extend_claim = _steps(StepOps.extend_claim)
    halt_steps = _steps(StepOps.halt_steps)
    find_scheduled_steps = _steps(StepOps.find_scheduled_steps)
    _queues = ServedBy["MongoStore", QueueOps](lambda store: store.queue_ops)
    get_queue_state = _queues(QueueOps.get_queue_state)
    save_queue_state = _queues(QueueOps.save_queue_state)
    queued_runs = _queues(QueueOps.queued_runs)
    admit_runs = _queues(QueueOps.admit_runs)
    count_admitted = _queues(QueueOps.count_admitted)
    count_admitted_keys = _queues(QueueOps.count_admitted_keys)
    admit_run_holding = _queues(QueueOps.admit_run_holding)
    find_delayed_runs = _queues(QueueOps.find_delayed_runs)
    release_delayed_runs = _queues(QueueOps.release_delayed_runs)
    reenter_run = _queues(QueueOps.reenter_run)
    find_deadlines = _queues(QueueOps.find_deadlines)
    count_queue = _queues(QueueOps.count_queue)
    count_waiting_keys = _queues(QueueOps.count_waiting_keys)
    queue_names = _queues(QueueOps.queue_names)
    _keys = ServedBy["MongoStore", KeyOps](lambda store: store.key_ops)
    get_key_windows = _keys(KeyOps.get_key_windows)
    save_key_windows = _keys(KeyOps.save_key_windows)
    debounce_run = ServedBy["MongoStore", DebounceOps](lambda store: store.debounce_ops)(
        DebounceOps.debounce_run
    )
    _dedup = ServedBy["MongoStore", DedupOps](lambda store: store.dedup_ops)
    dedup_holder = _dedup(DedupOps.dedup_holder)
    _forks = ServedBy["MongoStore", ForkOps](lambda store: store.fork_ops)
    fork_run = _forks(ForkOps.fork_run)
    list_forks = _forks(ForkOps.list_forks)
    clean_forks = _forks(ForkOps.clean_forks)
    _streams = ServedBy["MongoStore", StreamOps](lambda store: store.stream_ops)
    append_stream = _streams(StreamOps.append_stream)
    stream_entries = _streams(StreamOps.stream_entries)
    stream_length = _streams(StreamOps.stream_length)
    list_streams = _streams(StreamOps.list_streams)
    stream_hints = _streams(StreamOps.stream_hints)
    put_heartbeat = _streams(StreamOps.put_heartbeat)
    get_heartbeat = _streams(StreamOps.get_heartbeat)
    _values = ServedBy["MongoStore", ValueOps](lambda store: store.value_ops)
    put_value = _values(ValueOps.put_value)
    get_value = _values(ValueOps.get_value)
    list_values = _values(ValueOps.list_values)
    value_hints = _values(ValueOps.value_hints)
    _updates = ServedBy["MongoStore", UpdateOps](lambda store: store.update_ops)
    submit_update = _updates(UpdateOps.submit_update)
    consume_update = _updates(UpdateOps.consume_update)
    answer_update = _updates(UpdateOps.answer_update)
    get_update = _updates(UpdateOps.get_update)
    list_updates = _updates(UpdateOps.list_updates)
    answer_hints = _updates(UpdateOps.answer_hints)
    update_hints = _updates(UpdateOps.update_hints)
    _events = ServedBy["MongoStore", EventOps](lambda store: store.event_ops)
    insert_event = _events(EventOps.insert_event)
    consume_event = _events(EventOps.consume_event)
    _leases = ServedBy["MongoStore", LeaseOps](lambda store: store.lease_ops)
    acquire_lease = _leases(LeaseOps.acquire_lease)
    refresh_lease = _leases(LeaseOps.refresh_lease)
    release_lease = _leases(LeaseOps.release_lease)
    _schedules = ServedBy["MongoStore", ScheduleOps](lambda store: store.schedule_ops)
    put_schedule = _schedules(ScheduleOps.put_schedule)
    get_schedule = _schedules(ScheduleOps.get_schedule)
    list_schedules = _schedules(ScheduleOps.list_schedules)
    delete_schedule = _schedules(ScheduleOps.delete_schedule)
    set_schedule_paused = _schedules(ScheduleOps.set_schedule_paused)
    advance_schedule = _schedules(ScheduleOps.advance_schedule)
    _workers = ServedBy["MongoStore", WorkerOps](lambda store: store.worker_ops)
    put_worker = _workers(WorkerOps.put_worker)
    delete_worker = _workers(WorkerOps.delete_worker)
    list_workers = _workers(WorkerOps.list_workers)
    # OffloadOps (not of the protocol: what the engine's seam asks of a store that keeps
    # large values apart, engine_core.codecs.apart)
    _offload = ServedBy["MongoStore", OffloadOps](lambda store: store.offload_ops)
    offload_values = _offload(OffloadOps.offload_values)
    fetch_values = _offload(OffloadOps.fetch_values)
    drop_values = _offload(OffloadOps.drop_values)
    _declared = ServedBy["MongoStore", DeclaredOps](lambda store: store.declared_ops)
    put_queue_limits = _declared(DeclaredOps.put_queue_limits)
    list_queue_limits = _declared(DeclaredOps.list_queue_limits)
