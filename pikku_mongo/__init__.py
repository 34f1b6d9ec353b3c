"""pikku_mongo: the MongoDB store of the pikku workflow engine.

``MongoStore.from_uri("mongodb://host:27017/app")`` or ``MongoStore(database=db)`` with an
existing ``pymongo.asynchronous.database.AsyncDatabase``; then ``Engine(store)``.
"""

from __future__ import annotations

from pikku_mongo.errors import MissingDatabaseError, PikkuMongoError
from pikku_mongo.store.mongo_store import MongoStore

__all__ = ["MissingDatabaseError", "MongoStore", "PikkuMongoError"]
