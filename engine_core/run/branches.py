"""Which branch of a workflow body makes a call, so that a step's key never depends on
timing.

A body may run parts of itself at once (``asyncio.gather``, ``TaskGroup``,
``create_task``). Each task the body creates is a *branch* of it, named by its place in
the tree of tasks: the body itself is the root, and the tasks a branch creates are
numbered in the order it creates them (``0``, ``1``, then ``1.0`` for the first task
``1`` creates...). That order is the body's own, the same on every pass; the order in
which branches then reach their steps is not (one may await a slow call first), so
ordinals are counted per branch:

- the root's steps keep their plain keys: ``name``, ``name#1``...;
- a task whose whole coroutine is one call on the context (``gather(ctx.step("a", f),
  ctx.step("b", g))``) counts with the branch that created it: it makes its call the
  first time it runs, before it can yield, and tasks first run in the order they were
  created, so these calls arrive in the same order on every pass;
- any other branch counts on its own, and its keys name it: ``name@1``, ``name@1#1``.

Branches are named as they are created, by a task factory put on the running loop
(chained to the factory already there). A task that escapes it (made by a callback, or
by a factory set while a pass runs) cannot be named: its calls count with the branch it
came from, and if such a task and another task reach steps of the same name in one
pass, the engine cannot tell the calls apart: the pass diverges, asking for distinct
names (:class:`Ambiguous`).

Code that creates tasks in numbers that depend on timing (a library's helper tasks,
such as pydantic-ai's waiters around parallel tool calls) runs under
:func:`adopting_tasks`: the tasks it creates take no place among the branch's, so the
branches created after it keep their names, and their calls count with the branch itself,
as one direct call's do. Their names must tell their calls apart.

The tasks a branch creates together (none of its earlier ones still running, no call of
its own in between) form a *batch*. A step records the batch of the root's that it runs
under (``StepRecord.group``): a fork from a step runs its whole batch again, since its
members started together (see ``engine_core.run.fork``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, cast

from engine_core.run.keys import step_key

#: The branch of the body the current task runs (set in each task the factory names).
_BRANCH: contextvars.ContextVar[Branch | None] = contextvars.ContextVar(
    "engine_core_branch", default=None
)
#: Set while the running code's new tasks are adopted (see :func:`adopting_tasks`).
_ADOPTING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "engine_core_adopting", default=False
)
#: The code object of the coroutines that calls on the context run as (see
#: ``engine_core.run.context``): a task running one of them is a "direct" call.
_CALL_CODES: set[Any] = set()


def mark_call(method: Callable[..., Coroutine[Any, Any, Any]]) -> None:
    """Note that coroutines of ``method`` are calls on the context."""
    _CALL_CODES.add(method.__code__)


class Ambiguous(Exception):
    """A task the engine could not name and another task reached steps of one name."""

    def __init__(self, name: str, seen: int) -> None:
        super().__init__(name)
        self.name = name
        self.seen = seen
        #: The key the call was given (set by :class:`StepNames`).
        self.key = ""


class Branch:
    """One task of a workflow body (or the body itself), and the ordinals its calls
    take."""

    __slots__ = (
        "_batch",
        "_batch_live",
        "_busy",
        "_called",
        "_counts",
        "_first",
        "_own_calls",
        "_shared",
        "_spawned",
        "_unnamed",
        "closed",
        "group",
        "made",
        "made_after",
        "names",
        "path",
        "root",
        "task",
        "tasks",
        "unordered",
    )

    def __init__(
        self,
        path: str,
        *,
        group: int | None,
        root: Branch | None = None,
        names: Branch | None = None,
    ) -> None:
        self.path = path
        #: The body's own branch, whose pass this belongs to.
        self.root: Branch = root if root is not None else self
        #: The task it runs in (None until known: the factory learns it once made).
        self.task: asyncio.Task[Any] | None = None
        #: The batch of the root's this branch runs under (None: the root itself).
        self.group = group
        #: The branch whose ordinals its calls take (itself, or its creator's when it
        #: is one direct call).
        self.names: Branch = names if names is not None else self
        self.closed = False
        #: Made under :func:`adopting_tasks`: its calls arrive in no set order.
        self.unordered = False
        #: The root's: every branch of the body that counts its own ordinals, by path.
        self.made: dict[str, Branch] = {}
        self._busy = 0
        self._spawned = 0
        self._batch = 0
        self._batch_live = 0
        self._called = False  # a call of its own since its batch began
        self._own_calls = 0  # steps its own task reached so far
        #: Where it was made (``StepRecord.made_after``): None for the body itself.
        self.made_after: str | None = None
        self._counts: dict[str, int] = {}
        # The first task that reached each name, the names another task reached too,
        # and the names a task the factory did not name reached.
        self._first: dict[str, asyncio.Task[Any] | None] = {}
        self._shared: set[str] = set()
        self._unnamed: set[str] = set()
        #: In the root: the branch of each running task the factory named. A task's
        #: context may come to hold another task's branch: code may copy context
        #: variables from task to task (pydantic-ai copies those of the task running its
        #: ``wrap_run`` hooks into the task running the agent).
        self.tasks: dict[asyncio.Task[Any], Branch] = {}

    # ---- creating tasks ----------------------------------------------------------

    def creates_here(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether a task created now, by ``task``, is this branch's own: the body's
        code created it (not the engine, during one of the branch's calls)."""
        return not self.root.closed and not self._busy and task is not None and task is self.task

    def child(self, direct: bool) -> tuple[Branch, Callable[[object], None]]:
        """The branch of the next task this one creates (``direct``: a call on the
        context), and what to call when that task is done."""
        if not self._batch_live or self._called:
            # A new batch: nothing of the last one still runs, or a call came between.
            self._batch += 1
            self._batch_live = 0
            self._called = False
        self._batch_live += 1
        batch = self._batch
        index = self._spawned
        self._spawned += 1
        path = f"{self.path}.{index}" if self.path else str(index)
        group = self.group if self.group is not None else batch
        made = Branch(path, group=group, root=self.root, names=self.names if direct else None)
        here_now = str(self._own_calls)
        made.made_after = here_now if self.made_after is None else f"{self.made_after}/{here_now}"
        if not direct:
            self.root.made[path] = made

        def done(_: object) -> None:
            if self._batch == batch:
                self._batch_live -= 1

        return made, done

    def adopted(self) -> Branch:
        """The branch of a task this one creates under :func:`adopting_tasks`: not
        numbered among its own, its calls counting with this branch."""
        made = Branch(self.path, group=self.group, root=self.root, names=self.names)
        made.unordered = True
        made.made_after = self.made_after
        return made

    # ---- calls ---------------------------------------------------------------------

    def end_call(self) -> None:
        """The call :meth:`StepNames.begin_call` began has ended."""
        self._busy -= 1

    def ordinal(self, name: str, task: asyncio.Task[Any] | None, named: bool) -> int:
        """The ordinal of this call of ``name`` among this branch's, and whether an
        unnamed task's call and another task's share the name (then nobody can tell
        which is which on the next pass)."""
        seen = self._counts.get(name, 0)
        self._counts[name] = seen + 1
        first = self._first.setdefault(name, task)
        if first is not task:
            self._shared.add(name)
        if not named:
            self._unnamed.add(name)
        if name in self._shared and name in self._unnamed:
            raise Ambiguous(name, seen)
        return seen


def _running(task: asyncio.Task[Any] | None) -> Branch | None:
    """The branch the running code belongs to: its task's own, else the one its context
    holds (a task the factory did not name inherits its creator's)."""
    branch = _BRANCH.get()
    if branch is None or task is None or branch.task is task or branch.task is None:
        return branch
    root = branch.root
    if root.task is task:
        return root
    return root.tasks.get(task, branch)


def here(root: Branch) -> tuple[Branch, asyncio.Task[Any] | None, bool]:
    """The branch of ``root``'s tree the running task belongs to, the task, and whether
    the task is that branch's own (False: it escaped the factory and only inherited
    the branch it came from)."""
    task = asyncio.current_task()
    branch = _running(task)
    if branch is None or branch.root is not root:
        return root, task, task is root.task
    if branch.task is None:
        branch.task = task  # made by an eager factory: it runs before it is known
    return branch, task, branch.task is task


def branch_path() -> str:
    """The path of the branch whose ordinals the running task's calls take ("" for the
    body itself, and outside a body): the same on every pass."""
    branch = _running(asyncio.current_task())
    return "" if branch is None else branch.names.path


@contextmanager
def adopting_tasks() -> Iterator[None]:
    """Around code that creates tasks in numbers that may differ from pass to pass but
    whose calls on the context have names that tell them apart: the tasks it creates
    (and theirs) are not numbered among the running branch's, and their calls take their
    ordinals and their key's branch from it. (Outside a workflow body: no effect.)"""
    token = _ADOPTING.set(True)
    try:
        yield
    finally:
        _ADOPTING.reset(token)


class Call(NamedTuple):
    """A call of a step as a pass keys it, and where the body makes it."""

    key: str
    #: The batch of the root's it runs under (``StepRecord.group``).
    group: int | None = None
    #: Made by a task adopted by its branch: in no set order among the branch's calls.
    loose: bool = False
    #: Where its branch was made (``StepRecord.made_after``).
    made_after: str | None = None


class StepNames:
    """The keys of the steps one pass (or one dry replay) reaches, by branch."""

    def __init__(self, scheme: int) -> None:
        self.scheme = scheme
        self.root = Branch("", group=None)
        self._plain: dict[str, int] = {}  # ordinals of runs keyed before branches

    @contextmanager
    def body(self) -> Iterator[None]:
        """Around the body's run: the running task is its root branch, and the tasks it
        creates are named."""
        root = self.root
        root.task = asyncio.current_task()
        install(asyncio.get_running_loop())
        token = _BRANCH.set(root)
        try:
            yield
        finally:
            root.closed = True
            _BRANCH.reset(token)

    def key(self, name: str) -> Call:
        """The key of this call of step ``name``, and where it is made."""
        if self.scheme < 3:
            seen = self._plain.get(name, 0)
            self._plain[name] = seen + 1
            return Call(step_key(name, seen, self.scheme))
        branch, task, named = here(self.root)
        # Only steps count where a branch is made: a call that records nothing (a patch
        # check, a stream write) may come and go between deploys.
        if named:
            branch._own_calls += 1
        names = branch.names
        try:
            n = names.ordinal(name, task, named)
        except Ambiguous as exc:
            exc.key = step_key(name, exc.seen, self.scheme, names.path)
            raise
        return Call(
            step_key(name, n, self.scheme, names.path),
            group=branch.group,
            loose=branch.unordered,
            made_after=branch.made_after,
        )

    def by_branch(self) -> StepNames | None:
        """Itself, when the run's keys count by branch (scheme 3): divergence is then
        judged branch by branch (``engine_core.run.branch_order``)."""
        return self if self.scheme >= 3 else None

    def current(self) -> str:
        """The path of the branch whose ordinals the running task's calls take."""
        return here(self.root)[0].names.path

    def state(self, path: str) -> str:
        """Where branch ``path`` of the body stands in this pass: "unmade" (not created
        yet), "running" or "done"."""
        branch = self.root.made.get(path) if path else self.root
        if branch is None:
            return "unmade"
        task = branch.task
        return "done" if task is not None and task.done() else "running"

    def refuse_late(self) -> None:
        """Cancel the running task if it is a branch of the body still running after
        the body ended (a sibling of a branch that parked, say): its pass is settling,
        or settled, and must start nothing more. The pass's own task goes on (it
        compensates after the body, for one)."""
        if not self.root.closed:
            return
        branch = _running(asyncio.current_task())
        if branch is not None and branch.root is self.root:
            if asyncio.current_task() is not self.root.task:
                raise asyncio.CancelledError("the pass of this branch of the body is over")

    def begin_call(self) -> Branch | None:
        """A call on the context begins: until :meth:`Branch.end_call`, the tasks the
        running task makes are not the body's (the engine's, or a step's), and the
        branch's next task opens a new batch. Returns the branch to end the call on
        (None: a task the factory did not name). Refused to a branch still running
        once the body ended (:meth:`refuse_late`)."""
        self.refuse_late()
        branch, _, named = here(self.root)
        if not named:
            return None
        branch._busy += 1
        branch._called = True
        return branch


# ---- the task factory ------------------------------------------------------------


class _Factory:
    """Names the tasks a body's branch creates, then makes them as ``inner`` would."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(
        self, loop: asyncio.AbstractEventLoop, coro: Any, **options: Any
    ) -> asyncio.Future[Any]:
        creator = asyncio.current_task(loop)
        branch = _running(creator)
        if branch is None or not branch.creates_here(creator):
            return self._make(loop, coro, options)
        done: Callable[[object], None] | None = None
        if _ADOPTING.get():
            child = branch.adopted()
        else:
            child, done = branch.child(getattr(coro, "cr_code", None) in _CALL_CODES)
        given = options.get("context")
        context = given.copy() if given is not None else contextvars.copy_context()
        context.run(_BRANCH.set, child)
        options["context"] = context
        task = self._make(loop, coro, options)
        if isinstance(task, asyncio.Task):
            tasks = branch.root.tasks
            tasks[task] = child
            task.add_done_callback(functools.partial(_forget, tasks))
            if child.task is None:
                child.task = task
        if done is not None:
            task.add_done_callback(done)
        return task

    def _make(
        self, loop: asyncio.AbstractEventLoop, coro: Any, options: dict[str, Any]
    ) -> asyncio.Future[Any]:
        if self.inner is not None:
            made: asyncio.Future[Any] = self.inner(loop, coro, **options)
            return made
        return asyncio.Task(coro, loop=loop, **options)


def _forget(tasks: dict[asyncio.Task[Any], Branch], task: asyncio.Future[Any]) -> None:
    tasks.pop(cast("asyncio.Task[Any]", task), None)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Put the naming factory on ``loop`` (once; chained to the factory there)."""
    current = loop.get_task_factory()
    if not isinstance(current, _Factory):
        loop.set_task_factory(_Factory(current))
