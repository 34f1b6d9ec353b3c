"""Writing streams: from a workflow body (exactly once per position) and from a step
attempt (tagged ``(attempt, n)``), and a step's heartbeats. See ``engine_core.streams``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from engine_core.common.clock import Clock
from engine_core.common.values import check_name, to_stored
from engine_core.errors import StreamClosedError, StreamConflictError
from engine_core.run.step_info import StepInfo
from engine_core.store import Store
from engine_core.streams import StreamEntry, check_entry

#: A body that writes this many entries with no step in between sends them at once.
FLUSH_AT = 1000


class BodyStreams:
    """A pass's stream writes. The body counts its positions per stream, so each replay
    reaches the same positions: a position an earlier pass wrote is skipped without a
    command, a new one is appended once (a repeat collides with its first write).

    Writes wait in memory until the body's next durable boundary (a step, a wait, the
    end of the pass), whose write they ride: :meth:`kick` sends them through the group
    commit as that write goes out. The pass ends only once every write landed; a write
    that failed ends the pass, and its replay writes it (a later batch is sent only after
    the earlier one landed, so a stream never has a gap). Before the first write of a
    stream in a later pass, the pass reads how far earlier passes wrote it.
    """

    def __init__(self, store: Store, run_id: str, clock: Clock, *, first_pass: bool) -> None:
        self._store = store
        self._run_id = run_id
        self._clock = clock
        # On a run's first pass nothing was written before: no length to read.
        self._first_pass = first_pass
        self._counts: dict[str, int] = {}
        self._written: dict[str, int] = {}
        self._closed: set[str] = set()
        self._pending: list[StreamEntry] = []
        self._sending: asyncio.Future[None] | None = None

    async def write(self, key: str, value: Any, *, closed: bool = False) -> None:
        """Write ``value`` at the stream's next position (``closed``: and close it), exactly
        once across replays."""
        check_name(key, "stream key")
        if key in self._closed:
            raise StreamClosedError(
                f"stream {key!r} of run {self._run_id!r} was closed: write to another stream"
            )
        stored = None if closed else to_stored(value, f"entry of stream {key!r}")
        position = self._counts.get(key, 0)
        check_entry(self._run_id, key, position, stored)
        self._counts[key] = position + 1
        if closed:
            self._closed.add(key)
        self._pending.append(
            StreamEntry(self._run_id, key, position, stored, self._clock.now(), closed=closed)
        )
        if len(self._pending) >= FLUSH_AT:
            await self.flush()

    def kick(self) -> asyncio.Future[None] | None:
        """Send the waiting writes (after those sent before); what to await for them
        to have landed, or None when nothing is on its way. The store is asked for them
        before the caller's own write, so that write can carry them."""
        if self._pending:
            batch, self._pending = self._pending, []
            before = self._sending
            settled = before is None or (before.done() and before.exception() is None)
            if settled and self._known(batch):
                # Asked now, ahead of the boundary's write (tasks start in order).
                asked = [
                    asyncio.ensure_future(self._store.append_stream(e))
                    for e in batch
                    if e.position >= self._written[e.key]
                ]
                self._sending = asyncio.ensure_future(self._landed(before, asked))
            else:
                self._sending = asyncio.ensure_future(self._send(batch, before))
        elif self._sending is not None and self._sending.done() and not self._sending.exception():
            self._sending = None
        return self._sending

    def _known(self, batch: list[StreamEntry]) -> bool:
        """Whether what earlier passes wrote of these streams is known (a first pass
        knows it: nothing)."""
        for key in {e.key for e in batch} - self._written.keys():
            if not self._first_pass:
                return False
            self._written[key] = 0
        return True

    async def flush(self) -> None:
        """Until every write so far has landed."""
        sending = self.kick()
        if sending is not None:
            await sending

    async def _send(self, batch: list[StreamEntry], before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await before
        for key in {e.key for e in batch} - self._written.keys():
            written = 0 if self._first_pass else await self._store.stream_length(self._run_id, key)
            self._written[key] = written
        todo = [e for e in batch if e.position >= self._written[e.key]]
        await self._landed(
            None, [asyncio.ensure_future(self._store.append_stream(e)) for e in todo]
        )

    async def _landed(
        self,
        before: asyncio.Future[None] | None,
        asked: Sequence[asyncio.Future[StreamEntry | None]],
    ) -> None:
        if before is not None:
            await before
        found = await asyncio.gather(*asked)
        for there in found:
            if there is not None and there.step is not None:
                raise StreamConflictError(
                    f"position {there.position} of stream {there.key!r} of run "
                    f"{self._run_id!r} holds an entry of step {there.step!r}: write the "
                    "body's entries and the steps' entries to different streams"
                )


class AttemptStreams:
    """What ``current_step()`` writes with in one step attempt: stream entries appended
    at the next free position, tagged with the attempt and a count from 0 per stream,
    and heartbeats (``renew``: the dispatched step's claim, renewed by each beat)."""

    def __init__(
        self, store: Store, clock: Clock, renew: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._renew = renew
        self._counts: dict[str, int] = {}
        self._next: dict[str, int] = {}

    async def write_stream(self, info: StepInfo, key: str, value: Any) -> None:
        """Write ``value`` to the stream ``key``, tagged with the attempt and its n-th write."""
        check_name(key, "stream key")
        stored = to_stored(value, f"entry of stream {key!r}")
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        position = self._next.get(key)
        if position is None:
            position = await self._store.stream_length(info.run_id, key)
        while True:
            check_entry(info.run_id, key, position, stored)
            entry = StreamEntry(
                info.run_id,
                key,
                position,
                stored,
                self._clock.now(),
                step=info.step,
                attempt=info.attempt,
                n=n,
            )
            there = await self._store.append_stream(entry)
            if there is None:
                self._next[key] = position + 1
                return
            if there.closed:
                raise StreamClosedError(
                    f"stream {key!r} of run {info.run_id!r} was closed: write to another stream"
                )
            # Another writer took it: append after the stream's end as it is now.
            position = max(position + 1, await self._store.stream_length(info.run_id, key))

    async def heartbeat(self, info: StepInfo, details: Any) -> None:
        """Record the attempt's heartbeat ``details`` (and renew a dispatched step's claim)."""
        stored = to_stored(details, f"heartbeat details of step {info.step!r}")
        await self._store.put_heartbeat(
            info.run_id, info.step, attempt=info.attempt, details=stored
        )
        if self._renew is not None:
            await self._renew()


async def previous_heartbeat(store: Store, run_id: str, key: str, attempt: int) -> Any:
    """The details the last heartbeat of an earlier attempt of the step left (None on a
    first attempt, which reads nothing)."""
    if attempt <= 1:
        return None
    kept = await store.get_heartbeat(run_id, key)
    return kept[1] if kept is not None and kept[0] < attempt else None
