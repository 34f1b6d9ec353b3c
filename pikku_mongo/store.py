"""``MongoStore``: the engine's store protocol on MongoDB, via PyMongo's native async API.

Collections (``prefix`` + name):

* ``runs``: ``_id`` = run id; the control plane of a run's passes (status, token,
  pass counter, ``pending_pass``, and ``inflight`` keyed by a digest of the step key).
* ``steps``: one document per (run_id, key), unique; the attempt history is embedded.
* ``events``: ``_id`` = event id (sortable by send time); consumed oldest first.
* ``leases``: ``{_id: key, holder, token, expires_us, expires_at}``; queries judge
  ``expires_us``; the BSON date ``expires_at`` only feeds a TTL index that removes the
  document a day after the lease ended (see ``indexes``).

Every guard of the protocol is one filter of one single-document write, so it is
atomic on the server; expiry is always judged by the filter against the client's clock,
never by TTL deletion. See each method for what it costs in commands.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from bson.codec_options import CodecOptions
from pymongo import ASCENDING, AsyncMongoClient, ReturnDocument, uri_parser
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError
from pymongo.read_preferences import ReadPreference

from engine_core.records import (
    ACTIVE,
    TERMINAL,
    AttemptEntry,
    EventRecord,
    Lease,
    RunRecord,
    RunState,
    StepGuard,
    StepPage,
    StepRecord,
    utcnow,
)
from pikku_mongo.checks import (
    check_bool,
    check_datetime,
    check_int,
    check_opt_str,
    check_seconds,
    check_str,
    check_strs,
)
from pikku_mongo.documents import (
    EPOCH,
    Doc,
    dump_value,
    entry_from_text,
    event_from_doc,
    event_to_doc,
    inflight_entry,
    inflight_field,
    lease_expiry,
    lease_from_doc,
    pack,
    run_from_doc,
    run_to_doc,
    step_from_doc,
    step_to_doc,
    to_us,
    unpack,
)
from pikku_mongo.errors import MissingDatabaseError
from pikku_mongo.filters import (
    CLAIM_SORT,
    SCHEDULED_SORT,
    check_changes,
    claim_filter,
    guard_filter,
    id_prefix_range,
    lapsed_claims_filter,
    scheduled_match,
    step_id,
    step_update,
    upsert_is_exact,
)
from pikku_mongo.indexes import create_indexes
from pikku_mongo.retry import retrying, transient_retry

#: Datetimes come back timezone-aware in UTC; documents are plain dicts.
CODEC_OPTIONS: CodecOptions[Doc] = CodecOptions(document_class=dict, tz_aware=True, tzinfo=UTC)
_AFTER = ReturnDocument.AFTER
_BY_ID = [("_id", ASCENDING)]
_BY_KEY = [("key", ASCENDING)]
#: Least recently updated first. Not tie-broken by ``_id``: that would defeat the
#: ([pending_pass,] status, updated_at) indexes (and a compound index naming ``_id``
#: breaks nx-27017); the order among equal times promises nothing.
_LEAST_RECENT = [("updated_at", ASCENDING)]


def _strs(values: Sequence[str], what: str) -> list[str]:
    return [pack(v) for v in check_strs(values, what)]


class MongoStore:
    """The engine's store on a MongoDB database (see the module docstring)."""

    def __init__(self, database: AsyncDatabase[Any], *, prefix: str = "pikku_") -> None:
        if not isinstance(database, AsyncDatabase):
            raise TypeError(
                "MongoStore needs a pymongo AsyncDatabase (from pymongo.AsyncMongoClient), "
                f"not {type(database).__name__}"
            )
        check_str(prefix, "collection prefix")
        self.database = database
        self.prefix = prefix
        self._client: AsyncMongoClient[Any] | None = None  # set only when we own it
        self._ttl_refused = False
        self.runs = self._collection("runs")
        self.steps = self._collection("steps")
        self.events = self._collection("events")
        self.leases = self._collection("leases")

    @classmethod
    def from_uri(cls, uri: str, *, prefix: str = "pikku_", **client_kwargs: Any) -> MongoStore:
        """A store on the database named in ``uri``'s path, with a client of its own
        (closed by :meth:`close`). ``client_kwargs`` go to ``AsyncMongoClient``.

        Raises :class:`MissingDatabaseError` when the URI names no database."""
        check_str(uri, "MongoDB URI")
        name = _database_name(uri)
        if not name:
            raise MissingDatabaseError(
                f"the MongoDB URI {_redact(uri)!r} names no database: put one in its path, "
                "e.g. mongodb://host:27017/mydb, or pass MongoStore(database=...)"
            )
        client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **client_kwargs)
        store = cls(client.get_database(name), prefix=prefix)
        store._client = client
        return store

    def _collection(self, name: str) -> AsyncCollection[Doc]:
        collection = self.database.get_collection(
            self.prefix + name,
            codec_options=CODEC_OPTIONS,
            # The guarantees need read-your-writes: never read from a secondary.
            read_preference=ReadPreference.PRIMARY,
        )
        return cast(AsyncCollection[Doc], collection)

    def __repr__(self) -> str:
        return f"MongoStore(database={self.database.name!r}, prefix={self.prefix!r})"

    @transient_retry
    async def init(self) -> None:
        """Create every index; 3-4 ``createIndexes`` commands."""
        created = await create_indexes(
            self.runs, self.steps, self.events, self.leases, ttl=not self._ttl_refused
        )
        self._ttl_refused = self._ttl_refused or not created

    async def close(self) -> None:
        """Close the client if this store created it (``from_uri``); a database handed
        to the constructor belongs to the caller and stays open."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    # ---- runs -------------------------------------------------------------------

    @transient_retry
    async def insert_run(self, run: RunRecord) -> RunRecord | None:
        """1 insert; on a duplicate id, 1 more find."""
        doc = run_to_doc(run)
        while True:
            try:
                await self.runs.insert_one(doc)
                return None
            except DuplicateKeyError:
                pass
            existing = await self.runs.find_one({"_id": doc["_id"]})
            if existing is not None:
                return run_from_doc(existing)
            # Deleted between the two commands: try to insert again.

    @transient_retry
    async def get_run(self, run_id: str) -> RunRecord | None:
        """1 find."""
        doc = await self.runs.find_one({"_id": pack(check_str(run_id, "run id"))})
        return run_from_doc(doc) if doc is not None else None

    @transient_retry
    async def begin_pass(self, run_id: str) -> RunRecord | None:
        """1 findAndModify. (A repeat after a lost reply skips one token value; the
        caller holds the run's lease and fences with the token it gets back.)"""
        doc = await self.runs.find_one_and_update(
            {"_id": pack(check_str(run_id, "run id"))},
            {"$inc": {"token": 1, "passes": 1}, "$set": {"pending_pass": False, "open_pass": True}},
            return_document=_AFTER,
        )
        return run_from_doc(doc) if doc is not None else None

    @transient_retry
    async def start_step(
        self,
        run_id: str,
        *,
        token: int,
        status: RunState,
        key: str,
        attempt: int,
        started_at: datetime,
        done: Iterable[str] = (),
    ) -> bool:
        """1 update, guarded by status and token."""
        key = check_str(key, "step key")
        finished = {check_str(d, "finished step key") for d in done} - {key}
        update: Doc = {
            "$set": {
                f"inflight.{inflight_field(key)}": inflight_entry(
                    key, check_int(attempt, "attempt"), check_datetime(started_at, "started_at")
                ),
                "open_pass": True,
                "updated_at": to_us(utcnow()),
            }
        }
        if finished:
            update["$unset"] = {f"inflight.{inflight_field(d)}": "" for d in finished}
        result = await self.runs.update_one(
            {
                "_id": pack(check_str(run_id, "run id")),
                "status": check_str(status, "run status"),
                "token": check_int(token, "token"),
            },
            update,
        )
        return result.matched_count == 1

    @transient_retry
    async def settle_run(
        self,
        run_id: str,
        *,
        token: int,
        expect: Sequence[RunState],
        status: RunState | None = None,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """1 update, guarded by token and status."""
        changes: Doc = {"inflight": {}, "open_pass": False, "updated_at": to_us(utcnow())}
        if status is not None:
            changes["status"] = check_str(status, "run status")
            changes["output"] = dump_value(output)
            changes["error"] = dump_value(error)
        result = await self.runs.update_one(
            {
                "_id": pack(check_str(run_id, "run id")),
                "token": check_int(token, "token"),
                "status": {"$in": check_strs(expect, "expected run status")},
            },
            {"$set": changes},
        )
        return result.matched_count == 1

    @transient_retry
    async def request_pass(self, run_id: str) -> None:
        """1 update."""
        await self.runs.update_one(
            {"_id": pack(check_str(run_id, "run id"))}, {"$set": {"pending_pass": True}}
        )

    @transient_retry
    async def set_run_status(
        self,
        run_id: str,
        status: RunState,
        *,
        expect: Sequence[RunState],
        error: dict[str, Any] | None = None,
        request_pass: bool = False,
    ) -> RunRecord | None:
        """1 findAndModify, guarded by status."""
        changes: Doc = {"status": check_str(status, "run status"), "updated_at": to_us(utcnow())}
        if error is not None:
            changes["error"] = dump_value(error)
        if request_pass:
            changes["pending_pass"] = True
        doc = await self.runs.find_one_and_update(
            {
                "_id": pack(check_str(run_id, "run id")),
                "status": {"$in": check_strs(expect, "expected run status")},
            },
            {"$set": changes},
            return_document=_AFTER,
        )
        return run_from_doc(doc) if doc is not None else None

    @transient_retry
    async def list_child_runs(self, run_id: str) -> list[RunRecord]:
        """1 find (plus a getMore per further batch)."""
        cursor = self.runs.find({"parent_run_id": pack(check_str(run_id, "run id"))})
        return [run_from_doc(doc) for doc in await cursor.sort(_BY_ID).to_list()]

    @transient_retry
    async def find_runs_needing_pass(self, workflows: Sequence[str], limit: int) -> list[str]:
        """1 find."""
        names = _strs(workflows, "workflow")
        if check_int(limit, "limit") <= 0 or not names:
            return []
        cursor = self.runs.find(
            {
                "pending_pass": True,
                "status": {"$in": list(ACTIVE)},
                "workflow": {"$in": names},
            },
            {"_id": 1},
        )
        docs = await cursor.sort(_LEAST_RECENT).limit(limit).to_list()
        return [unpack(doc["_id"]) for doc in docs]

    @transient_retry
    async def find_idle_runs(
        self, before: datetime, limit: int, *, in_flight_only: bool = False
    ) -> list[RunRecord]:
        """1 find."""
        if check_int(limit, "limit") <= 0:
            return []
        query: Doc = {
            "status": {"$in": list(ACTIVE)},
            "updated_at": {"$lt": to_us(check_datetime(before, "before"))},
        }
        if check_bool(in_flight_only, "in_flight_only"):
            query["open_pass"] = True
        docs = await self.runs.find(query).sort(_LEAST_RECENT).limit(limit).to_list()
        return [run_from_doc(doc) for doc in docs]

    @transient_retry
    async def list_runs(
        self,
        *,
        workflow: str | None,
        status: str | None,
        limit: int,
        after: str | None,
        prefix: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
    ) -> list[RunRecord]:
        """1 find: by ``_id`` order with a limit; ``after`` and ``prefix`` are bounds on
        ``_id``, so the ``_id`` index serves them."""
        if check_int(limit, "limit") <= 0:
            return []
        query: Doc = {}
        if check_opt_str(workflow, "workflow") is not None:
            query["workflow"] = pack(cast(str, workflow))
        if check_opt_str(status, "run status") is not None:
            query["status"] = status
        ids: Doc = {}
        if check_opt_str(prefix, "run id prefix") is not None:
            ids.update(id_prefix_range(cast(str, prefix)))
        if check_opt_str(after, "after") is not None:
            ids["$gt"] = pack(cast(str, after))
        if ids:
            query["_id"] = ids
        created: Doc = {}
        if created_since is not None:
            created["$gte"] = to_us(check_datetime(created_since, "created_since"))
        if created_before is not None:
            created["$lt"] = to_us(check_datetime(created_before, "created_before"))
        if created:
            query["created_at"] = created
        docs = await self.runs.find(query).sort(_BY_ID).limit(limit).to_list()
        return [run_from_doc(doc) for doc in docs]

    @transient_retry
    async def delete_runs(self, *, finished_before: datetime, limit: int) -> int:
        """1 find (the least recently updated first); when it finds runs, 3 deletes
        (steps, events, then the runs, so a crash in between leaves the run to be found
        again, never orphans)."""
        if check_int(limit, "limit") <= 0:
            return 0
        ended = {
            "status": {"$in": sorted(TERMINAL)},
            "updated_at": {"$lt": to_us(check_datetime(finished_before, "finished_before"))},
        }
        query = self.runs.find(ended, {"_id": 1})
        docs = await query.sort(_LEAST_RECENT).limit(limit).to_list()
        ids = [doc["_id"] for doc in docs]
        if not ids:
            return 0
        await self.steps.delete_many({"run_id": {"$in": ids}})
        await self.events.delete_many({"run_id": {"$in": ids}})
        result = await self.runs.delete_many({"_id": {"$in": ids}, **ended})
        return result.deleted_count

    # ---- steps ------------------------------------------------------------------

    @transient_retry
    async def load_steps(self, run_id: str) -> list[StepRecord]:
        """1 find (plus a getMore per further batch), in key order (the unique index's)."""
        cursor = self.steps.find({"run_id": pack(check_str(run_id, "run id"))})
        return [step_from_doc(doc) for doc in await cursor.sort(_BY_KEY).to_list()]

    @transient_retry
    async def get_step(self, run_id: str, key: str) -> StepRecord | None:
        """1 find."""
        doc = await self.steps.find_one(step_id(run_id, key))
        return step_from_doc(doc) if doc is not None else None

    @transient_retry
    async def insert_step(self, step: StepRecord) -> bool:
        """1 insert (the unique (run_id, key) index decides)."""
        try:
            await self.steps.insert_one(step_to_doc(step))
        except DuplicateKeyError:
            return False
        return True

    async def update_step(
        self,
        run_id: str,
        key: str,
        *,
        guard: StepGuard,
        changes: dict[str, Any],
        entry: AttemptEntry | None = None,
    ) -> bool:
        """1 update. With ``guard.missing_ok``: 1 upsert when the document it may create
        is exact (see ``upsert_is_exact``; the engine's writes always are), 2 when the
        upsert collides with an existing step (then the plain guarded update decides),
        else up to 3 (update, insert of the complete record, update).

        Retried on transient errors; before a repeat, a write with a history ``entry``
        first checks whether that entry already landed, so nothing is appended twice."""
        check_changes(changes)
        query = guard_filter(run_id, key, guard)
        update = step_update(changes, entry)
        tries = 0

        async def once() -> bool:
            nonlocal tries
            tries += 1
            if tries > 1 and entry is not None and await self._entry_landed(query, entry):
                return True
            if not guard.missing_ok:
                return await self._guarded_step_write(query, update)
            if upsert_is_exact(guard, changes):
                return await self._upsert_step(query, update)
            return await self._create_or_update_step(query, update, run_id, key, changes, entry)

        once.__qualname__ = "MongoStore.update_step"
        landed: bool = await retrying()(once)
        return landed

    async def _guarded_step_write(self, query: Doc, update: Doc) -> bool:
        if not update:
            return await self.steps.find_one(query, {"_id": 1}) is not None
        result = await self.steps.update_one(query, update)
        return result.matched_count == 1

    async def _upsert_step(self, query: Doc, update: Doc) -> bool:
        try:
            result = await self.steps.update_one(query, update, upsert=True)
        except DuplicateKeyError:
            # The step exists (it failed the guard, or was created meanwhile).
            return await self._guarded_step_write(query, update)
        return result.matched_count == 1 or result.upserted_id is not None

    async def _create_or_update_step(
        self,
        query: Doc,
        update: Doc,
        run_id: str,
        key: str,
        changes: dict[str, Any],
        entry: AttemptEntry | None,
    ) -> bool:
        if await self._guarded_step_write(query, update):
            return True
        base: dict[str, Any] = {"kind": "inline", "status": "pending", **changes}
        record = StepRecord(run_id=run_id, key=key, **base)
        if entry is not None:
            record.history = [*record.history, entry]
        try:
            await self.steps.insert_one(step_to_doc(record))
        except DuplicateKeyError:
            return await self._guarded_step_write(query, update)
        return True

    async def _entry_landed(self, query: Doc, entry: AttemptEntry) -> bool:
        """Whether the step (identified by ``query``'s run_id and key) already holds
        ``entry`` in its history."""
        doc = await self.steps.find_one(
            {"run_id": query["run_id"], "key": query["key"]}, {"history": 1}
        )
        history = cast(list[str], (doc or {}).get("history") or [])
        return any(entry_from_text(item) == entry for item in history)

    @transient_retry
    async def find_unnotified_steps(self, before: datetime, limit: int) -> list[StepRecord]:
        """1 find."""
        if check_int(limit, "limit") <= 0:
            return []
        query: Doc = {
            "notified": False,
            "updated_at": {"$lt": to_us(check_datetime(before, "before"))},
        }
        docs = await self.steps.find(query).sort(_LEAST_RECENT).limit(limit).to_list()
        return [step_from_doc(doc) for doc in docs]

    @transient_retry
    async def claim_step(
        self, functions: Sequence[str], *, holder: str, claim_ttl: float
    ) -> StepRecord | None:
        """1 findAndModify: the filter is the eligibility guard, so of concurrent
        claimers exactly one matches each job attempt. (A repeat after a lost reply may
        claim a second job; the first one's claim then lapses and it goes back to the
        queue, as it would had the repeat not happened.)"""
        if not functions:
            return None
        now = utcnow()
        expires = now + timedelta(seconds=check_seconds(claim_ttl, "claim_ttl"))
        doc = await self.steps.find_one_and_update(
            claim_filter(functions, now),
            {
                "$set": {
                    "status": "running",
                    "claim_holder": pack(check_str(holder, "claim holder")),
                    "claim_expires_at": to_us(expires),
                    "updated_at": to_us(now),
                },
                "$inc": {"attempts": 1},
            },
            sort=CLAIM_SORT,
            return_document=_AFTER,
        )
        return step_from_doc(doc) if doc is not None else None

    @transient_retry
    async def requeue_lapsed_claims(self) -> int:
        """1 update_many, guarded by the lapsed claim (safe to repeat)."""
        now = utcnow()
        result = await self.steps.update_many(
            lapsed_claims_filter(now),
            {
                "$set": {
                    "status": "scheduled",
                    "due_at": to_us(now),
                    "claim_holder": None,
                    "claim_expires_at": None,
                    "updated_at": to_us(now),
                }
            },
        )
        return int(result.modified_count)

    @transient_retry
    async def extend_claim(
        self, run_id: str, key: str, *, holder: str, attempt: int, claim_ttl: float
    ) -> bool:
        """1 update, guarded by holder and attempt."""
        query = step_id(run_id, key)
        query.update(
            status="running",
            claim_holder=pack(check_str(holder, "claim holder")),
            attempts=check_int(attempt, "attempt"),
        )
        expires = utcnow() + timedelta(seconds=check_seconds(claim_ttl, "claim_ttl"))
        result = await self.steps.update_one(query, {"$set": {"claim_expires_at": to_us(expires)}})
        return result.matched_count == 1

    @transient_retry
    async def halt_steps(self, run_id: str, halted: bool) -> None:
        """1 update (multi)."""
        await self.steps.update_many(
            {"run_id": pack(check_str(run_id, "run id")), "kind": "dispatch"},
            {"$set": {"halted": check_bool(halted, "halted")}},
        )

    @transient_retry
    async def find_scheduled_steps(
        self, limit: int, after: StepPage | None = None
    ) -> list[StepRecord]:
        """1 aggregate ($match, $sort, $limit): keyset pagination, no skip."""
        if check_int(limit, "limit") <= 0:
            return []
        pipeline: list[Doc] = [
            {"$match": scheduled_match(after)},
            {"$sort": SCHEDULED_SORT},
            {"$limit": limit},
        ]
        cursor = await self.steps.aggregate(pipeline)
        return [step_from_doc(doc) for doc in await cursor.to_list()]

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
        mine = await self.events.find_one({"run_id": run, "consumed_by": taker}, sort=_BY_ID)
        if mine is not None:
            return event_from_doc(mine)
        doc = await self.events.find_one_and_update(
            {"run_id": run, "name": pack(check_str(name, "event name")), "consumed": False},
            {"$set": {"consumed": True, "consumed_by": taker}},
            sort=_BY_ID,
            return_document=_AFTER,
        )
        return event_from_doc(doc) if doc is not None else None

    # ---- leases -----------------------------------------------------------------

    @transient_retry
    async def acquire_lease(self, key: str, holder: str, ttl: float) -> Lease | None:
        """1 findAndModify: an upsert that takes over an expired lease or creates a first
        one (token 1). A live lease makes the upsert collide with its ``_id``: None."""
        lease_key = pack(check_str(key, "lease key"))
        who = pack(check_str(holder, "lease holder"))
        now = utcnow()
        expires = now + timedelta(seconds=check_seconds(ttl, "lease ttl"))
        try:
            doc = await self.leases.find_one_and_update(
                {"_id": lease_key, "expires_us": {"$lte": to_us(now)}},
                {"$set": {"holder": who, **lease_expiry(expires)}, "$inc": {"token": 1}},
                upsert=True,
                return_document=_AFTER,
            )
        except DuplicateKeyError:
            return None  # held and live
        # nx-27017 answers a colliding upsert with no document instead of an error.
        return lease_from_doc(doc) if doc is not None else None

    @transient_retry
    async def refresh_lease(self, lease: Lease, ttl: float) -> Lease | None:
        """1 findAndModify, guarded by holder, token and expiry."""
        now = utcnow()
        doc = await self.leases.find_one_and_update(
            {
                "_id": pack(check_str(lease.key, "lease key")),
                "holder": pack(check_str(lease.holder, "lease holder")),
                "token": check_int(lease.token, "lease token"),
                "expires_us": {"$gt": to_us(now)},
            },
            {"$set": lease_expiry(now + timedelta(seconds=check_seconds(ttl, "lease ttl")))},
            return_document=_AFTER,
        )
        return lease_from_doc(doc) if doc is not None else None

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

    # ---- operating (the dashboard) ----------------------------------------------

    @transient_retry
    async def count_runs(self, *, workflow: str | None = None) -> dict[str, int]:
        """1 aggregate: a ``$match``, then ``$group`` on status. Unfiltered, the match is
        a range over every status (each is a string), so MongoDB can count from the
        (status, updated_at) index without fetching the documents; of one workflow, the
        workflow index serves it. (On nx-27017 the range costs nothing, while a ``$sort``
        or an ``$in`` there made the count 15 to 20 times slower at 100,000 runs.)"""
        if check_opt_str(workflow, "workflow") is not None:
            match: Doc = {"workflow": pack(cast(str, workflow))}
        else:
            match = {"status": {"$gte": ""}}
        pipeline: list[Doc] = [
            {"$match": match},
            {"$group": {"_id": "$status", "n": {"$sum": 1}}},
        ]
        cursor = await self.runs.aggregate(pipeline)
        return {cast(str, doc["_id"]): int(doc["n"]) for doc in await cursor.to_list()}

    @transient_retry
    async def list_workflows(self) -> list[str]:
        """1 distinct on ``workflow`` (the workflow index serves it)."""
        names = await self.runs.distinct("workflow")
        return sorted(unpack(name) for name in names if isinstance(name, str))


def _database_name(uri: str) -> str | None:
    """The database in the URI's path, parsed without the DNS lookups of a
    ``mongodb+srv://`` URI (the path means the same in both schemes; the client does
    its SRV resolution itself, asynchronously)."""
    srv = "mongodb+srv://"
    plain = "mongodb://" + uri[len(srv) :] if uri.startswith(srv) else uri
    parsed = uri_parser.parse_uri(plain, validate=False)
    return cast(str | None, parsed.get("database"))


def _redact(uri: str) -> str:
    """The URI without its credentials, for messages."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    hosts, slash, tail = rest.partition("/")
    if "@" in hosts:
        hosts = "***@" + hosts.rsplit("@", 1)[1]
    return f"{scheme}{sep}{hosts}{slash}{tail}"
