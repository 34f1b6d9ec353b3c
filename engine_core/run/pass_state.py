"""What one pass knows and does at every step boundary, whatever the kind of step.

A pass replays the workflow body from the top. This module holds its state and the
operations every kind of step shares: naming, starting an attempt, recording, parking.

One write per step: an outcome is not written on its own. It rides on the write that
starts the next step (or parks or ends the pass), into the run's journal
(:mod:`engine_core.common.journal`), or, on a store that can, with the journal's entries into
their step records by the same write once 16 gather (``journal.journals``); the body
between two steps is deterministic, so the outcome only has to be durable by then. An
outcome that would wait longer (the body awaits something else first) goes in a write
of its own as soon as the body yields.

No outcome is ever dropped. The journal holds at most ``journal_room`` characters (the
outcomes a write would take past it go to their step records first); an outcome too
large for the journal is written to its step record before the body sees it, and one the
store refuses fails its step (:class:`~engine_core.errors.RecordTooLargeError`). A write
that fails gives back its outcomes for the next write, which the pass awaits: the run is
never settled as if they had landed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar

from engine_core.common.journal import (
    FLUSH_AT,
    LARGE_OUTCOME,
    journals,
    merged,
)
from engine_core.common.runtime import Runtime
from engine_core.common.values import held_size
from engine_core.mirror import mirror_step
from engine_core.records import RunRecord, RunState, StepRecord
from engine_core.run.body_hooks import OUTCOME_HOLD
from engine_core.run.branches import StepNames
from engine_core.run.control import RunControl
from engine_core.run.divergence import Diverged, ReplayChecks
from engine_core.run.journal_room import (
    Carry,
    JournalRoom,
    Taken,
    journal_room,
    kept_in_journal,
    outcome_size,
)
from engine_core.run.signals import Parked, ReplayEnd, Stopped, stored_failure
from engine_core.run.transitions import Transition
from engine_core.run.values import BodyValues
from engine_core.store import Store

log = logging.getLogger("engine_core")

_T = TypeVar("_T")


class PassState:
    """The state of one pass: the run as it began, its steps, and what it started."""

    #: The body's value writes (``ctx.set_value``), once it made one.
    values: BodyValues | None = None

    def __init__(
        self,
        store: Store,
        runtime: Runtime,
        control: RunControl,
        run: RunRecord,
        steps: Sequence[StepRecord],
        unwritten: Sequence[StepRecord] = (),
    ) -> None:
        self.store = store
        self.runtime = runtime
        #: The engine's clock (``runtime.clock``), read at every step boundary.
        self.clock = runtime.clock
        self.control = control
        self.run = run
        self.steps = merged(run, steps)
        # Steps whose record waits for a retry: their outcome goes over that record when
        # the pass ends, or recovery's sweep would find the retry due for ever.
        self._records_due = {s.key for s in steps if s.status == "scheduled"}
        self.status: RunState = run.status
        #: A compensating run replays only to learn its compensations.
        self.replay_only = run.status == "compensating"
        #: How the steps the body reaches are keyed (by branch of the body).
        self.names = StepNames(run.key_scheme)
        #: What this pass reached of the recorded steps (divergence, patches).
        self.checks = ReplayChecks(
            self.steps, enabled=not self.replay_only, branches=self.names.by_branch()
        )
        self.compensations: dict[str, Callable[[Any], Any]] = {}
        self.traceparent: str | None = run.wire.get("traceparent")
        #: Set when the pass ended because this process is shutting down.
        self.requeue = False
        #: Jobs run in this process whose outcome was handed to this pass, not told to
        #: the run: if the pass ends without carrying on, the run must still be told.
        self.handed: list[str] = []
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        #: The wake-ups this pass armed for the run (a parked pass's are all it needs).
        self.armed: set[datetime] = set()
        #: ``always_replay`` (``RunPass``): outcomes taken; ``again``: next pass replays.
        self.recorded, self.again = 0, False
        self._init_writes(store, run, unwritten)

    def _init_writes(self, store: Store, run: RunRecord, unwritten: Sequence[StepRecord]) -> None:
        """The state of the pass's write path: what the run's journal holds and the room
        left in it, what the next write carries, and its writes in the background."""
        # The outcomes the run's journal holds, as far as this pass wrote them.
        self._journal: dict[str, StepRecord] = dict(run.journal)
        # Whether the store may write outcomes to their step records instead (then a
        # write may take the journal's entries along: :meth:`_with_journal`).
        self._may_carry = hasattr(store, "journals_outcomes")
        # What each outcome in the journal takes there, as the writes taken so far leave
        # it (kept within ``journal_room``).
        self._room = JournalRoom(run.journal)
        self._input_size = held_size(store, run.input)
        # What the next write carries: outcomes recorded since the last one, the keys
        # whose in-flight marks it clears, and journal keys copied to step records.
        self._pending: dict[str, StepRecord] = {}
        self._done: set[str] = set()
        self._forget: set[str] = set()
        self._carry_armed = False
        self._carrying: asyncio.Task[None] | None = None
        self._copying: asyncio.Task[None] | None = None
        self._uncopied = len(run.journal)  # outcomes journaled since the last copy
        self._fenced = False
        #: A write made in the background (carrying outcomes, copying the journal) that
        #: failed: none is made in the background until the pass's next write.
        self._broken: BaseException | None = None
        # Outcomes an earlier pass of this process recorded and could not write before
        # an outage ended it: this pass knows them, and its first write carries them.
        for step in unwritten:
            self.steps[step.key] = step
            self._pending[step.key] = step
            self._done.add(step.key)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id

    def unwritten(self) -> list[StepRecord]:
        """The outcomes recorded in this pass that no write has carried yet."""
        return list(self._pending.values())

    @property
    def workflow(self) -> str:
        """The run's workflow."""
        return self.run.workflow

    def key(self, name: str) -> str:
        """The step's key in this run: its name, with an ordinal when reached again by
        the same branch of the body (``engine_core.run.branches``)."""
        return self.checks.place_step(self.names, name)

    def finished(self, key: str) -> StepRecord | None:
        """The step's record if it has finished; raises its failure if it failed."""
        step = self.steps.get(key)
        if step is not None:
            if step.status == "succeeded":
                return step
            if step.status == "failed":
                raise stored_failure(step)
        if self.replay_only:
            raise ReplayEnd()
        return None

    # ---- the step boundary -------------------------------------------------------

    async def start(self, key: str, attempt: int) -> datetime:
        """Mark attempt ``attempt`` of ``key`` in flight (0: a step being armed), if the
        run may still start it, carrying the outcomes recorded since the last write;
        else end the pass (:class:`Stopped`). Returns when the attempt started."""
        if self.runtime.closing:
            # Shutting down: start nothing new; end the pass as if parked.
            self.requeue = True
            raise Parked()
        if self.checks.mismatch is not None:
            raise Diverged(self.checks.mismatch)  # a divergent pass starts nothing more
        self.names.refuse_late()  # a branch that outlived the body starts nothing
        carry = await self._take()
        order, group = self.checks.placing(key)
        started = self.clock.now()
        try:
            ok = await self.store.start_step(
                self.run.run_id,
                token=self.run.token,
                status=self.status,
                key=key,
                attempt=attempt,
                started_at=started,
                done=carry.done,
                outcomes=carry.outcomes,
                forget=carry.forget,
                order=order,
                group=group,
            )
        except BaseException:
            self._give_back(carry)
            raise
        await self._wrote(ok, carry)
        if self.values is not None:
            await self.values.landed()  # readable by the time the step starts
        return started

    def record(self, key: str, transition: Transition) -> StepRecord:
        """Record an outcome of a step this pass owns: it is durable by the next write."""
        record = self._applied(key, transition)
        self._keep(record)
        return record

    async def record_stored(self, key: str, transition: Transition) -> StepRecord:
        """:meth:`record` for an outcome the body is about to see: one too large for the
        run's journal is written to its step record now, so the body never goes on with
        a value the store could not keep. A refusal (``RecordTooLargeError``) records
        nothing; the caller fails the step with it."""
        record = self._applied(key, transition)
        if outcome_size(record) <= LARGE_OUTCOME:
            self._keep(record)
            return record
        self.recorded += 1
        if self._fenced:
            raise Stopped()
        await self.store.save_steps([record])
        self.steps[key] = record
        self._pending.pop(key, None)
        self._done.add(key)  # the next write clears its in-flight mark
        if key in self._journal:
            self._forget.add(key)
        await mirror_step(self.runtime.mirror, record)
        return record

    def _applied(self, key: str, transition: Transition) -> StepRecord:
        """The step's record with ``transition`` applied (the pass's copy unchanged)."""
        previous = self.steps.get(key)
        if previous is None:
            changes = transition.changes
            record = StepRecord(
                run_id=self.run.run_id, key=key, kind=changes["kind"], status=changes["status"]
            )
            self.checks.stamp(record)
        else:
            # A new record, so the journal's copy of the old one stays as it was written.
            record = object.__new__(StepRecord)
            record.__dict__.update(previous.__dict__)
            record.history = list(previous.history)
        transition.apply(record)
        return record

    def _keep(self, record: StepRecord) -> None:
        """Hold ``record`` for the next write."""
        self.recorded += 1
        key = record.key
        self.steps[key] = record
        self._pending[key] = record
        self._done.add(key)
        if not self._carry_armed:
            # If the body goes on to its next step now, that write carries the outcome;
            # if it awaits something else first, this writes it as soon as it yields
            # (or once the hold of ``holding_outcomes`` is over).
            self._carry_armed = True
            hold = OUTCOME_HOLD.get()
            loop = asyncio.get_running_loop()
            if hold:
                loop.call_later(hold, self._carry_soon)
            else:
                loop.call_soon(self._carry_soon)

    def adopt(self, step: StepRecord, *, handed: bool = False) -> None:
        """A step settled by a write of its own (a child run's end, or a job run here
        and ``handed`` to this pass instead of telling the run): take its record."""
        self.steps[step.key] = step
        self._done.add(step.key)
        self.recorded += 1
        if handed:
            self.handed.append(step.key)

    async def _take(
        self, *, wait: bool = True, beside: tuple[Any, ...] = (), carry: bool = True
    ) -> Carry:
        """What the next write carries (after the write of its own in flight, if any).
        The journal stays within its room (``beside``: what else the write puts in the
        run's record): the outcomes that would take it past, and any too large for it,
        go to their step records first (:meth:`JournalRoom.take`). Taken off the pass at
        once, so a record made meanwhile waits for the next write; given back if this
        fails. ``carry``: the write may take the journal's entries along
        (:meth:`_with_journal`)."""
        if wait and self._carrying is not None:
            await self._carrying
        if wait:
            self._broken = None  # this write, awaited, carries what a failed one gave back
        if self._fenced:
            raise Stopped()
        pending, done, forget = self._pending, frozenset(self._done), frozenset(self._forget)
        self._pending, self._done, self._forget = {}, set(), set()
        room = journal_room(self._input_size + (held_size(self.store, *beside) if beside else 0))
        taken: Taken | None = None
        try:
            taken = self._room.take(
                pending.values(), forget=forget, journal=self._journal, room=room
            )
            await self._move(taken.moved, new=pending)
        except BaseException:
            if taken is not None:  # a write taken meanwhile keeps its reservation
                self._room.undo(taken)
            self._give_back(Carry(list(pending.values()), done, forget))
            raise
        return self._carried(taken, done, forget, carry=carry)

    async def _move(self, moved: list[StepRecord], *, new: dict[str, StepRecord]) -> None:
        """Write ``moved`` to their step records (those ``new`` here to the mirror too)."""
        if moved:
            await self.store.save_steps(moved)
            for step in moved:
                if step.key in new:  # new here: the mirror has not seen it yet
                    await mirror_step(self.runtime.mirror, step)

    def _carried(
        self, taken: Taken, done: frozenset[str], forget: frozenset[str], *, carry: bool
    ) -> Carry:
        """The write's :class:`Carry`, once ``taken`` moved what it had to."""
        held = taken.before
        forget |= {s.key for s in taken.moved if s.key in self._journal or s.key in held}
        outcomes = taken.journaled
        if carry and self._may_carry and outcomes and self._journal:
            outcomes = self._with_journal(outcomes, forget)
        kept = {s.key for s in outcomes}
        # An outcome replaces its key's entry in the journal, or, written to its step
        # record instead (``journal.journals``), drops that entry, which would hide the
        # record from readers; also one a write given back (in ``held``) may have left.
        dropped = {k for k in kept if k in self._journal or k in held}
        return Carry(outcomes, done, (forget - kept) | dropped)

    def _with_journal(self, outcomes: list[StepRecord], forget: frozenset[str]) -> list[StepRecord]:
        """``outcomes``, and the journal's entries with them when the store would then
        write them all to their step records in the write's own command
        (``journal.journals``): the journal is emptied by a write made anyway, so the
        run's record stays small with no command of its own."""
        taken = {s.key for s in outcomes}
        carried = [s for k, s in self._journal.items() if k not in taken and k not in forget]
        if carried and not journals(self.store, outcomes + carried):
            return outcomes + carried
        return outcomes

    def _give_back(self, carry: Carry) -> None:
        """A write that was to carry these failed: the next one carries them (a record
        made since is newer and stays)."""
        for step in carry.outcomes:
            self._pending.setdefault(step.key, step)
        self._done |= carry.done
        self._forget |= carry.forget

    async def _wrote(self, ok: bool, carry: Carry) -> None:
        """After a write that carried ``carry``: note what the journal holds now, or,
        when the write was fenced out, make its outcomes land on their own and stop."""
        outcomes = carry.outcomes
        if not ok:
            self._fenced = True
            await self._save_fenced(outcomes)
            raise Stopped()
        for key in carry.forget:
            self._journal.pop(key, None)
        if not journals(self.store, outcomes):
            # In their step records already, with the journal's entries they took along.
            self._room.release(outcome.key for outcome in outcomes)
            for outcome in outcomes:
                await mirror_step(self.runtime.mirror, outcome)
            if not self._journal:
                self._uncopied = 0  # nothing left for a copy of its own to move
            return
        for outcome in outcomes:
            self._journal[outcome.key] = outcome
            await mirror_step(self.runtime.mirror, outcome)
        self._uncopied += len(outcomes)
        if self._uncopied >= FLUSH_AT and self._copying is None:
            self._uncopied = 0
            self._copying = asyncio.ensure_future(self._copy_journal())

    async def _save_fenced(self, outcomes: list[StepRecord]) -> None:
        """A write of this pass was fenced out. A step that ran records its outcome when
        the run was stopped (cancelled, suspended) under this pass's token; but once a
        newer pass holds the run, these outcomes were never durable and it has taken
        their steps back as new attempts: writing them now would record, late, an
        attempt it superseded."""
        if not outcomes:
            return
        latest = await self.store.get_run(self.run.run_id)
        if latest is not None and latest.token == self.run.token:
            await self.store.save_steps(outcomes)

    def _carry_soon(self) -> None:
        self._carry_armed = False
        if self._pending and self._carrying is None and not self._fenced and not self._broken:
            self._carrying = asyncio.ensure_future(self._carry())

    async def _carry(self) -> None:
        try:
            carry = await self._take(wait=False)
            try:
                ok = await self.store.record_steps(
                    self.run.run_id,
                    token=self.run.token,
                    status=self.status,
                    outcomes=carry.outcomes,
                    done=carry.done,
                    forget=carry.forget,
                )
            except BaseException:
                self._give_back(carry)
                raise
            await self._wrote(ok, carry)
        except Stopped:
            pass  # the next boundary sees ``_fenced``
        except Exception as exc:
            self._failed_in_background(exc)
        finally:
            self._carrying = None
            if self._pending and not self._carry_armed:
                self._carry_armed = True
                asyncio.get_running_loop().call_soon(self._carry_soon)

    async def _copy_journal(self) -> None:
        """Copy the journal to the step records, then drop what was copied from it with
        the next write: the run's record stays small however long the run."""
        try:
            snapshot = dict(self._journal)
            await self.store.save_steps(list(snapshot.values()))
            self._forget.update(k for k, s in snapshot.items() if self._journal.get(k) is s)
        except Exception as exc:
            self._failed_in_background(exc)
        finally:
            self._copying = None

    def _failed_in_background(self, exc: Exception) -> None:
        """A write nobody awaits failed (what it was to carry is given back, or still
        in the journal): the pass's next write, which it awaits, carries it again."""
        log.warning("run %s: a write of this pass failed: %s: %s", self.run_id,
                    type(exc).__name__, exc)  # fmt: skip
        if self._broken is None:
            self._broken = exc

    async def end_writes(self, *beside: Any) -> Carry:
        """Before the write that settles the pass (``beside``: what else it puts in the
        run's record): every outcome still to carry, with the ones that must not stay
        in the journal already in their step records. The settle clears every in-flight
        mark, so its carry has none to clear."""
        if self._copying is not None:
            await self._copying
        taken = await self._take(beside=beside, carry=False)
        outcomes, forget = taken.outcomes, taken.forget
        settled = {s.key for s in outcomes}
        moving = [s for s in outcomes if not self._journaled(s)]
        moving += [
            s for k, s in self._journal.items() if k not in settled and not self._journaled(s)
        ]
        if moving:
            await self.store.save_steps(moving)
            for step in moving:
                if step.key in settled:  # new here: the mirror has not seen it yet
                    await mirror_step(self.runtime.mirror, step)
            moved = {s.key for s in moving}
            outcomes = [s for s in outcomes if s.key not in moved]
            forget |= moved & self._journal.keys()
        return Carry(outcomes, forget=forget)

    def _journaled(self, step: StepRecord) -> bool:
        return kept_in_journal(step) and step.key not in self._records_due

    async def settled(self, ok: bool, carry: Carry) -> None:
        """After the settling write that carried what :meth:`end_writes` returned."""
        if not ok:
            self._fenced = True
            await self._save_fenced(carry.outcomes)
            return
        for key in carry.forget:
            self._journal.pop(key, None)
        for outcome in carry.outcomes:
            await mirror_step(self.runtime.mirror, outcome)

    # ---- steps beside each other, and parking ------------------------------------

    def arm_timer(self, due_at: datetime) -> None:
        """Have this process trigger the run when ``due_at`` comes (a sleep, an event's
        timeout, a long retry delay)."""
        self.armed.add(due_at)
        self.runtime.arm_timer(self.run_id, due_at)

    async def track(self, work: Awaitable[_T]) -> _T:
        """Await one step's work, counted as running (so the pass drains it before it
        settles); a step that parks parks the pass once its siblings have finished."""
        self._active += 1
        try:
            return await work
        except Parked:
            pass
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()
        await self.park()

    async def park(self) -> NoReturn:
        """End the pass here, once the steps running beside this one have finished: under
        ``asyncio.gather`` a sibling's failure must reach the body before the park does,
        or every replay would park in the same place and never see it."""
        await asyncio.sleep(0)  # siblings gathered with us get to start (and be counted)
        await self.drain()
        raise Parked()

    async def drain(self) -> None:
        """Wait for every step still running: steps started under ``asyncio.gather`` go
        on after a sibling ends the body, and must land before the pass lets go."""
        while self._active:
            self._idle.clear()
            await self._idle.wait()
        if self._carrying is not None:
            await asyncio.wait([self._carrying])
