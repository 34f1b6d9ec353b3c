"""Admission: moving runs from their queue's line to ``running``, within its limits.

Every serving process runs an admitter for each queue it declared. The limits hold
across the fleet because the queue's state (which runs hold slots, with their keys,
and the recent admission times) is one record that admitters replace by
compare-and-set: of two admitters working from one version, one lands and the other
reads again. A run holds its slot from the write that admits it until it is seen
terminal, so a slot whose process died is not lost with it (its run is recovered and
still counts) and frees itself when the run ends, wherever that happens. An admitter
that dies between reserving slots and moving the runs leaves them reserved and still
queued: the next round finds them in the line and moves them.

A round costs a constant number of store commands for up to :data:`BATCH` runs: read
the state, read the head of the line, save the state, move the runs (plus one read of
the holders when a limit binds, to drop the runs that ended).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from datetime import datetime, timedelta

from engine_core.flow.queues import QueueLimits
from engine_core.periodic import Periodic
from engine_core.records import TERMINAL, QueueState, RunRecord, utcnow
from engine_core.runtime import Runtime
from engine_core.store import Store

log = logging.getLogger("engine_core.flow.admission")

#: Runs admitted by one round at most; also how much of the line a round reads.
BATCH = 100
#: How often an admitter looks at its line with nothing telling it to.
POLL_S = 1.0
#: How long a poked admitter waits for more pokes before its round.
COALESCE_S = 0.005
#: Holders kept before a round drops those that ended even when no limit binds.
PRUNE_AT = 1000


class Admitter:
    """Admits the runs of one queue, in this process, when told or on a poll."""

    def __init__(self, store: Store, runtime: Runtime, limits: QueueLimits) -> None:
        self.store = store
        self.runtime = runtime
        self.limits = limits
        self._next_at: float | None = None
        self._loop = Periodic(
            f"admission for queue {limits.name!r}",
            self._turn,
            every=POLL_S,
            outages=runtime.outages,
            wait_first=True,
            settle=COALESCE_S,  # runs that end together (a group commit) share one round
        )

    def poke(self) -> None:
        """Something changed (a run joined the line or ended): look again now."""
        self._loop.wake()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _turn(self) -> float:
        """Admission rounds until one says to wait; the seconds until the next look."""
        self._next_at = None
        while await self.admit_round():
            pass
        if self._next_at is None:
            return POLL_S
        return max(0.0, min(POLL_S, self._next_at - time.monotonic()))

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
        now = utcnow()
        holders = dict(state.holders)
        recent = state.recent
        if limits.rate is not None:
            recent = [t for t in recent if t > now - timedelta(seconds=limits.rate.per)]
        pruned = len(holders) >= PRUNE_AT
        if pruned:
            holders = await self._live(holders)
        picked, reserved, full = self._pick(line, holders, len(recent))
        if full and holders and not pruned and limits.tracks_holders:
            # A limit binds: drop the holders that ended, then pick again.
            holders = await self._live(holders)
            picked, reserved, full = self._pick(line, holders, len(recent))
        if not picked:
            if reserved:
                await self._admit(reserved)
            self._arm_rate_wake(recent, now)
            return False
        for run in picked:
            holders[run.run_id] = run.queue_key
        saved = QueueState(
            name=limits.name,
            version=state.version + 1,
            holders=holders if limits.tracks_holders else {},
            recent=(recent + [now] * len(picked)) if limits.rate is not None else [],
            minutes=_count_minutes(state.minutes, now, len(picked)),
        )
        if not await self.store.save_queue_state(saved, expect_version=state.version):
            return True  # another admitter moved first: read again
        await self._admit(reserved + picked)
        return not full and len(line) == BATCH

    def _pick(
        self, line: list[RunRecord], holders: dict[str, str | None], recent: int
    ) -> tuple[list[RunRecord], list[RunRecord], bool]:
        """The runs of ``line`` to admit now, the runs already holding slots (reserved by
        a round that did not get to move them), and whether a limit stopped the pick."""
        limits = self.limits
        free = math.inf if limits.concurrency is None else limits.concurrency - len(holders)
        if limits.rate is not None:
            free = min(free, limits.rate.count - recent)
        per_key = Counter(holders.values()) if limits.key_concurrency is not None else Counter()
        picked: list[RunRecord] = []
        reserved: list[RunRecord] = []
        full = False
        for run in line:
            if run.run_id in holders:
                reserved.append(run)
                continue
            if free <= 0:
                full = True
                break
            if limits.key_concurrency is not None:
                if per_key[run.queue_key] >= limits.key_concurrency:
                    full = True  # this key waits; runs of other keys may go past it
                    continue
                per_key[run.queue_key] += 1
            picked.append(run)
            free -= 1
        return picked, reserved, full

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
        left = [run.run_id for run, got in zip(holding, begun, strict=True) if got is None]
        left += [run.run_id for run in runs[len(holding) :]]
        for run in begun:
            if run is not None:
                runtime.adopt(run)
        if left:
            await self.store.admit_runs(left)
            for run_id in left:
                runtime.kick(run_id)

    def _arm_rate_wake(self, recent: list[datetime], now: datetime) -> None:
        rate = self.limits.rate
        if rate is None or not recent or len(recent) < rate.count:
            return
        # The window frees a slot when its oldest admission leaves it.
        frees_in = (recent[0] + timedelta(seconds=rate.per) - now).total_seconds()
        self._next_at = time.monotonic() + max(0.0, frees_in) + 0.001


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

    def __init__(self, store: Store, runtime: Runtime, queues: dict[str, QueueLimits]) -> None:
        self._admitters = {name: Admitter(store, runtime, q) for name, q in queues.items()}

    def start(self) -> None:
        for admitter in self._admitters.values():
            admitter.start()

    async def stop(self) -> None:
        for admitter in self._admitters.values():
            await admitter.stop()

    def poke(self, queue: str | None) -> None:
        """A run of ``queue`` joined its line or ended here."""
        admitter = self._admitters.get(queue) if queue is not None else None
        if admitter is not None:
            admitter.poke()
