"""Bringing a database written by an earlier version to this version's storage format.

The format version is kept in the ``meta`` collection. Every migration is idempotent
and safe to run from several processes at once (each copies before it deletes, and
tolerates what another already did), so ``MongoStore.init`` simply runs what the
stored version lacks.

Format 2 (pikku-mongo 0.2):

* step documents are addressed by an ``_id`` built from (run id, key) and carry
  ``fmt: 2``; older ones (an ``ObjectId`` ``_id``) are copied under the new ``_id``
  and removed, and the unique (run_id, key) index that addressed them is dropped;
* run documents hold their own lease (``lease_us``, free at 0), a ``journal`` and a
  ``changed`` map; older ones get a free lease.

Format 3 (docs/guides/sharding.md): the dedup guarantee moves from the unique sparse
index on ``runs.dedup`` to the ``dedup`` collection (see
:mod:`pikku_mongo.store.dedup_ops`): each live run holding a dedup id gets its claim, then the
index is dropped. Run it (``pikku-mongo init``) before sharding: MongoDB refuses to shard
``runs`` while that index exists.

Format 3 also writes the journal's outcomes as compact text
(:mod:`pikku_mongo.wire.journal_text`, ``{"v":2,...}``); the long form written before is read
as it is, so nothing is rewritten. A process of an earlier version cannot read the
compact form: stop every process of an earlier version before one of this version
drives runs (a process refuses a database whose format is newer than its own).

Format 4 (issue 27) writes a long run's final inline outcomes in journal pages, several
to a document of ``steps`` (:mod:`pikku_mongo.writes.journal_pages`). Nothing already stored
changes, so the migration only records the format; a process of an earlier version
would not read a page, so the same rule holds: stop every process of an earlier version
first.
"""

from __future__ import annotations

import logging
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, OperationFailure

from pikku_mongo.errors import StorageFormatError
from pikku_mongo.store.dedup_ops import move_dedup_claims
from pikku_mongo.wire.documents import FORMAT, step_doc_id
from pikku_mongo.wire.encoding import unpack

log = logging.getLogger("pikku_mongo.store.migrations")

Doc = dict[str, Any]
_FORMAT_ID = "format"
_BATCH = 500


async def migrate(
    meta: AsyncCollection[Doc],
    runs: AsyncCollection[Doc],
    steps: AsyncCollection[Doc],
    dedup: AsyncCollection[Doc],
) -> None:
    """Migrate to :data:`~pikku_mongo.wire.documents.FORMAT` unless the database is there."""
    stored = await meta.find_one({"_id": _FORMAT_ID})
    version = int(stored["version"]) if stored is not None else 0
    if version > FORMAT:
        raise StorageFormatError(
            f"the database holds storage format {version}, written by a newer pikku-mongo; "
            f"this one knows format {FORMAT}: upgrade this process's pikku-mongo"
        )
    if version == FORMAT:
        return
    moved = await _rekey_steps(steps)
    await runs.update_many({"lease_us": {"$exists": False}}, {"$set": {"lease_us": 0}})
    try:
        await steps.drop_index("run_id_1_key_1")
    except OperationFailure:
        pass  # never created here, or dropped by another process
    claims = await move_dedup_claims(runs, dedup)
    await meta.update_one({"_id": _FORMAT_ID}, {"$set": {"version": FORMAT}}, upsert=True)
    if moved or claims:
        log.info(
            "migrated %d step documents and %d dedup claims to storage format %d",
            moved,
            claims,
            FORMAT,
        )


async def _rekey_steps(steps: AsyncCollection[Doc]) -> int:
    moved = 0
    while True:
        old = await steps.find({"fmt": {"$exists": False}}).limit(_BATCH).to_list()
        if not old:
            return moved
        for doc in old:
            copy = dict(doc)
            copy["_id"] = step_doc_id(unpack(doc["run_id"]), unpack(doc["key"]))
            copy["fmt"] = FORMAT
            try:
                await steps.insert_one(copy)
            except DuplicateKeyError:
                pass  # copied already
            # By ``_id`` and shard key, like every single-document write.
            await steps.delete_one({"_id": doc["_id"], "run_id": {"$eq": doc["run_id"]}})
            moved += 1
