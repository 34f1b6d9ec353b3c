"""The wire: how the store's records become documents, filters and commands, and what
it learns from the server (retries of transient errors, the server's facts and clock,
causal reads, change streams, indexes, shard keys).

Two command listeners here are for an application that hands ``MongoStore`` a client of
its own: pass ``event_listeners=[OperationClock(), CommandCounter()]`` to
``AsyncMongoClient`` (``MongoStore.from_uri`` adds both) to have the store read causally
and count its commands.
"""

from pikku_mongo.wire.causal import OperationClock
from pikku_mongo.wire.command_metrics import CommandCounter

__all__ = ["CommandCounter", "OperationClock"]
