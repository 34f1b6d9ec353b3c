"""The store: ``MongoStore`` and the parts it is built from, one per collection or
concern (runs, steps and the queue, flow control, schedules, forks, streams, workers,
dedup claims, listing, the indexes of queued work for targeted polling, migrations).
``MongoStore`` is its public name."""

from pikku_mongo.store.mongo_store import MongoStore

__all__ = ["MongoStore"]
