"""Talking to a running run (docs/guides/values-and-updates.md): read the values it
publishes, send it updates and wait for their answers. A mixin of :class:`Engine`; a
client (an engine that registers no workflow) calls both."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from engine_core.common.convert import from_json
from engine_core.common.durations import Duration, parse_duration
from engine_core.common.values import check_name, check_run_id, to_stored
from engine_core.errors import RunNotActiveError, RunNotFoundError, UpdateRejectedError
from engine_core.fleet.talk_waiters import Backoff, Kind, Waiter
from engine_core.front.host import Host
from engine_core.records import TERMINAL, UpdateRecord, ValueRecord, utcnow

_T = TypeVar("_T")
_Found = TypeVar("_Found")


class TalkApi:
    """``engine.get_value`` and ``engine.update``."""

    _host: Host

    if TYPE_CHECKING:

        async def _call(self, fn: Callable[[], Awaitable[_T]], *, again: bool = True) -> _T: ...

    @overload
    async def get_value(
        self, run_id: str, key: str, *, timeout: Duration | None = None, returns: type[_T]
    ) -> _T: ...

    @overload
    async def get_value(
        self, run_id: str, key: str, *, timeout: Duration | None = None, returns: None = None
    ) -> Any: ...

    async def get_value(
        self, run_id: str, key: str, *, timeout: Duration | None = None, returns: Any = None
    ) -> Any:
        """The run's latest value ``key`` (``ctx.set_value``), as ``returns`` declares.
        Waits for a first one up to ``timeout`` seconds (``TimeoutError``; None: for as
        long as it takes). Raises :class:`RunNotActiveError` when the run ended without
        setting it, :class:`RunNotFoundError` for an unknown run."""
        check_run_id(run_id)
        check_name(key, "value key")
        deadline = _deadline(timeout)
        store = self._host.store

        async def look() -> ValueRecord | None:
            return await self._call(lambda: store.get_value(run_id, key))

        found = await self._until(run_id, "values", look, deadline, f"setting value {key!r}")
        return from_json(found.value, returns)

    @overload
    async def update(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
        timeout: Duration | None = None,
        returns: type[_T],
    ) -> _T: ...

    @overload
    async def update(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
        timeout: Duration | None = None,
        returns: None = None,
    ) -> Any: ...

    async def update(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str | None = None,
        timeout: Duration | None = None,
        returns: Any = None,
    ) -> Any:
        """Send update ``name`` with ``payload`` to the run (kept until a
        ``ctx.wait_for_update(name)`` takes it, oldest first) and wait for its answer:
        the reply, as ``returns`` declares; :class:`UpdateRejectedError` when the run
        rejected it; :class:`RunNotActiveError` when the run has ended or ends without
        answering; ``TimeoutError`` past ``timeout`` seconds (the update stays: call
        again with the same ``update_id`` to go on waiting). An ``update_id`` sent
        before stores nothing new and gets that update's answer, even once the run
        ended: a caller may retry safely. A payload that cannot cross a checkpoint
        raises ``NotSerializableError``, and nothing is stored."""
        check_run_id(run_id)
        check_name(name, "update name")
        update_id = uuid.uuid4().hex if update_id is None else check_name(update_id, "update id")
        stored = to_stored(payload, f"the payload of update {name!r}")
        deadline = _deadline(timeout)
        now = utcnow()
        sent = UpdateRecord(
            run_id, update_id, name, stored, now, seq=f"{time.time_ns():020d}-{update_id}"
        )
        store = self._host.store
        with self._host.talk.waiting(run_id, "answers") as waiter:
            hinted = await self._host.talk.ready("answers")
            # Not repeated whole: its own repeat (a lost reply) knows its first try.
            kept = await self._call(lambda: store.submit_update(sent), again=False)
            what = f"answering update {update_id!r} ({name!r})"

            async def look() -> UpdateRecord | None:
                handed = waiter.handed.get(update_id)
                if handed is not None:
                    return handed
                got = await self._call(lambda: store.get_update(run_id, update_id))
                return got if got is not None and got.answer is not None else None

            found = kept.existing
            if found is None and not kept.kept:
                raise _not_active(run_id, kept.run_status, "and takes no more updates")
            if found is None:
                self._host.kick(run_id)
            elif found.answer is None:  # sent before, not answered yet: is the run still on?
                found = await self._ended_with(run_id, look, what)
            if found is None or found.answer is None:
                found = await self._waited(run_id, waiter, look, Backoff(deadline, hinted), what)
        return _answer(found, returns)

    async def _until(
        self,
        run_id: str,
        kind: Kind,
        look: Callable[[], Awaitable[_Found | None]],
        deadline: float | None,
        what: str,
    ) -> _Found:
        """What ``look`` finds: at once, else waiting on the run (see :meth:`_waited`)."""
        with self._host.talk.waiting(run_id, kind) as waiter:
            found = await look()
            if found is None:
                found = await self._ended_with(run_id, look, what)
            if found is not None:
                return found
            hinted = await self._host.talk.ready(kind)
            return await self._waited(run_id, waiter, look, Backoff(deadline, hinted), what)

    async def _waited(
        self,
        run_id: str,
        waiter: Waiter,
        look: Callable[[], Awaitable[_Found | None]],
        backoff: Backoff,
        what: str,
    ) -> _Found:
        """Until ``look`` finds something, looking each time the caller is woken or its
        backoff says; the run is looked at every ``CHECK_S`` (and at once when it ended
        here): :class:`RunNotActiveError` once it ended with nothing found."""
        while True:
            try:
                woken = await waiter.wait(backoff.next_wait())
            except TimeoutError:
                raise TimeoutError(f"timed out waiting for run {run_id!r} {what}") from None
            found = await look()
            if found is None and (waiter.ended or (not woken and backoff.check_due())):
                waiter.ended = False
                found = await self._ended_with(run_id, look, what)
            if found is not None:
                return found

    async def _ended_with(
        self, run_id: str, look: Callable[[], Awaitable[_Found | None]], what: str
    ) -> _Found | None:
        """None while the run has not ended; once it has, what ``look`` finds now (a
        value or an answer written before the end), else :class:`RunNotActiveError`
        (:class:`RunNotFoundError` for no run)."""
        run = await self._call(lambda: self._host.store.get_run(run_id))
        if run is None:
            raise RunNotFoundError(f"no run has id {run_id!r}")
        if run.status not in TERMINAL:
            return None
        found = await look()
        if found is None:
            raise _not_active(run_id, run.status, f"without {what}")
        return found


def _deadline(timeout: Duration | None) -> float | None:
    if timeout is None:
        return None
    return time.monotonic() + parse_duration(timeout, what="timeout")


def _not_active(run_id: str, status: str | None, what: str) -> Exception:
    if status is None:
        return RunNotFoundError(f"no run has id {run_id!r}")
    return RunNotActiveError(
        f"run {run_id!r} has ended ({status}) {what}", run_id=run_id, status=status
    )


def _answer(update: UpdateRecord, returns: Any) -> Any:
    """What ``engine.update`` gives for an answered update."""
    answer = update.answer or {}
    if "rejected" in answer:
        reason = str(answer["rejected"])
        raise UpdateRejectedError(
            f"run {update.run_id!r} rejected update {update.update_id!r} "
            f"({update.name!r}): {reason}",
            reason=reason,
            update_id=update.update_id,
            run_id=update.run_id,
        )
    return from_json(answer.get("value"), returns)
