"""Errors raised by pikku_mongo itself (other driver errors surface unchanged)."""

from __future__ import annotations

from engine_core.errors import RecordTooLargeError


class PikkuMongoError(Exception):
    """Base class of the errors pikku_mongo raises on purpose."""


class MissingDatabaseError(PikkuMongoError, ValueError):
    """A MongoDB URI given to :meth:`MongoStore.from_uri` names no database."""


class ServerUnreachableError(PikkuMongoError, ConnectionError):
    """No MongoDB server answered at ``uri`` (credentials removed) in time; ``reason`` is
    the driver's own explanation, cut to one line (no topology description)."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"cannot reach the MongoDB server at {uri} ({reason})")
        self.uri = uri
        self.reason = reason


class DocumentTooLargeError(PikkuMongoError, RecordTooLargeError):
    """A write was refused because a document would exceed MongoDB's 16 MiB BSON limit
    (by the driver before sending, or by the server). Nothing was written, and the store
    does not retry it: the same write would be refused again. (Also the engine's
    :class:`~engine_core.errors.RecordTooLargeError`, and so a ``ValueError``.)"""

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(
            f"{operation}: the document is over MongoDB's 16 MiB limit, so the write was "
            f"refused and not retried ({detail})"
        )
        self.operation = operation
        self.detail = detail


class LeaseTooShortError(PikkuMongoError, ValueError):
    """A lease or claim ttl that the store's clock skew bound would eat up: the holder
    counts a lease lost ``max_clock_skew`` before it ends, so a ttl must be at least
    twice the bound."""


class StorageFormatError(PikkuMongoError, RuntimeError):
    """The database was migrated to a storage format newer than this pikku-mongo knows:
    a process of an older version must not read or write it."""
