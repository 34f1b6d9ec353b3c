"""Admission: moving runs from their queue's line to ``running``, within its limits.

Every serving process runs an admitter for each queue it declared. The limits hold
across the fleet because every admission is reserved in the queue's state, one record
that admitters replace by compare-and-set: of two admitters working from one version,
one lands and the other reads again. The state stays small whatever the limits:

- the admitted runs are not listed in it. The store counts a queue's admitted runs
  that have not ended (one index range, :meth:`~engine_core.store.Store.count_admitted`;
  per key, :meth:`~engine_core.store.Store.count_admitted_keys`), and the state keeps
  ``held``, an upper bound of that count (each admission adds to it; runs that end do
  not take from it), so the count is taken only when the bound says ``concurrency``
  might bind, and then sets it exactly (and by each admitter until it has saved a
  count of its own: a fleet that declared the queue without ``concurrency`` kept no
  bound);
- the runs a round reserved and may not have moved yet (``reserved``, at most one
  batch) count as admitted until a later round sees them out of the line: read first,
  counted second, a run moved in between is counted twice, never missed;
- the rate limit keeps admissions as (time, count) entries, at most
  :data:`WINDOW_ENTRIES`: when there are more, the two closest in time merge into one
  stamped with the later time, which counts every admission in it for at least as
  long as its own time would. At most N admissions in any window, always. Each key's
  (``key_rate``) is kept the same way in a record of its own, the state listing only
  what those may not hold yet (:mod:`engine_core.flow.rate_windows`);
- on a fair queue (``fairness="key"``) the line itself is in turn order (each run took
  its key's next turn as it joined the line: see ``Store``'s ``FlowKeyStore``), and
  the state keeps ``turn``, the highest turn admitted, that a key coming back from
  idle starts from.

A run holds its slot from the write that admits it until it ends, so a slot whose
process died is not lost with it (its run is recovered and still counts) and frees
itself when the run ends, wherever that happens. An admitter that dies between
reserving slots and moving the runs leaves them reserved and still queued: the next
round moves them.

A round costs a constant number of store commands for up to :data:`BATCH` runs: read
the head of the line, read the state, save the state, move the runs; plus, with
``concurrency`` or ``key_concurrency``, one read of the runs the last round reserved
(by ``_id``), one count of a queue's admitted runs when ``concurrency`` may bind, and
one count of the admitted runs of the batch's keys (one command for all of them) with
``key_concurrency``; with ``key_rate``, one read of the keys' windows and one write of
them. A run re-entering its queue (a retry) joins the line and is admitted like any
other.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine_core.common.periodic import Periodic
from engine_core.common.runtime import Runtime
from engine_core.flow.queues import QueueLimits
from engine_core.flow.rate_windows import (
    WINDOW_ENTRIES,
    KeyRates,
    live_window,
    read_key_rates,
    window_with,
)
from engine_core.records import TERMINAL, LinePage, QueueState, RunRecord
from engine_core.store import Store

__all__ = ["BATCH", "WINDOW_ENTRIES", "Admission", "Admitter"]

log = logging.getLogger("engine_core.flow.admission")

#: Runs admitted by one round at most; also how much of the line a round reads, and
#: how many runs a queue's state holds reserved at most.
BATCH = 100
#: Pages of :data:`BATCH` runs a round reads at most when runs of keys at their limit
#: (``key_concurrency``, ``key_rate``) fill the head of the line while slots are free:
#: the runs of other keys behind them are admitted, up to this deep.
KEY_PAGES = 10
#: How often an admitter looks at its line with nothing telling it to.
POLL_S = 1.0
#: How long a poked admitter waits for more pokes before its round.
COALESCE_S = 0.005


@dataclass(frozen=True)
class _Room:
    """What one admission round may admit: the head of the line not reserved yet, the
    runs a round reserved that are still in the line (``waiting``), the holders an
    earlier version kept (``legacy``), the rate window, the free slots, the admitted
    runs counted (``held``; ``counted``: exactly), those of each key, and the keys'
    rate windows (with ``key_rate``)."""

    line: list[RunRecord]
    waiting: list[RunRecord]
    legacy: dict[str, str | None]
    window: list[tuple[datetime, int]]
    free: float
    held: int
    counted: bool
    per_key: Counter[str | None]
    key_rates: KeyRates | None


class Admitter:
    """Admits the runs of one queue, in this process, when told or on a poll."""

    def __init__(self, store: Store, runtime: Runtime, limits: QueueLimits) -> None:
        self.store = store
        self.runtime = runtime
        self.limits = limits
        self.clock = runtime.clock
        # When the rate window frees a slot (the clock's time), if a round found it full.
        self._next_at: datetime | None = None
        self._loop = Periodic(
            f"admission for queue {limits.name!r}",
            self._turn,
            every=POLL_S,
            outages=runtime.outages,
            wait_first=True,
            settle=COALESCE_S,  # runs that end together (a group commit) share one round
            clock=runtime.clock,
        )
        # Whether this admitter counted the queue's admitted runs once: ``held`` is an
        # upper bound only if every admission since it was counted added to it, which
        # a fleet that declared the queue with other limits (no ``concurrency``, or
        # none at all) did not do. Declarations change with the processes, so each
        # admitter counts until it has saved a state with a count of its own.
        self._counted = False

    def poke(self) -> None:
        """Something changed (a run joined the line or ended): look again now."""
        self._loop.wake()

    @property
    def busy(self) -> bool:
        """Whether a round runs now or is about to."""
        return self._loop.busy

    def start(self) -> None:
        """Start admitting from this queue's line."""
        self._loop.start()

    async def stop(self) -> None:
        """Stop admitting (a round in progress is cancelled)."""
        await self._loop.stop()

    async def _turn(self) -> float:
        """Admission rounds until one says to wait; the seconds until the next look."""
        self._next_at = None
        while await self.admit_round():
            pass
        if self._next_at is None:
            return POLL_S
        self._loop.wake_at(self._next_at)
        return max(0.0, min(POLL_S, (self._next_at - self.clock.now()).total_seconds()))

    async def admit_round(self) -> bool:
        """Admit what the limits allow from the head of the line; whether to go on at
        once (a full batch was admitted, or another admitter moved the state first)."""
        limits = self.limits
        line = await self.store.queued_runs(limits.name, limit=BATCH)
        if not line:
            return False
        if limits.unlimited:
            await self._admit(line)
            return len(line) == BATCH
        state = await self.store.get_queue_state(limits.name) or QueueState(limits.name)
        now = self.clock.now()
        room = await self._deeper(state, line, now)
        picked, full = self._pick(room)
        if not picked:
            if room.waiting:
                await self._admit(room.waiting)
            self._arm_rate_wake(room.window, now)
            return False
        by_key = Counter(r.queue_key for r in picked)
        rates = room.key_rates
        unsaved = rates.entries_after(by_key, now, state.version + 1) if rates else []
        saved = QueueState(
            name=limits.name,
            version=state.version + 1,
            held=room.held + len(picked) if limits.concurrency is not None else 0,
            reserved=[r.run_id for r in room.waiting + picked] if limits.tracks_holders else [],
            window=window_with(room.window, now, len(picked)) if limits.rate is not None else [],
            minutes=_count_minutes(state.minutes, now, len(picked)),
            legacy=room.legacy,
            turn=max([state.turn, *(r.queue_turn or 0 for r in picked)]),
            key_unsaved=unsaved,
        )
        if not await self.store.save_queue_state(saved, expect_version=state.version):
            return True  # another admitter moved first: read again
        self._counted = self._counted or room.counted
        if rates is not None:
            windows = rates.windows_to_save(by_key, now, unsaved)
            await self.store.save_key_windows(limits.name, windows, version=saved.version)
        await self._admit(room.waiting + picked)
        return not full and len(room.line) >= BATCH

    async def _deeper(self, state: QueueState, line: list[RunRecord], now: datetime) -> _Room:
        """The room for ``line``, read further down the line (up to :data:`KEY_PAGES`
        pages) while runs of keys at their limit fill it and slots are free."""
        room = await self._room(state, line, now)
        for _ in range(KEY_PAGES - 1):
            if not _keys_held_back(room, self._pick(room)[0]) or len(line) % BATCH:
                break
            last = line[-1]
            after = LinePage(last.priority, last.created_at, last.run_id, last.queue_turn)
            more = await self.store.queued_runs(self.limits.name, limit=BATCH, after=after)
            if not more:
                break
            line = line + more
            room = await self._room(state, line, now)
        return room

    async def _room(self, state: QueueState, line: list[RunRecord], now: datetime) -> _Room:
        """What the limits leave for ``line`` (the head of the queue's line) as ``state``
        and the admitted runs stand now."""
        limits = self.limits
        window = live_window(state.window, now, limits.rate)
        waiting: list[RunRecord] = []  # reserved by a round, still in the line
        if state.reserved and limits.tracks_holders:
            waiting = await self.store.get_runs(state.reserved, status_in=("queued",))
        legacy = await self._live(state.legacy)
        reserved = {r.run_id for r in waiting}
        line = [r for r in line if r.run_id not in reserved]
        free = float(BATCH - len(waiting))
        if limits.rate is not None:
            free = min(free, limits.rate.count - sum(n for _, n in window))
        held = state.held
        counted = False
        if limits.concurrency is not None:
            bound = held + len(legacy) + min(free, len(line))
            if not self._counted or bound > limits.concurrency:
                # The bound says the limit may bind: count exactly (after reading the
                # reserved runs, so a run moved in between counts twice, not never).
                held = len(waiting) + await self.store.count_admitted(limits.name)
                counted = True
            free = min(free, limits.concurrency - held - len(legacy))
        per_key = await self._per_key(line, waiting, legacy)
        rates = None
        if limits.key_rate is not None and line:
            rates = await read_key_rates(self.store, limits.key_rate, state, line, now)
        return _Room(line, waiting, legacy, window, free, held, counted, per_key, rates)

    async def _per_key(
        self, line: list[RunRecord], waiting: list[RunRecord], legacy: dict[str, str | None]
    ) -> Counter[str | None]:
        """The admitted runs of each key of ``line`` (with ``key_concurrency``)."""
        per_key: Counter[str | None] = Counter()
        if self.limits.key_concurrency is not None and line:
            keys = sorted({r.queue_key for r in line}, key=lambda k: (k is not None, k or ""))
            per_key.update(await self.store.count_admitted_keys(self.limits.name, keys))
            per_key.update(r.queue_key for r in waiting)
            per_key.update(legacy.values())
        return per_key

    def _pick(self, room: _Room) -> tuple[list[RunRecord], bool]:
        """The runs of the room's line to admit now, within its free slots and each
        key's limits, and whether a limit stopped the pick."""
        key_limit = self.limits.key_concurrency
        per_key, free, rates = Counter(room.per_key), room.free, room.key_rates
        picked: list[RunRecord] = []
        by_key: Counter[str | None] = Counter()
        full = False
        for run in room.line:
            if free <= 0:
                full = True
                break
            key = run.queue_key
            if (key_limit is not None and per_key[key] >= key_limit) or (
                rates is not None and not rates.room(key, by_key)
            ):
                full = True  # this key waits; runs of other keys may go past it
                continue
            per_key[key] += 1
            by_key[key] += 1
            picked.append(run)
            free -= 1
        return picked, full

    async def _live(self, holders: dict[str, str | None]) -> dict[str, str | None]:
        """``holders`` without the runs that ended (or are gone)."""
        if not holders:
            return holders
        runs = await self.store.get_runs(list(holders))
        alive = {r.run_id for r in runs if r.status not in TERMINAL}
        return {run_id: key for run_id, key in holders.items() if run_id in alive}

    async def _admit(self, runs: list[RunRecord]) -> None:
        """Move ``runs`` (as read from the line) to ``running``. While this process has
        room, each is admitted holding its lease, so its first pass begins in the same
        write (and the writes of one round share a group commit); the rest are left owed
        a pass, for this process or the fleet."""
        runtime = self.runtime
        holding = runs[: runtime.room_to_adopt()]
        ttl = runtime.config.lease_ttl
        begun = await asyncio.gather(
            *(
                self.store.admit_run_holding(run, holder=runtime.instance_id, ttl=ttl)
                for run in holding
            )
        )
        left = [run for run, got in zip(holding, begun, strict=True) if got is None]
        left += runs[len(holding) :]
        for run in begun:
            if run is not None:
                runtime.adopt(run)
        if left:
            await self.store.admit_runs(left)
            for run in left:
                runtime.kick(run.run_id)

    def _arm_rate_wake(self, window: list[tuple[datetime, int]], now: datetime) -> None:
        rate = self.limits.rate
        if rate is None or not window or sum(n for _, n in window) < rate.count:
            return
        # The window frees slots when its oldest entry leaves it.
        frees_at = window[0][0] + timedelta(seconds=rate.per)
        self._next_at = max(now, frees_at) + timedelta(milliseconds=1)


def _keys_held_back(room: _Room, picked: list[RunRecord]) -> bool:
    """Whether a round left runs of its line behind for their keys' limits while it
    had slots to spare."""
    return len(picked) < min(room.free, len(room.line))


def _count_minutes(
    minutes: list[tuple[int, int]], now: datetime, admitted: int
) -> list[tuple[int, int]]:
    """Admissions per Unix minute, this minute and the one before."""
    minute = int(now.timestamp() // 60)
    counts = {m: n for m, n in minutes if m >= minute - 1}
    counts[minute] = counts.get(minute, 0) + admitted
    return sorted(counts.items())


class Admission:
    """The admitters of this process, one per declared queue."""

    def __init__(self, store: Store, runtime: Runtime, queues: Mapping[str, QueueLimits]) -> None:
        self._admitters = {name: Admitter(store, runtime, q) for name, q in queues.items()}

    @property
    def busy(self) -> bool:
        """Whether an admitter's round runs now or is about to."""
        return any(admitter.busy for admitter in self._admitters.values())

    def start(self) -> None:
        """Start an admitter for every declared queue."""
        for admitter in self._admitters.values():
            admitter.start()

    async def stop(self) -> None:
        """Stop every admitter."""
        for admitter in self._admitters.values():
            await admitter.stop()

    def poke(self, queue: str | None) -> None:
        """A run of ``queue`` joined its line or ended here."""
        admitter = self._admitters.get(queue) if queue is not None else None
        if admitter is not None:
            admitter.poke()
