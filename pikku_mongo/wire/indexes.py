"""The indexes every hot query of ``MongoStore`` needs, created idempotently.

Indexes keep their default (key-derived) names, so creating them again is a no-op on
every server.

Queries spell their equalities ``{"$eq": v}`` (see ``filters.eq``): that is how
nx-27017 uses these indexes at all outside ``find``.

The lease TTL index is garbage collection only: expiry is always judged by the queries
themselves (on ``expires_us``), and a server that refuses the index gets a warning, not
an error. It removes a lease document :data:`LEASE_GC_AFTER` seconds after the lease
expired or was released, not at once: the document carries the lease's token, which
must keep growing across releases and takeovers (MongoDB's TTL monitor deletes within
60 s of expiry, mongoeco hides an expired document at once), so a token restarts at 1
only for a key nobody held for a day.
"""

from __future__ import annotations

import logging
from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

log = logging.getLogger("pikku_mongo.wire.indexes")

RUN_INDEXES = [
    # find_runs_needing_pass: pending runs of some workflows, least recently updated.
    IndexModel([("pending_pass", ASCENDING), ("status", ASCENDING), ("updated_at", ASCENDING)]),
    # find_idle_runs and delete_runs: by status, older than a time.
    IndexModel([("status", ASCENDING), ("updated_at", ASCENDING)]),
    # list_child_runs.
    IndexModel([("parent_run_id", ASCENDING)]),
    # list_runs of one workflow. (Not (workflow, _id): on nx-27017 a compound index
    # naming _id makes every later insert fail with "JSON path error near '_id'".)
    IndexModel([("workflow", ASCENDING)]),
    # list_runs newest or oldest first: (creation time, id) as one string.
    IndexModel([("made", ASCENDING)]),
    # Flow control: each field exists only while it means something (see
    # ``documents.flow_fields``), so sparse indexes hold the live runs only.
    # (No unique index on ``dedup``: it would block sharding; see ``dedup_ops``.)
    # queued_runs: the head of a queue's line.
    IndexModel([("line", ASCENDING)], sparse=True),
    # find_delayed_runs, find_deadlines: what is due, in time order.
    IndexModel([("not_before_us", ASCENDING)], sparse=True),
    IndexModel([("deadline_due", ASCENDING)], sparse=True),
    # count_queue: the live runs of one queue.
    IndexModel([("qlive", ASCENDING)], sparse=True),
    # count_admitted(_keys): the admitted runs of one queue (a range), of one key.
    IndexModel([("qheld", ASCENDING)], sparse=True),
    # list_forks: the forks of a run (only forks have the field).
    IndexModel([("forked", ASCENDING)], sparse=True),
    # Retention (pikku_mongo.store.prune_ops): the ended runs past their time, those
    # whose documents are not stamped yet, and the TTL field MongoDB deletes them by.
    IndexModel([("expire_us", ASCENDING)], sparse=True),
    IndexModel([("unstamped", ASCENDING)], sparse=True),
    IndexModel([("expire_at", ASCENDING)], expireAfterSeconds=0),
]

STEP_INDEXES = [
    # load_steps and delete_runs: a run's steps. (Single-field: nx-27017 plans with
    # single-field indexes only. One step is found by its ``_id``.)
    IndexModel([("run_id", ASCENDING)]),
    # find_unnotified_steps: settled steps whose run was not told yet.
    IndexModel([("notified", ASCENDING), ("updated_at", ASCENDING)]),
    # find_scheduled_steps: the keyset scan in due_at order.
    IndexModel([("status", ASCENDING), ("due_at", ASCENDING)]),
    # claim_steps: claimable queue jobs, first due first; requeue_lapsed_claims.
    IndexModel(
        [
            ("status", ASCENDING),
            ("kind", ASCENDING),
            ("halted", ASCENDING),
            ("due_at", ASCENDING),
        ]
    ),
]

EVENT_INDEXES = [
    # consume_event: the oldest unconsumed event of a name.
    IndexModel([("run_id", ASCENDING), ("name", ASCENDING), ("consumed", ASCENDING)]),
    # consume_event: the event a consumer took already.
    IndexModel([("run_id", ASCENDING), ("consumed_by", ASCENDING)]),
]

#: How long a lease document outlives the lease (seconds).
LEASE_GC_AFTER = 24 * 3600
LEASE_TTL_INDEX = IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=LEASE_GC_AFTER)


async def create_indexes(
    runs: AsyncCollection[Any],
    steps: AsyncCollection[Any],
    events: AsyncCollection[Any],
    leases: AsyncCollection[Any],
    *,
    ttl: bool = True,
) -> bool:
    """Create every index (one ``createIndexes`` command per collection; the TTL index
    only when ``ttl``). Returns whether the TTL index was created; raises whatever else
    goes wrong."""
    await runs.create_indexes(RUN_INDEXES)
    await steps.create_indexes(STEP_INDEXES)
    await events.create_indexes(EVENT_INDEXES)
    if not ttl:
        return False
    try:
        await leases.create_indexes([LEASE_TTL_INDEX])
    except OperationFailure as exc:
        log.warning(
            "the server refused the TTL index on %s.expires_at (%s); expired leases "
            "will not be garbage-collected, which costs space, not correctness",
            leases.name,
            exc,
        )
        return False
    return True
