"""The order of a run's recorded steps, branch by branch of the body: how divergence is
judged on runs keyed by branch (key scheme 3, ``engine_core.run.branches``).

Within one branch the order in which steps are first started is the body's own: the
branch's calls follow each other, and a task that is one call starts in the order it
was created. Across branches running side by side it is not (a branch may await
something else first, and a replay returns recorded results without waiting), so they
are never judged against each other. A branch is judged against its own record and
against the branches it made, where those can no longer catch up: ones it has not made
yet (the record says it made them earlier), or ones that ended.

- a recorded step reached while a finished step recorded before it has not been
  reached, in the same branch or in such a branch below it: two steps swapped;
- a new step started while a finished step of its branch, or of such a branch below it,
  has not been reached: a step removed, renamed or moved.

Each judgement is immediate: it does not wait for other branches to catch up, so no
timing can make it err.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from engine_core.records import StepRecord
from engine_core.run.keys import key_branch


class BranchView(Protocol):
    """What the pass knows of the branches of the body (``StepNames``)."""

    def current(self) -> str: ...

    def state(self, path: str) -> str: ...


class BranchOrder:
    """The finished recorded steps of the body not reached yet, by branch, in order."""

    def __init__(self, steps: Iterable[StepRecord], branches: BranchView) -> None:
        self._branches = branches
        self._line: dict[str, list[tuple[int, str]]] = {}  # finished, by order
        self._at: dict[str, int] = {}
        self._recorded: dict[str, set[str]] = {}  # every recorded step of the body
        # Finished steps recorded before orders were kept: they say only that they came
        # before anything new of their branch.
        self._unordered: dict[str, set[str]] = {}
        self._reached: set[str] = set()
        # An adopted task's steps (``loose``): in no set order among themselves, but
        # before the branch's own calls recorded after them (the branch awaits what it
        # adopted, as an agent's run awaits its tool calls before its next request).
        self._loose: dict[str, list[tuple[int, str]]] = {}
        for step in steps:
            if step.loose:
                if step.order is not None and step.status in ("succeeded", "failed"):
                    self._loose.setdefault(key_branch(step.key), []).append((step.order, step.key))
                continue
            path = key_branch(step.key)
            self._recorded.setdefault(path, set()).add(step.key)
            if step.status in ("succeeded", "failed"):
                if step.order is None:
                    self._unordered.setdefault(path, set()).add(step.key)
                else:
                    self._line.setdefault(path, []).append((step.order, step.key))
        for line in self._line.values():
            line.sort()

    def reached(self, key: str) -> None:
        self._reached.add(key)

    def _first_unreached(self, path: str) -> tuple[int, str] | None:
        line = self._line.get(path)
        if not line:
            return None
        at = self._at.get(path, 0)
        while at < len(line) and line[at][1] in self._reached:
            at += 1
        self._at[path] = at
        return line[at] if at < len(line) else None

    def swapped(self, key: str, order: int) -> str | None:
        """For a recorded step ``key`` reached now: a finished step recorded before it
        and not reached, of its own branch (or an adopted task of it) or of a branch its
        branch made (or should have made by now: one not made yet, or ended)."""
        path = key_branch(key)
        first = self._first_unreached(path)
        if first is not None and first[0] < order:
            return first[1]
        return self._loose_behind(path, order) or self._left_behind(path, order)

    def _loose_behind(self, path: str, before: int | None) -> str | None:
        for order, key in self._loose.get(path, ()):
            if (before is None or order < before) and key not in self._reached:
                return key
        return None

    def skipped(self, key: str) -> str | None:
        """For a new step ``key``: a finished step not reached, of its own branch or of
        a branch its branch made (or should have made by now) that is not running."""
        path = key_branch(key)
        first = self._first_unreached(path)
        if first is not None:
            return first[1]
        old = sorted(self._unordered.get(path, set()) - self._reached)
        if old:
            return old[0]
        return self._loose_behind(path, None) or self._left_behind(path, None)

    def _left_behind(self, path: str, before: int | None) -> str | None:
        """A finished step not reached (recorded before ``before``, if given) of a branch
        below ``path`` that cannot reach it any more in this order: not made yet, or
        ended. (One still running may yet: branches are not judged against each
        other.)"""
        prefix = f"{path}." if path else ""
        for other in self._line.keys() | self._unordered.keys():
            if not other or other == path or not other.startswith(prefix):
                continue
            if self._branches.state(other) == "running":
                continue
            first = self._first_unreached(other)
            if first is not None and (before is None or first[0] < before):
                return first[1]
            old = sorted(self._unordered.get(other, set()) - self._reached)
            if before is None and old:
                return old[0]
        return None

    def behind(self) -> bool:
        """Whether recorded steps come after the running branch's current point: steps
        of its own not reached yet, or of branches it has not created yet."""
        path = self._branches.current()
        prefix = f"{path}." if path else ""
        for other, keys in self._recorded.items():
            mine = other == path
            later = other.startswith(prefix) and self._branches.state(other) == "unmade"
            if (mine or (other and later)) and not keys <= self._reached:
                return True
        return False
