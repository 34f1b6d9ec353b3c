"""Divergence: does the code replaying a run still meet the steps the run recorded?

Each step record keeps ``order`` (the order in which the run first started it) and
``ran`` (what it ran: an inline step's callable as ``module:qualname``, a dispatched
step's step function, a child's workflow, an event's name; nothing for a sleep). Both
ride the step's own first write, so checking costs no command.

A pass diverges when it reaches a recorded step of another kind or callable, reaches a
recorded step while a finished step recorded earlier has not been reached (two steps
swapped), or starts a step with no record while a finished step recorded earlier has not
been reached (a step removed, renamed or moved). An order that no record holds below a
recorded one is a step whose outcome was lost with its write (a job inserted before the
write that carried the outcome of the step before it, say): a new step may take it
without diverging, as that step running again would. Records written before this check (no
order, no callable) are checked only where they say enough: their kind, and that they
are reached before anything new starts.

Steps started together compare as a set: under ``asyncio.gather`` a replay returns
recorded results without yielding, so one branch may run ahead of where it stood on the
first pass. An apparent swap is judged only once the other branches have caught up (the
loop is yielded to while they still reach steps); until then nothing is written.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import FunctionType
from typing import Any, NoReturn

from engine_core.common.clock import real_seconds
from engine_core.common.values import check_name
from engine_core.errors import NonDeterminismError
from engine_core.records import StepRecord
from engine_core.run.branch_order import BranchOrder, BranchView
from engine_core.run.branches import Ambiguous, Call, StepNames

#: The kinds of step a workflow body reaches (compensations, patch markers and replies
#: are not reached by the body as steps, so they take no part in the order).
BODY_KINDS = frozenset({"inline", "dispatch", "sleep", "event", "update", "child"})
_ENDED = ("succeeded", "failed")
#: How an apparent swap waits for the other branches: turns of the loop first, then
#: short naps (a branch may await something else than a step), for as long as some
#: branch reaches a step within ``_IDLE_S`` seconds, and never longer than ``_MAX_S``.
_TURNS = 4
_IDLE_S = 0.1
_MAX_S = 2.0


#: Names of the callables met so far, by code object (shared by every closure of one
#: ``def``, so this stays as small as the program), with the qualified name and module
#: they were found for: functions made by one decorator share a code object too.
_NAMES: dict[Any, tuple[Any, Any, str]] = {}


#: The same for the functions themselves (one lookup for the usual step: a function
#: defined once); bounded, as a body may make a new closure at every call.
_BY_FUNCTION: dict[Any, str] = {}
_BY_FUNCTION_MAX = 4096


def callable_name(fn: Callable[..., Any]) -> str:
    """What an inline step ran, as it is recorded: ``module:qualified.name``."""
    try:
        known_fn = _BY_FUNCTION.get(fn)
    except TypeError:  # an unhashable callable object
        return _callable_name(fn)
    if known_fn is not None:
        return known_fn
    found = _callable_name(fn)
    if type(fn) is FunctionType:
        if len(_BY_FUNCTION) >= _BY_FUNCTION_MAX:
            _BY_FUNCTION.clear()
        _BY_FUNCTION[fn] = found
    return found


def _callable_name(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if code is not None:
        known = _NAMES.get(code)
        if known is not None and known[0] is qualname and known[1] is module:
            return known[2]
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    target = getattr(target, "__func__", target)
    found = (
        f"{getattr(target, '__module__', None) or type(target).__module__}:"
        f"{getattr(target, '__qualname__', None) or type(target).__qualname__}"
    )
    if code is not None:
        _NAMES[code] = (qualname, module, found)
    return found


def _made(made_after: str | None) -> str:
    """Where a branch was made, as an error tells it."""
    if made_after is None:
        return "by no one (the body itself)"
    return f"after {made_after.replace('/', ', then ')} step(s) of its makers"


def describe(kind: str, ran: str | None) -> str:
    """A step's kind and callable, as an error shows them."""
    return kind if ran is None else f"{kind} {ran}"


@dataclass(frozen=True)
class Mismatch:
    """Where the code and the record part ways."""

    step: str
    recorded: str
    found: str
    reason: str

    def error(self) -> NonDeterminismError:
        """The error the divergent pass suspends the run with."""
        return NonDeterminismError(
            f"step {self.step!r}: {self.reason}: recorded {self.recorded}, the code {self.found}",
            step=self.step,
            recorded=self.recorded,
            found=self.found,
            reason=self.reason,
        )

    def error_info(self) -> dict[str, Any]:
        """How the run records it (``error`` of the suspended run)."""
        exc = self.error()
        return {
            "type": "NonDeterminismError",
            "message": str(exc),
            "step": self.step,
            "recorded": self.recorded,
            "found": self.found,
            "reason": self.reason,
        }


class Diverged(BaseException):
    """The pass diverged: raised through the body, which must not catch it."""

    def __init__(self, mismatch: Mismatch) -> None:
        super().__init__(mismatch.step)
        self.mismatch = mismatch


class ReplayChecks:
    """What one pass (or one dry replay) has reached of the run's recorded steps."""

    def __init__(
        self,
        steps: dict[str, StepRecord],
        *,
        enabled: bool = True,
        branches: BranchView | None = None,
    ) -> None:
        self._steps = steps
        self.enabled = enabled
        #: On a run keyed by branch: the order is judged branch by branch, at once.
        self._by_branch = (
            BranchOrder((s for s in steps.values() if s.kind in BODY_KINDS), branches)
            if branches is not None
            else None
        )
        #: Set once the pass diverged: it starts nothing more.
        self.mismatch: Mismatch | None = None
        self._reached: set[str] = set()
        self._count = 0
        self._scan(steps)
        # The highest order this pass reached so far.
        self._high = -1
        #: Steps first started by this pass: their order and callable, for their record.
        self._new: dict[str, tuple[int, str | None]] = {}
        #: The batch of the root's each step this pass reached runs under (see
        #: ``engine_core.run.branches``), for the record of the new ones.
        self._groups: dict[str, int | None] = {}
        #: Steps reached by adopted tasks in this pass (see ``note_place``).
        self._loose: set[str] = set()
        #: Where the branch that reached each step was made (see ``note_place``).
        self._made_after: dict[str, str] = {}
        #: ``ctx.patched`` answers given in this pass.
        self.patches: dict[str, bool] = {}

    def _scan(self, steps: dict[str, StepRecord]) -> None:
        """What the pass begins with: the recorded steps of the body, finished or
        waiting, their orders and the orders no record holds."""
        # Finished steps of the body not reached yet (with an order or not), and those
        # with an order, by order.
        self._unreached: set[str] = set()
        # Recorded steps not finished (waiting), not reached yet: a step started before
        # one of them shares its order (the two compare as a set), since the code may
        # well add a step before a wait that has not ended.
        self._open: set[str] = set()
        ordered: list[tuple[int, str]] = []
        top = -1
        for key, step in steps.items():
            if step.kind not in BODY_KINDS:
                continue
            if step.order is not None:
                top = max(top, step.order)
            if step.status in _ENDED:
                self._unreached.add(key)
                if step.order is not None:
                    ordered.append((step.order, key))
            elif step.order is not None:
                self._open.add(key)
        ordered.sort()
        held = {s.order for s in steps.values() if s.kind in BODY_KINDS}
        #: Orders below the top that no record holds: steps whose outcome was lost.
        self._vacant = [o for o in range(top + 1) if o not in held]
        #: The recorded steps of the body as the pass began.
        self._initial = [k for k, s in steps.items() if s.kind in BODY_KINDS]
        self._ordered = ordered
        self._at = 0
        self._next = top + 1

    # ---- what a pass asks --------------------------------------------------------

    def reach(self, key: str, kind: str, ran: str | None) -> Coroutine[Any, Any, None] | None:
        """The body reaches step ``key`` (of ``kind``, running ``ran``). Raises
        :class:`Diverged` when that parts from the record; returns a check to await
        when it may (an apparent swap, judged once other branches caught up), else
        None: the common case costs no coroutine."""
        if self.mismatch is not None:
            raise Diverged(self.mismatch)
        self._count += 1
        recorded = self._steps.get(key)
        if recorded is None:
            return self._reach_new(key, kind, ran)
        self._reached.add(key)
        if self._by_branch is not None:
            self._by_branch.reached(key)
        self._unreached.discard(key)
        self._open.discard(key)
        if recorded.order is not None and recorded.order > self._high:
            self._high = recorded.order
        if not self.enabled:
            return None
        self._check_what_ran(key, recorded, kind, ran)
        if recorded.order is None:
            return None
        if self._by_branch is None:
            if self._earlier_unreached(recorded.order):
                return self._judge_swap(key, kind, ran, recorded.order)
            return None
        self._check_place(key, recorded)
        if not (recorded.loose or key in self._loose):  # an adopted task's: no set order
            if (missed := self._by_branch.swapped(key, recorded.order)) is not None:
                self._diverge(missed, describe(kind, ran), key, "swapped")
        return None

    def _reach_new(self, key: str, kind: str, ran: str | None) -> Coroutine[Any, Any, None] | None:
        """:meth:`reach` for a step with no record: its order, and whether the record
        says something else should have come first."""
        if self._vacant and self._unreached and (vacant := self._fill_vacancy()) is not None:
            self._high = max(self._high, vacant)
            self._new[key] = (vacant, ran)
            return None
        if self._open:
            # Started before a recorded wait that has not ended (the code may add a
            # step there): no later than it, and no earlier than what this pass
            # reached before it; equal orders compare as a set.
            first_open = min(self._order(k) for k in self._open)
            order = max(self._high, first_open)
        else:
            order = self._next
            self._next += 1
        self._high = max(self._high, order)
        self._new[key] = (order, ran)
        if not self._unreached or not self.enabled:
            return None
        if self._by_branch is None:
            return self._judge_new(key, kind, ran)
        if key not in self._loose:  # an adopted task's: in no set order
            if (missed := self._by_branch.skipped(key)) is not None:
                self._diverge(missed, describe(kind, ran), key, "new")
        return None

    def _check_what_ran(self, key: str, recorded: StepRecord, kind: str, ran: str | None) -> None:
        """A recorded step reached as another kind, or running another callable."""
        if recorded.kind != kind or (
            recorded.ran is not None and ran is not None and recorded.ran != ran
        ):
            what = "kind" if recorded.kind != kind else "callable"
            self._fail(
                Mismatch(
                    key,
                    describe(recorded.kind, recorded.ran),
                    f"reached it as {describe(kind, ran)}",
                    f"the step ran another {what} when it was recorded",
                )
            )

    def _check_place(self, key: str, recorded: StepRecord) -> None:
        """A recorded step reached in a branch made at another place of the body."""
        made_after = self._made_after.get(key)
        if recorded.made_after != made_after:
            self._fail(
                Mismatch(
                    key,
                    f"in a branch made {_made(recorded.made_after)}",
                    f"reached it in a branch made {_made(made_after)}",
                    "the step runs at another place of the body: it was moved "
                    "before or after a step of the branch that makes its task",
                )
            )

    async def _judge_new(self, key: str, kind: str, ran: str | None) -> None:
        await self._wait_for_branches(lambda: bool(self._unreached))
        if self._unreached:
            self._diverge(self._first_unreached(), describe(kind, ran), key, "new")

    async def _judge_swap(self, key: str, kind: str, ran: str | None, order: int) -> None:
        await self._wait_for_branches(lambda: self._earlier_unreached(order))
        if self._earlier_unreached(order):
            self._diverge(self._ordered[self._at][1], describe(kind, ran), key, "swapped")

    async def behind(self) -> bool:
        """Whether recorded steps of the body remain that this pass has not reached
        (the run passed this point on older code), once other branches caught up."""
        if self._by_branch is not None:
            return self._by_branch.behind()
        if not self._has_unreached():
            return False
        await self._wait_for_branches(self._has_unreached)
        return self._has_unreached()

    async def settle(self) -> None:
        """Let branches of the body still replaying beside one that ended catch up (a
        few turns of the loop, while they still reach steps)."""
        idle = 0
        while idle < 2:
            before = self._count
            await asyncio.sleep(0)
            idle = idle + 1 if self._count == before else 0

    def place_step(self, names: StepNames, name: str) -> str:
        """The key of step ``name`` reached here, its place noted (see
        :meth:`note_place`); calls the engine cannot tell apart suspend the run."""
        check_name(name, "step name")
        try:
            call = names.key(name)
        except Ambiguous as exc:
            self.cannot_tell_apart(exc.key, name)
        self.note_place(call)
        return call.key

    def note_place(self, call: Call) -> None:
        """Step ``call.key`` is reached where ``call`` says: under the root's batch
        ``group``, in a branch made at ``made_after``; ``loose``: by a task adopted by
        its branch (its order among the branch's calls is not judged)."""
        key = call.key
        if call.group is not None:
            self._groups[key] = call.group
        if call.loose:
            self._loose.add(key)
        if call.made_after is not None:
            self._made_after[key] = call.made_after

    def stamp(self, step: StepRecord) -> StepRecord:
        """Give a step this pass started first its order, callable and batch (on its
        first record, so they ride the step's own write)."""
        identity = self._new.get(step.key)
        if identity is not None and step.order is None:
            step.order, step.ran = identity
            step.group = self._groups.get(step.key)
            step.loose = step.key in self._loose
            step.made_after = self._made_after.get(step.key)
        return step

    def identity(self, key: str) -> dict[str, Any]:
        """The ``order``, ``ran`` and ``group`` fields of a new record of step ``key``."""
        order, ran = self._new.get(key, (None, None))
        return {
            "order": order,
            "ran": ran,
            "group": self._groups.get(key),
            "loose": key in self._loose,
            "made_after": self._made_after.get(key),
        }

    def placing(self, key: str) -> tuple[int | None, int | None]:
        """The order and batch of a step this pass starts first (None, None for one
        recorded before): its in-flight mark holds them until its record does."""
        new = self._new.get(key)
        if new is None:
            return None, None
        return new[0], self._groups.get(key)

    def cannot_tell_apart(self, key: str, name: str) -> NoReturn:
        """Calls of step ``name`` came from tasks the engine cannot tell apart: which
        recorded result belongs to which is unknown, so the pass diverges."""
        self._fail(
            Mismatch(
                key,
                "one call of this name per task, or tasks the engine names",
                "called it from a task made outside the engine's task factory, beside "
                "another task calling it",
                f"the engine cannot tell these calls of step {name!r} apart: give the "
                "calls distinct names (for example with the index of each branch)",
            )
        )

    # ---- helpers -----------------------------------------------------------------

    def _order(self, key: str) -> int:
        order = self._steps[key].order
        return -1 if order is None else order

    def _has_unreached(self) -> bool:
        return any(k not in self._reached for k in self._initial)

    def _earlier_unreached(self, order: int) -> bool:
        ordered, reached = self._ordered, self._reached
        while self._at < len(ordered) and ordered[self._at][1] in reached:
            self._at += 1
        return self._at < len(ordered) and ordered[self._at][0] < order

    def _fill_vacancy(self) -> int | None:
        """A vacant order below every finished step not reached yet, taken; None when
        there is none (or an unreached step has no order to compare)."""
        if any(self._steps[k].order is None for k in self._unreached):
            return None
        self._earlier_unreached(self._next)  # moves past what was reached
        first = self._ordered[self._at][0] if self._at < len(self._ordered) else self._next
        if self._vacant[0] < first:
            return self._vacant.pop(0)
        return None

    def _first_unreached(self) -> str:
        if self._earlier_unreached(self._next):
            return self._ordered[self._at][1]
        return min(self._unreached)

    async def _wait_for_branches(self, still: Callable[[], bool]) -> None:
        """Yield to the loop while other branches of the body still reach steps."""
        began = last = real_seconds()
        turns = 0
        while still():
            now = real_seconds()
            if now - last > _IDLE_S or now - began > _MAX_S:
                return
            before = self._count
            turns += 1
            await asyncio.sleep(0 if turns <= _TURNS else 0.005)
            if self.mismatch is not None:
                raise Diverged(self.mismatch)
            if self._count != before:
                last, turns = real_seconds(), 0

    def _diverge(self, missed: str, found: str, key: str, how: str) -> NoReturn:
        step = self._steps[missed]
        if how == "new":
            reason = "a recorded step was not reached before a new one started"
            did = f"started new step {key!r} ({found})"
        else:
            reason = "a recorded step was reached before one recorded earlier"
            did = f"reached step {key!r} ({found}) first"
        self._fail(Mismatch(missed, describe(step.kind, step.ran), did, reason))

    def _fail(self, mismatch: Mismatch) -> NoReturn:
        self.mismatch = mismatch
        raise Diverged(mismatch)
