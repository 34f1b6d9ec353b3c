"""pikku_mongo: the MongoDB store of the pikku workflow engine.

``MongoStore.from_uri("mongodb://host:27017/app")`` or ``MongoStore(database=db)`` with an
existing ``pymongo.asynchronous.database.AsyncDatabase``; then ``Engine(store)``.

What users may import: the names below (``__all__``), ``pikku_mongo.errors``, and what
the wings' ``__init__`` export: ``pikku_mongo.dashboard`` (``dashboard_app``),
``pikku_mongo.doctor`` (``diagnose``), ``pikku_mongo.wire`` (the command listeners
``OperationClock`` and ``CommandCounter``, for a client of your own) and
``pikku_mongo.cli`` (``main``, the ``pikku-mongo`` command). Every other module of the
wings (``wire/``, ``writes/``, ``store/``, ``doctor/``, ``dashboard/``, ``cli/``) is
internal and may change without notice.
"""

from __future__ import annotations

from pikku_mongo.errors import MissingDatabaseError, PikkuMongoError
from pikku_mongo.store.mongo_store import MongoStore

__all__ = ["MissingDatabaseError", "MongoStore", "PikkuMongoError"]
