"""This process's callers waiting on runs: for a first value (``engine.get_value``) or
for an update's answer (``engine.update``).

A caller is woken, without a read of its own, when this process writes what it waits
for (an answer is handed over whole) or ends the run; else by the store's hints: one
listener per kind (values, answers) for the whole process, open while someone waits and
for :data:`LINGER_S` after, so a burst of calls opens one change stream, not one each.
Where the store has no hints the caller polls with a backoff; either way it looks by
itself every :data:`CHECK_S` (a hint is never a promise), which is also when it learns
that a run ended in another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Literal

from engine_core.records import UpdateRecord
from engine_core.store import Store

log = logging.getLogger("engine_core")

Kind = Literal["values", "answers"]
#: How long a listener stays open after its last caller left.
LINGER_S = 10.0
#: How long a caller waits for its listener to be watching before it goes on without.
READY_S = 2.0
#: Polling backoff without hints: from this, doubling, up to the cap.
POLL_MIN_S = 0.005
POLL_MAX_S = 0.5
#: How often a caller looks by itself (hints or not), and whether its run has ended.
CHECK_S = 1.0


class Waiter:
    """One waiting caller: woken by :meth:`TalkWaiters.wake` or its kind's hints."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.woken = asyncio.Event()
        #: Answers this process handed over, by update id.
        self.handed: dict[str, UpdateRecord] = {}
        #: The run ended in this process.
        self.ended = False

    async def wait(self, seconds: float) -> bool:
        """Until woken (True) or ``seconds`` passed (False)."""
        if not self.woken.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), seconds)
        woken = self.woken.is_set()
        self.woken.clear()
        return woken


class _Listener:
    """The store's hints of one kind, followed for as long as someone waits."""

    def __init__(self, hints: AsyncIterator[str] | None, wake: Callable[[str], None]) -> None:
        self.ready = asyncio.Event()
        self.live = hints is not None
        self._hints = hints
        self._wake = wake
        self._task = asyncio.ensure_future(self._follow()) if hints is not None else None
        self._closing: asyncio.TimerHandle | None = None

    async def _follow(self) -> None:
        assert self._hints is not None
        try:
            async for run_id in self._hints:
                if run_id:
                    self._wake(run_id)
                else:
                    self.ready.set()  # watching: any write from now on is hinted
        except Exception as exc:
            log.warning("waiting callers' hints failed: %s: %s", type(exc).__name__, exc)
        finally:
            self.live = False  # no hints (a server without change streams): callers poll
            self.ready.set()
            closing = getattr(self._hints, "aclose", None)
            if closing is not None:
                with contextlib.suppress(BaseException):
                    await closing()

    def keep(self) -> None:
        if self._closing is not None:
            self._closing.cancel()
            self._closing = None

    def close_later(self, close: Callable[[], None]) -> None:
        self._closing = asyncio.get_running_loop().call_later(LINGER_S, close)

    def close(self) -> None:
        self.keep()
        self.live = False
        if self._task is not None:
            self._task.cancel()  # its hints are closed on the way out


class TalkWaiters:
    """The callers of this process waiting on runs, by run id (see the module
    docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: dict[str, set[Waiter]] = {}
        self._count: dict[Kind, int] = {"values": 0, "answers": 0}
        self._listeners: dict[Kind, _Listener] = {}

    @contextlib.contextmanager
    def waiting(self, run_id: str, kind: Kind) -> Iterator[Waiter]:
        """A caller waiting on ``run_id`` for ``kind`` while the block runs."""
        waiter = Waiter(run_id)
        self._waiting.setdefault(run_id, set()).add(waiter)
        self._count[kind] += 1
        listener = self._listener(kind)
        listener.keep()
        try:
            yield waiter
        finally:
            waiting = self._waiting.get(run_id)
            if waiting is not None:
                waiting.discard(waiter)
                if not waiting:
                    del self._waiting[run_id]
            self._count[kind] -= 1
            if not self._count[kind]:
                listener.close_later(lambda: self._close(kind, listener))

    async def ready(self, kind: Kind) -> bool:
        """Whether hints of ``kind`` are live (waiting up to :data:`READY_S` for the
        listener to watch): False means poll."""
        listener = self._listener(kind)
        if listener.live and not listener.ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(listener.ready.wait(), READY_S)
        return listener.live and listener.ready.is_set()

    def wake(self, run_id: str, answer: UpdateRecord | None = None, *, ended: bool = False) -> None:
        """Something the callers waiting on ``run_id`` wait for may have come (``answer``:
        this process answered that update; ``ended``: the run ended here)."""
        for waiter in self._waiting.get(run_id, ()):
            if answer is not None:
                waiter.handed[answer.update_id] = answer
            waiter.ended = waiter.ended or ended
            waiter.woken.set()

    def close(self) -> None:
        """Stop every listener (the engine is shutting down)."""
        for kind, listener in list(self._listeners.items()):
            self._close(kind, listener)

    def _listener(self, kind: Kind) -> _Listener:
        listener = self._listeners.get(kind)
        if listener is None:
            hints = self.store.value_hints() if kind == "values" else self.store.answer_hints()
            listener = self._listeners[kind] = _Listener(hints, self.wake)
        return listener

    def _close(self, kind: Kind, listener: _Listener) -> None:
        if self._listeners.get(kind) is listener and not self._count[kind]:
            del self._listeners[kind]
            listener.close()


class Backoff:
    """When a waiting caller looks next: at :data:`CHECK_S` with live hints, else from
    :data:`POLL_MIN_S` doubling to :data:`POLL_MAX_S`; never past its deadline."""

    def __init__(self, deadline: float | None, hinted: bool) -> None:
        self.deadline = deadline
        self.hinted = hinted
        self._delay = POLL_MIN_S
        self._checked = time.monotonic()

    def next_wait(self) -> float:
        """Seconds to wait now (``TimeoutError`` once the deadline has passed)."""
        wait = CHECK_S if self.hinted else self._delay
        self._delay = min(self._delay * 2, POLL_MAX_S)
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            wait = min(wait, left)
        return wait

    def check_due(self) -> bool:
        """Whether the run's status is due a look (every :data:`CHECK_S`)."""
        now = time.monotonic()
        if now - self._checked >= CHECK_S:
            self._checked = now
            return True
        return False
