"""Errors raised by pikku_mongo itself (driver errors surface unchanged)."""

from __future__ import annotations


class PikkuMongoError(Exception):
    """Base class of the errors pikku_mongo raises on purpose."""


class MissingDatabaseError(PikkuMongoError, ValueError):
    """A MongoDB URI given to :meth:`MongoStore.from_uri` names no database."""
