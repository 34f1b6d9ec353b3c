"""``ctx.patched``: one workflow body that serves runs begun on older code and new ones.

A run that reaches ``await ctx.patched(id)`` with every recorded step of its body already
reached stands where new code and old part ways for the first time: it takes the new
branch, and a marker (a record of kind ``patch``) says so on every later replay. The
marker rides the pass's next write, like a step's outcome, so it costs no command. A run
whose records go on past this point passed it on old code: it takes the old branch and
records nothing. ``ctx.deprecate_patch(id)`` records nothing and accepts both.
"""

from __future__ import annotations

from engine_core.common.values import check_name
from engine_core.records import PATCH_PREFIX, StepRecord, utcnow
from engine_core.run.pass_state import PassState
from engine_core.run.transitions import Transition


def check_patch_id(patch_id: object) -> str:
    """A patch id is a non-empty string (else ``InvalidNameError``, a ``ValueError``)."""
    return check_name(patch_id, "patch id")


def patch_key(patch_id: str) -> str:
    """The key of the marker that patch ``patch_id`` leaves on a run."""
    return PATCH_PREFIX + patch_id


def has_marker(steps: dict[str, StepRecord], patch_id: str) -> bool:
    """Whether the run holds patch ``patch_id``'s marker."""
    marker = steps.get(patch_key(patch_id))
    return marker is not None and marker.kind == "patch"


async def patched(p: PassState, patch_id: object) -> bool:
    """True on a run that reaches this point on new code (recording the marker) or holds
    the marker; False on a run whose records show it passed this point on old code."""
    pid = check_patch_id(patch_id)
    known = p.checks.patches.get(pid)
    if known is not None:
        return known
    if has_marker(p.steps, pid):
        answer = True
    elif p.replay_only or await p.checks.behind():
        answer = False
    else:
        now = utcnow()
        changes = {
            "kind": "patch",
            "status": "succeeded",
            "attempts": 1,
            "updated_at": now,
            "ended_at": now,
        }
        p.record(patch_key(pid), Transition(changes=changes))
        answer = True
    p.checks.patches[pid] = answer
    return answer
