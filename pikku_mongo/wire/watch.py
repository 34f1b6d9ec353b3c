"""Wake-ups from a change stream: a hint that a queue job was inserted.

Only a hint: the worker still claims through its guarded writes, and polls with a
backoff when the server serves no change streams (mongoeco answers "Unsupported
aggregation stage") or the stream breaks. Servers that hold a ``getMore`` until a change
comes (MongoDB) are read in a loop; one that answers at once (nx-27017) is read every
:data:`POLL_S`, so an idle stream does not spin.

The ``steps`` collection is watched only for inserts of dispatched steps, and the run
documents never: on nx-27017 a watched collection pays a copy of every written document
into its change log, and the run documents are written at every step. The ``values``
and ``updates`` collections are watched while a caller waits for a value or an answer
(:func:`runs_changed`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure, PyMongoError

from pikku_mongo.wire.encoding import ID_SEPARATOR, unpack

log = logging.getLogger("pikku_mongo.wire.watch")

Doc = dict[str, Any]
#: How long the server may hold a ``getMore`` (MongoDB); and how often a stream is read
#: when the server answers at once instead.
MAX_AWAIT_MS = 1000
POLL_S = 0.01
#: How often a stream that only wakes an idle worker early is read where the server
#: answers at once: every worker keeps it open, so at POLL_S it would cost each a
#: hundred commands a second, for wake-ups its own poll would bring a little later.
IDLE_POLL_S = 0.25
#: A ``getMore`` back sooner than this did not wait for a change.
_PROMPT_S = 0.005
_RETRY_S = 5.0

#: Inserts of claimable jobs (one inserted already claimed by its dispatcher is not).
JOB_INSERTS: list[Doc] = [
    {
        "$match": {
            "operationType": {"$eq": "insert"},
            "fullDocument.kind": {"$eq": "dispatch"},
            "fullDocument.status": {"$eq": "scheduled"},
        }
    }
]


def unsupported(exc: OperationFailure) -> bool:
    """Whether the server refused a change stream for good (a standalone MongoDB, or a
    server without the stage), rather than failed once."""
    message = str(exc)
    return exc.code in (40573, 40324, 136) or "$changeStream" in message


async def job_inserts(steps: AsyncCollection[Doc]) -> AsyncIterator[None]:
    """Yield once per inserted queue job (or batch of them) until the server refuses
    change streams; reopened after a broken stream."""
    async for _ in inserts(steps, JOB_INSERTS, "change stream", "workers poll"):
        yield None


async def inserts(
    collection: AsyncCollection[Doc],
    pipeline: list[Doc],
    what: str,
    fallback: str | None,
    *,
    poll_s: float = POLL_S,
) -> AsyncIterator[None]:
    """Yield once per change ``pipeline`` lets through (or batch of them) until the
    server refuses change streams (logged at INFO with ``fallback``, when given);
    reopened after a broken stream (``what`` names it in the warning). ``poll_s``: how
    often it is read where the server answers at once."""
    async for _ in changes(collection, pipeline, what, fallback, poll_s=poll_s):
        yield None


async def runs_changed(
    collection: AsyncCollection[Doc],
    operations: list[str],
    what: str,
    *,
    holding: Doc | None = None,
) -> AsyncIterator[str]:
    """Yield "" once the stream is open, then the run id of each document of
    ``collection`` (its ``_id`` begins with its packed run id, then the separator of
    step ids) that an operation of ``operations`` changed, until the server refuses
    change streams. ``holding``: only changes after which the document matches it (the
    server looks the document up; only its key comes back)."""
    match: Doc = {"operationType": {"$in": operations}}
    pipeline: list[Doc] = [{"$match": match}]
    if holding is not None:
        match.update({f"fullDocument.{k}": v for k, v in holding.items()})
        pipeline.append({"$project": {"documentKey": 1}})
    lookup = "updateLookup" if holding is not None else None
    async for change in changes(collection, pipeline, what, None, opened=True, lookup=lookup):
        if not change:
            yield ""  # watching from now on
            continue
        doc_id = change.get("documentKey", {}).get("_id")
        if isinstance(doc_id, str):
            yield unpack(doc_id.split(ID_SEPARATOR, 1)[0])


async def changes(
    collection: AsyncCollection[Doc],
    pipeline: list[Doc],
    what: str,
    fallback: str | None,
    *,
    opened: bool = False,
    lookup: str | None = None,
    poll_s: float = POLL_S,
) -> AsyncIterator[Doc]:
    """Each change ``pipeline`` lets through (see :func:`inserts`); ``opened``: and an
    empty document each time the stream is (re)opened; ``lookup``: the stream's
    ``full_document`` option."""
    while True:
        try:
            async with await collection.watch(
                pipeline, max_await_time_ms=MAX_AWAIT_MS, full_document=lookup
            ) as stream:
                if opened:
                    yield {}
                while stream.alive:
                    asked = time.monotonic()
                    change = await stream.try_next()
                    if change is not None:
                        yield change
                    elif time.monotonic() - asked < _PROMPT_S:
                        await asyncio.sleep(poll_s)
        except OperationFailure as exc:
            if unsupported(exc):
                if fallback is not None:
                    log.info("no change streams on this server (%s); %s", exc, fallback)
                return
            log.warning("%s failed (%s); reopening in %.0f s", what, exc, _RETRY_S)
        except PyMongoError as exc:
            log.warning("%s broke (%s); reopening in %.0f s", what, exc, _RETRY_S)
        await asyncio.sleep(_RETRY_S)
