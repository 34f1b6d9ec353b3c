"""Stream entries riding a run write (DESIGN 3g, 7): one command for both.

A workflow body's stream writes wait for its next durable boundary, whose run write
goes out through the ``runs`` group commit (:mod:`pikku_mongo.batcher`). The entries
join the ``streams`` batcher's queue without sending at once (it waits a few turns of
the event loop); when the ``runs`` batcher sends its next batch meanwhile, it takes them
and sends both in one client-level ``bulkWrite`` (MongoDB 8.0+, and nx-27017). Each
write learns its own outcome from the verbose results, so a guarded run write needs no
upsert there: its matched count is its guard. A server without that command (mongoeco,
MongoDB before 8.0) is found out once, and the entries then go in a command of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from pymongo import InsertOne, UpdateOne
from pymongo.errors import ClientBulkWriteException, InvalidOperation, OperationFailure

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

    from pikku_mongo.batcher import Doc, _Write

_DUPLICATE_KEY = 11000
#: Codes of a server that does not know the command (and nx-27017's own refusal).
_UNKNOWN_COMMAND = (59, 115)


class NotServed(Exception):
    """The server serves no client-level ``bulkWrite``: send as before."""


async def send_riding(
    runs: AsyncCollection[Doc],
    streams: AsyncCollection[Doc],
    batch: Sequence[_Write],
    riders: Sequence[_Write],
) -> list[bool | BaseException]:
    """Send ``batch`` (run writes) and ``riders`` (stream inserts) in one command; the
    outcomes of ``batch`` then ``riders``, in order. Raises :class:`NotServed` (nothing
    was applied) on a server without the command."""
    models: list[InsertOne[Doc] | UpdateOne] = []
    for write in batch:
        if write.kind == "insert":
            models.append(InsertOne(write.filter, namespace=runs.full_name))
        else:
            models.append(
                UpdateOne(
                    write.filter,
                    write.update,
                    upsert=write.kind == "upsert",
                    namespace=runs.full_name,
                )
            )
    models += [InsertOne(w.filter, namespace=streams.full_name) for w in riders]
    errors: dict[int, Any] = {}
    try:
        result = await runs.database.client.bulk_write(
            models, ordered=False, verbose_results=True, write_concern=runs.write_concern
        )
    except InvalidOperation as exc:  # refused before sending (an older server)
        raise NotServed(str(exc)) from exc
    except ClientBulkWriteException as exc:
        if isinstance(exc.error, BaseException):
            # The command failed as a whole (a lost connection, a stepped-down primary):
            # what it was is what decides a retry, and every write is sent again.
            raise exc.error from exc
        if exc.partial_result is None or exc.write_concern_errors:
            raise
        result = exc.partial_result
        errors = {int(e["idx"]): e for e in cast(list[Any], exc.write_errors or [])}
    except OperationFailure as exc:
        if exc.code in _UNKNOWN_COMMAND or "bulkWrite" in str(exc):
            raise NotServed(str(exc)) from exc
        raise
    updates = result.update_results if result.has_verbose_results else {}
    outcomes: list[bool | BaseException] = []
    for index, write in enumerate([*batch, *riders]):
        error = errors.get(index)
        if error is not None:
            if int(error.get("code", 0)) == _DUPLICATE_KEY:
                outcomes.append(False)
            else:
                outcomes.append(
                    OperationFailure(str(error.get("errmsg", error)), error.get("code"))
                )
        elif write.kind == "guarded":
            outcomes.append(updates[index].matched_count == 1)
        else:
            outcomes.append(True)
    return outcomes
