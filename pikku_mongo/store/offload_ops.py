"""``MongoStore``'s values kept in GridFS: a value (as stored: JSON text, or the bytes the
engine's codec made) past ``offload_over`` goes to the bucket ``{prefix}values`` and
its document holds a reference (:class:`~pikku_mongo.wire.encoding.Offloaded`), so no
document comes near MongoDB's 16 MiB however large a step's result. The engine decides
which values go (:mod:`engine_core.codecs.apart`); reads that give values back fetch
them, lists leave them where they are.

The files are GridFS's own layout (``files``: ``_id``, ``length``, ``chunkSize``,
``uploadDate``, ``filename``, ``metadata``; ``chunks``: ``files_id``, ``n``, ``data``),
read back with PyMongo's :class:`gridfs.AsyncGridFSBucket`, each document also holding
its run's packed id in ``run_id`` (and the file in ``filename``, what a server that keeps
GridFS in tables of its own still finds it by): they are deleted with their run, and
stamped for retention with it (:mod:`pikku_mongo.store.owned`). A value is written with one
``insert`` of its chunks (a 48 MB message each: one for 20 MB) and one of its file
document, not through the bucket's upload stream, which first probes the collections'
indexes on every upload (two more reads; ``init`` creates them once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bson import Int64, ObjectId
from gridfs import AsyncGridFSBucket
from pymongo import ASCENDING, DeleteMany, DeleteOne, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError

from engine_core.errors import ValueTooLargeError
from pikku_mongo.wire.checks import check_str
from pikku_mongo.wire.documents import Doc
from pikku_mongo.wire.encoding import Offloaded, dump_text, load_value, pack
from pikku_mongo.wire.retry import transient_retry
from pikku_mongo.writes.queued import only_duplicates

#: GridFS's default chunk size (255 KiB): a chunk document stays well under 16 MiB.
CHUNK_SIZE = 255 * 1024
#: GridFS's own indexes (what the bucket reads by).
FILE_INDEXES = [IndexModel([("filename", ASCENDING), ("uploadDate", ASCENDING)])]
CHUNK_INDEXES = [IndexModel([("files_id", ASCENDING), ("n", ASCENDING)], unique=True)]


@dataclass(eq=False, kw_only=True)
class OffloadOps:
    """The values of ``MongoStore`` past ``offload_over`` bytes, in GridFS (``files``
    and ``chunks`` of the bucket ``bucket``); ``max_value``: the largest it keeps."""

    files: AsyncCollection[Doc]
    chunks: AsyncCollection[Doc]
    bucket: AsyncGridFSBucket
    offload_over: int
    max_value: int

    async def create_indexes(self) -> None:
        """1 ``createIndexes`` per collection (GridFS's own)."""
        await self.files.create_indexes(FILE_INDEXES)
        await self.chunks.create_indexes(CHUNK_INDEXES)

    async def offload_values(self, run_id: str, values: Sequence[Any]) -> list[Offloaded]:
        """Keep each of ``values`` (as stored) in GridFS for run ``run_id``; their
        references. Per value: 1 insert of its chunks (one more per 48 MB), 1 insert of
        its file document. :class:`~engine_core.ValueTooLargeError` (writing nothing)
        for one past ``max_value``."""
        owner = pack(check_str(run_id, "run id"))
        encoded = [
            (v, True) if type(v) is bytes else (dump_text(v).encode(), False) for v in values
        ]
        for data, _ in encoded:
            if len(data) > self.max_value:
                raise ValueTooLargeError(
                    f"a value of run {run_id!r} is {len(data)} bytes as stored, over "
                    f"max_value ({self.max_value} bytes): store large data elsewhere and "
                    "checkpoint a reference to it"
                )
        return [await self._upload(owner, data, sealed) for data, sealed in encoded]

    @transient_retry
    async def _upload(self, owner: str, data: bytes, sealed: bool) -> Offloaded:
        file_id = ObjectId()
        chunks = [
            {
                "_id": ObjectId(),
                "files_id": file_id,
                "n": n,
                "data": data[at : at + CHUNK_SIZE],
                "run_id": owner,
            }
            for n, at in enumerate(range(0, len(data), CHUNK_SIZE))
        ]
        try:
            await self.chunks.insert_many(chunks, ordered=False)
        except BulkWriteError as exc:  # a repeat after a lost reply: those landed
            if not only_duplicates(exc):
                raise
        file = {
            "_id": file_id,
            "length": Int64(len(data)),
            "chunkSize": CHUNK_SIZE,
            "uploadDate": datetime.now(UTC),
            "filename": owner,
            "metadata": {"sealed": sealed},
            "run_id": owner,
        }
        try:
            await self.files.insert_one(file)
        except DuplicateKeyError:
            pass
        return Offloaded(file_id, len(data), sealed)

    async def fetch_values(self, references: Sequence[Offloaded]) -> list[Any]:
        """The values (as stored: the codec's bytes, or the JSON value) ``references``
        name: per value 1 find of its file document and 1 of its chunks (a getMore per
        further 16 MiB), through :class:`gridfs.AsyncGridFSBucket`."""
        return [await self._download(reference) for reference in references]

    @transient_retry
    async def _download(self, reference: Offloaded) -> Any:
        stream = await self.bucket.open_download_stream(reference.file_id)
        data = await stream.read()
        return data if reference.sealed else load_value(data.decode("ascii"))

    async def drop_values(self, references: Sequence[Offloaded]) -> None:
        """Delete the files of ``references`` (a write that held them did not land)."""
        await self._delete_files([reference.file_id for reference in references])

    async def delete_of_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every file of these runs (packed ids): 1 find per run, then 1 bulk
        delete of their chunks and 1 of their file documents."""
        ids = []
        for run_id in run_ids:
            ids += [file["_id"] async for file in self.files.find({"filename": run_id})]
        await self._delete_files(ids)

    @transient_retry
    async def _delete_files(self, ids: Sequence[ObjectId]) -> None:
        # One equality per file: a server that keeps GridFS in tables of its own
        # (nx-27017) serves neither ``$in`` on these collections nor fields GridFS does
        # not define (``run_id``), so files are found by ``filename`` and deleted by id.
        if ids:
            await self.chunks.bulk_write([DeleteMany({"files_id": i}) for i in ids], ordered=False)
            await self.files.bulk_write([DeleteOne({"_id": i}) for i in ids], ordered=False)
