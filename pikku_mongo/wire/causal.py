"""Causally consistent reads: a read that decides something sees this process's own
acknowledged writes, even after a failover.

A ``majority`` read may be served from a majority-commit snapshot that does not yet hold
a write this process saw acknowledged (after a failover, or through a router). A causally
consistent session sends ``readConcern.afterClusterTime`` = the operation time of the
last write it knows, and the server waits until its snapshot holds it. A session must not
serve concurrent operations, and the store runs many coroutines at once, so:

* :class:`OperationClock`, a command listener on the client, keeps the newest
  ``operationTime`` and ``$clusterTime`` of any reply (writes', and reads', which keeps
  reads monotonic too);
* each deciding read runs in a short-lived session of its own, advanced to those times
  (:meth:`CausalReads.causal`). Starting and ending a session sends no command: the
  server session comes from the driver's pool, as an implicit session's does.

A server that returns no ``operationTime`` (a standalone server, the test servers) gets
plain reads: no session is started at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from bson.timestamp import Timestamp
from pymongo import monitoring
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.asynchronous.mongo_client import AsyncMongoClient


class OperationClock(monitoring.CommandListener):
    """The newest ``operationTime`` and ``$clusterTime`` in the replies a client got
    (``MongoStore.from_uri`` adds one; for a client of your own pass
    ``event_listeners=[OperationClock()]`` to have the store read causally)."""

    def __init__(self) -> None:
        self.operation_time: Timestamp | None = None
        self.cluster_time: Mapping[str, Any] | None = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Nothing: a command's times come with its reply."""
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Keep the reply's times when they are newer."""
        self._see(event.reply)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        # A failed command's reply carries the times too (a write concern error may
        # follow a write that was applied).
        """Keep the failed reply's times when they are newer."""
        failure = event.failure
        if isinstance(failure, Mapping):
            self._see(failure)

    def _see(self, reply: Mapping[str, Any]) -> None:
        seen = reply.get("operationTime")
        if isinstance(seen, Timestamp) and (
            self.operation_time is None or seen > self.operation_time
        ):
            self.operation_time = seen
        cluster = reply.get("$clusterTime")
        if isinstance(cluster, Mapping) and isinstance(cluster.get("clusterTime"), Timestamp):
            if (
                self.cluster_time is None
                or cluster["clusterTime"] > self.cluster_time["clusterTime"]
            ):
                self.cluster_time = cluster


def find_clock(client: AsyncMongoClient[Any]) -> OperationClock | None:
    """The :class:`OperationClock` among ``client``'s listeners, if it has one."""
    for listener in client.options.event_listeners:
        if isinstance(listener, OperationClock):
            return listener
    return None


class _Session:
    """``async with``: a causally consistent session, ended on the way out; or None."""

    __slots__ = ("session",)

    def __init__(self, session: AsyncClientSession | None) -> None:
        self.session = session

    async def __aenter__(self) -> AsyncClientSession | None:
        return self.session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.session is not None:
            await self.session.end_session()


_PLAIN = _Session(None)


class CausalReads:
    """The store's deciding reads: ``async with reads.causal() as session:``, then pass
    ``session=session`` to the read (None when no operation time is known yet)."""

    def __init__(self, database: AsyncDatabase[Any], clock: OperationClock | None) -> None:
        self.database = database
        #: The client's :class:`OperationClock`; None: plain reads.
        self.clock = clock

    def causal(self) -> _Session:
        """A session that reads after this process's newest known operation time."""
        clock = self.clock
        if clock is None or clock.operation_time is None:
            return _PLAIN
        session = self.database.client.start_session(causal_consistency=True)
        if clock.cluster_time is not None:
            session.advance_cluster_time(clock.cluster_time)
        session.advance_operation_time(clock.operation_time)
        return _Session(session)

    async def read_one(
        self,
        collection: AsyncCollection[dict[str, Any]],
        query: dict[str, Any],
        projection: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """``find_one``, causally after this process's writes."""
        async with self.causal() as session:
            return await collection.find_one(query, projection, session=session)

    async def read_all(
        self, collection: AsyncCollection[dict[str, Any]], query: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """``find(...).to_list()``, causally after this process's writes."""
        async with self.causal() as session:
            return await collection.find(query, session=session).to_list()
