"""What every wire-server probe is made of: :class:`Check` (its outcome), :class:`Ctx`
(the client and a fresh collection per use), the command counter, the registry
:data:`PROBES` (filled by :func:`probe`, in the order the probe modules are imported)
and the helpers they share (times, exceptions as text)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any

from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase

Doc = dict[str, Any]
UTC = dt.UTC
T0 = dt.datetime(2030, 1, 1, tzinfo=UTC)


def t(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def fmt_exc(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    msg = str(exc).replace("\n", " ")
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return f"{type(exc).__name__}" + (f"(code={code})" if code is not None else "") + f": {msg}"


class Check:
    """Outcome of one probe: ok / DIFF (runs but differs from MongoDB) / ERROR."""

    def __init__(self, status: str, detail: str) -> None:
        self.status = status
        self.detail = detail

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status, "detail": self.detail}


def ok(detail: str = "") -> Check:
    return Check("ok", detail)


def diff(detail: str) -> Check:
    return Check("DIFF", detail)


class CommandCounter(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class Ctx:
    def __init__(
        self,
        client: AsyncMongoClient[Doc],
        db: AsyncDatabase[Doc],
        counter: CommandCounter,
        uri: str,
    ):
        self.client = client
        self.db = db
        self.counter = counter
        self.uri = uri
        self._n = 0

    def coll(self, name: str) -> Any:
        self._n += 1
        return self.db[f"{name}_{self._n}"]


ProbeFn = Callable[[Ctx], Awaitable[Check]]
PROBES: list[tuple[str, str, ProbeFn]] = []


def probe(name: str, expect: str) -> Callable[[ProbeFn], ProbeFn]:
    def deco(fn: ProbeFn) -> ProbeFn:
        PROBES.append((name, expect, fn))
        return fn

    return deco


async def seeded(c: Ctx, name: str) -> Any:
    """A fresh collection of five runs of mixed status and due times."""
    col = c.coll(name)
    await col.insert_many(
        [
            {"_id": 1, "status": "ready", "due_at": t(10), "kind": "x"},
            {"_id": 2, "status": "ready", "due_at": t(5), "kind": "y"},
            {"_id": 3, "status": "running", "due_at": t(1), "kind": "x", "lease": t(0)},
            {"_id": 4, "status": "ready", "due_at": t(5), "kind": "z"},
            {"_id": 5, "status": "done", "due_at": t(0)},
        ]
    )
    return col
