"""Values a workflow body publishes (``ctx.set_value``): exactly once per call, latest
wins (docs/guides/values-and-updates.md).

Each call's place is counted as a step's key is, per branch of the body
(``engine_core.run.branches``): the branch's path, and the call's ordinal among that
branch's ``set_value`` calls of the key. Every pass reaches the same places. The store
keeps, per key, the latest value and each branch's mark (the place of its last write);
a write lands only past its branch's mark, so one made before changes nothing, and a
branch's later write is never undone by an earlier one landing late.

Writes wait in memory until the body's next durable boundary (a step, a wait, the end
of the pass), whose write they ride, as the body's stream writes do (a later write of
the same key by the same branch replaces one still waiting); the step starts, and the
pass ends, only once they landed. Before its first write, a pass other than the run's
first reads the marks (one query), and writes nothing an earlier pass wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from engine_core.common.values import to_stored
from engine_core.records import utcnow
from engine_core.store import Store

#: What a ``set_value`` call's key is counted under (before the key): no step name
#: holds a NUL, so these calls take no ordinal of a step's.
VALUE_CALL = "\x00value\x00"


class BodyValues:
    """A pass's value writes (see the module docstring). ``landed(run_id)`` is told once
    a batch of them landed (local readers are woken)."""

    def __init__(
        self, store: Store, run_id: str, *, first_pass: bool, landed: Callable[[str], None]
    ) -> None:
        self._store = store
        self._run_id = run_id
        # The marks of earlier passes, by key then branch; none on the run's first pass.
        self._marks: dict[str, dict[str, int]] | None = {} if first_pass else None
        self._pending: dict[tuple[str, str], tuple[Any, int, datetime]] = {}
        self._sending: asyncio.Future[None] | None = None
        self._told = landed

    async def set(self, key: str, value: Any, *, branch: str, position: int) -> None:
        """``value`` as the run's value ``key``, written by ``branch`` of the body at
        ``position``: sent with the next boundary unless an earlier pass wrote it."""
        stored = to_stored(value, f"value {key!r}")
        if self._marks is None:
            self._marks = {v.key: v.marks for v in await self._store.list_values(self._run_id)}
        if position <= self._marks.get(key, {}).get(branch, -1):
            return  # written by an earlier pass
        # Moved to the end: the batch is sent in the order of the body's calls.
        self._pending.pop((key, branch), None)
        self._pending[(key, branch)] = (stored, position, utcnow())

    def kick(self) -> asyncio.Future[None] | None:
        """Send the waiting writes (after the batch sent before has landed); what to
        await for them to have landed, or None when nothing is on its way. The store is
        asked for them before the caller's own write, so that write can carry them."""
        if self._pending:
            batch, self._pending = list(self._pending.items()), {}
            before = self._sending
            if before is None or (before.done() and before.exception() is None):
                self._sending = asyncio.ensure_future(self._landed(self._asked(batch)))
            else:
                self._sending = asyncio.ensure_future(self._after(before, batch))
        elif self._sending is not None and self._sending.done() and not self._sending.exception():
            self._sending = None
        return self._sending

    async def landed(self) -> None:
        """Until the writes sent so far have landed (raising what failed them)."""
        sending = self._sending
        if sending is not None:
            await sending

    async def flush(self) -> None:
        """Until every write so far has landed."""
        sending = self.kick()
        if sending is not None:
            await sending

    def _asked(
        self, batch: list[tuple[tuple[str, str], tuple[Any, int, datetime]]]
    ) -> list[asyncio.Future[bool]]:
        return [
            asyncio.ensure_future(
                self._store.put_value(
                    self._run_id, key, value, branch=branch, position=position, written_at=at
                )
            )
            for (key, branch), (value, position, at) in batch
        ]

    async def _after(
        self,
        before: asyncio.Future[None],
        batch: list[tuple[tuple[str, str], tuple[Any, int, datetime]]],
    ) -> None:
        await before  # a later value must not land before an earlier one
        await self._landed(self._asked(batch))

    async def _landed(self, asked: Sequence[asyncio.Future[bool]]) -> None:
        await asyncio.gather(*asked)
        self._told(self._run_id)
