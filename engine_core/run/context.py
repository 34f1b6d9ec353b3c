"""What a workflow body and a running step can see of the engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import (
    Any,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
    TypeVarTuple,
    overload,
)

from engine_core.common.clock import Clock
from engine_core.common.convert import declared_return
from engine_core.common.durations import Duration
from engine_core.common.values import check_name
from engine_core.run.branches import StepNames
from engine_core.run.calls import checkpointed
from engine_core.run.mismatch import as_declared
from engine_core.run.update_request import UpdateRequest


class StepRunner(Protocol):
    """What a :class:`WorkflowContext` hands its calls to: the pass replaying the body."""

    @property
    def run_id(self) -> str: ...

    @property
    def workflow(self) -> str: ...

    #: The engine's clock.
    clock: Clock

    async def inline_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        retries: int,
        retry_delay: Duration,
        compensate: Callable[[Any], Any] | None,
        timeout: Duration | None,
        kwargs: dict[str, Any] | None = None,
        declared: Any = None,
    ) -> Any: ...

    def registered(
        self, kind: Literal["workflow", "step function"], name: str
    ) -> Callable[..., Any] | None:
        """The workflow or step function registered in this process under ``name``."""
        ...

    async def dispatch_step(
        self,
        name: str,
        function: str,
        payload: Any,
        *,
        retries: int,
        retry_delay: Duration,
        timeout: Duration | None,
    ) -> Any: ...

    async def sleep_step(self, name: str, duration: Duration) -> None: ...

    async def event_step(self, name: str, timeout: Duration | None) -> Any: ...

    async def child_step(self, name: str, workflow: str, input: Any) -> Any: ...

    async def patched(self, patch_id: str) -> bool: ...

    async def write_stream(self, key: str, value: Any, *, closed: bool = False) -> None: ...

    async def set_value(self, key: str, value: Any) -> None: ...

    async def update_step(
        self, name: str, timeout: Duration | None
    ) -> UpdateRequest[Any] | None: ...

    @property
    def names(self) -> StepNames:
        """How the body's calls are keyed, branch by branch (``engine_core.run.branches``)."""
        ...


_T = TypeVar("_T")
_R = TypeVar("_R")
_A = TypeVar("_A")
_P = ParamSpec("_P")
_Ts = TypeVarTuple("_Ts")


_Out = TypeVar("_Out", covariant=True)


class _NoArguments(Protocol[_Out]):
    """A callable that can be called with no argument."""

    def __call__(self) -> _Out: ...


class WorkflowContext:
    """Handed to a workflow body; every call on it is checkpointed."""

    def __init__(self, runner: StepRunner) -> None:
        self._pass = runner

    @property
    def run_id(self) -> str:
        """The id of the run this body belongs to."""
        return self._pass.run_id

    @property
    def workflow(self) -> str:
        """The name of the workflow being run."""
        return self._pass.workflow

    # ``ctx.step``: the positional arguments are checked against ``fn`` and the result is
    # what ``fn`` returns (awaited). Keyword arguments go to ``fn`` unchecked; with none
    # of the step options, a call passing required parameters by keyword is checked
    # whole (the ParamSpec overloads).
    @overload
    async def step(
        self, name: str, fn: Callable[_P, Awaitable[_R]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R: ...

    @overload
    async def step(
        self, name: str, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> _R: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[[*_Ts], Awaitable[_R]],
        *args: *_Ts,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
        returns: None = None,
        **kwargs: Any,
    ) -> _R: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[[*_Ts], _R],
        *args: *_Ts,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
        returns: None = None,
        **kwargs: Any,
    ) -> _R: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[[*_Ts], Any],
        *args: *_Ts,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
        returns: type[_T],
        **kwargs: Any,
    ) -> _T: ...

    # A lambda with default arguments (``lambda i=i: ...``, binding a loop variable) is
    # not inferred against a TypeVarTuple: these take any callable that can be called
    # with no argument.
    @overload
    async def step(
        self,
        name: str,
        fn: _NoArguments[Awaitable[_R]],
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
        returns: None = None,
    ) -> _R: ...

    @overload
    async def step(
        self,
        name: str,
        fn: _NoArguments[_R],
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
        returns: None = None,
    ) -> _R: ...

    @overload
    async def step(
        self,
        name: str,
        fn: _NoArguments[Any],
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        compensate: Callable[[Any], Any] | None = None,
        timeout: Duration | None = None,
        returns: type[_T],
    ) -> _T: ...

    # mypy cannot match ``*args: Any`` to a TypeVarTuple's ``*args``:
    @checkpointed  # type: ignore[misc]
    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retries: Any = 0,
        retry_delay: Any = 0,
        compensate: Any = None,
        timeout: Any = None,
        returns: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` here, once: a replay returns the recorded result,
        as the type ``returns`` or ``fn``'s return annotation declares. The step options
        (``retries``, ``retry_delay``, ``compensate``, ``timeout``, ``returns``) are
        keyword-only and never passed to ``fn``."""
        declared = returns if returns is not None else declared_return(fn)
        result = await self._pass.inline_step(
            name,
            fn,
            args,
            retries=retries,
            retry_delay=retry_delay,
            compensate=compensate,
            timeout=timeout,
            kwargs=kwargs,
            declared=declared,
        )
        return as_declared(result, declared, f"the result of step {name!r}", step=name)

    @overload
    async def dispatch(
        self,
        name: str,
        function: Callable[[_A], Awaitable[_R]],
        payload: _A,
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        timeout: Duration | None = None,
        returns: None = None,
    ) -> _R: ...

    @overload
    async def dispatch(
        self,
        name: str,
        function: Callable[[_A], _R],
        payload: _A,
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        timeout: Duration | None = None,
        returns: None = None,
    ) -> _R: ...

    @overload
    async def dispatch(
        self,
        name: str,
        function: str | Callable[..., Any],
        payload: Any = None,
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        timeout: Duration | None = None,
        returns: type[_T],
    ) -> _T: ...

    @overload
    async def dispatch(
        self,
        name: str,
        function: str,
        payload: Any = None,
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        timeout: Duration | None = None,
        returns: None = None,
    ) -> Any: ...

    @checkpointed
    async def dispatch(
        self,
        name: str,
        function: str | Callable[..., Any],
        payload: Any = None,
        *,
        retries: int = 0,
        retry_delay: Duration = 0,
        timeout: Duration | None = None,
        returns: Any = None,
    ) -> Any:
        """Hand step ``name`` to any worker that registered ``function`` (its name, or the
        registered function itself); wait for it. The result comes back as ``returns``
        or the step function's return annotation declares (when registered here)."""
        fn, function = self._resolve("step function", function)
        result = await self._pass.dispatch_step(
            name, function, payload, retries=retries, retry_delay=retry_delay, timeout=timeout
        )
        declared = returns if returns is not None else declared_return(fn)
        return as_declared(result, declared, f"the result of step {name!r}", step=name)

    def _resolve(
        self, kind: Literal["workflow", "step function"], target: str | Callable[..., Any]
    ) -> tuple[Callable[..., Any] | None, str]:
        """The registered function and its name, from either."""
        if isinstance(target, str):
            return self._pass.registered(kind, target), target
        name = registered_name(target, kind)
        if name is None:
            raise ValueError(f"{target!r} is not a registered {kind}; register it or pass its name")
        return target, name

    @checkpointed
    async def sleep(self, name: str, duration: Duration) -> None:
        """Wait ``duration`` durably: the wake-up time survives restarts."""
        await self._pass.sleep_step(name, duration)

    @overload
    async def wait_for_event(
        self, name: str, *, timeout: Duration | None = None, returns: type[_T]
    ) -> _T | None: ...

    @overload
    async def wait_for_event(
        self, name: str, *, timeout: Duration | None = None, returns: None = None
    ) -> Any: ...

    @checkpointed
    async def wait_for_event(
        self, name: str, *, timeout: Duration | None = None, returns: Any = None
    ) -> Any:
        """The payload of the oldest unconsumed event ``name`` (as ``returns``); None on
        timeout."""
        payload = await self._pass.event_step(name, timeout)
        if payload is None:
            return None
        return as_declared(payload, returns, f"the payload of event {name!r}", step=name)

    @overload
    async def child(
        self,
        name: str,
        workflow: Callable[[Any, _A], Awaitable[_R]],
        input: _A,
        *,
        returns: None = None,
    ) -> _R: ...

    @overload
    async def child(
        self,
        name: str,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        returns: type[_T],
    ) -> _T: ...

    @overload
    async def child(
        self, name: str, workflow: str, input: Any = None, *, returns: None = None
    ) -> Any: ...

    @checkpointed
    async def child(
        self,
        name: str,
        workflow: str | Callable[..., Any],
        input: Any = None,
        *,
        returns: Any = None,
    ) -> Any:
        """Run ``workflow`` (its name, or the registered workflow itself) as a child run
        and return its output, as ``returns`` or the workflow's return annotation says."""
        fn, workflow = self._resolve("workflow", workflow)
        output = await self._pass.child_step(name, workflow, input)
        declared = returns if returns is not None else declared_return(fn)
        return as_declared(output, declared, f"the output of child step {name!r}", step=name)

    @checkpointed
    async def patched(self, patch_id: str) -> bool:
        """True on a run that reaches this point on new code (a marker, riding the next
        write, keeps it True on every replay); False on a run whose records show it
        passed this point on old code. See docs/guides/changing-code.md."""
        return await self._pass.patched(patch_id)

    @checkpointed
    async def write_stream(self, key: str, value: Any) -> None:
        """Append ``value`` to the run's stream ``key``, exactly once: a replay reaches
        the same position and writes nothing new. Raises ``StreamTooLargeError`` past
        the stream's limit (``engine_core.streams``)."""
        await self._pass.write_stream(key, value)

    @checkpointed
    async def close_stream(self, key: str) -> None:
        """End the stream ``key``: its readers stop after the entries before. (A
        stream also ends for its readers when the run ends.)"""
        await self._pass.write_stream(key, None, closed=True)

    @checkpointed
    async def set_value(self, key: str, value: Any) -> None:
        """Publish ``value`` as the run's value ``key``, replacing the one before; any
        process reads it with ``engine.get_value``. Exactly once per call: a replay
        writes nothing new. Readable once the body's next step starts, or its pass
        parks or ends (the write rides that one's)."""
        await self._pass.set_value(key, value)

    @overload
    async def wait_for_update(
        self, name: str, *, timeout: Duration | None = None, returns: type[_T]
    ) -> UpdateRequest[_T] | None: ...

    @overload
    async def wait_for_update(
        self, name: str, *, timeout: Duration | None = None, returns: None = None
    ) -> UpdateRequest[Any] | None: ...

    @checkpointed
    async def wait_for_update(
        self, name: str, *, timeout: Duration | None = None, returns: Any = None
    ) -> UpdateRequest[Any] | None:
        """The oldest update ``name`` sent with ``engine.update`` and not taken yet (its
        payload as ``returns``), or wait for one; None on timeout. Answer it with
        ``await req.reply(value)`` or ``await req.reject(reason)``."""
        request = await self._pass.update_step(name, timeout)
        if request is not None:
            what = f"the payload of update {name!r}"
            request.payload = as_declared(request.payload, returns, what, step=name)
        return request

    def deprecate_patch(self, patch_id: str) -> None:
        """Once no run from before patch ``patch_id`` remains: records nothing and
        accepts runs with or without its marker."""
        check_name(patch_id, "patch id")


def registered_name(fn: Callable[..., Any], kind: str) -> str | None:
    """The name ``fn`` was registered under as a ``kind`` (see :func:`mark_registered`)."""
    names: dict[str, str] = getattr(fn, "__engine_names__", {})
    return names.get(kind)


def mark_registered(fn: Callable[..., Any], kind: str, name: str) -> None:
    """Note on ``fn`` that it is registered as the ``kind`` ``name`` (so code may pass the
    function itself where the name is asked for)."""
    try:
        names = fn.__dict__.setdefault("__engine_names__", {})
    except AttributeError:
        return  # no attributes (a builtin): only its name will do
    names.setdefault(kind, name)


def clock_of(ctx: WorkflowContext) -> Clock:
    """The clock of the engine replaying ``ctx``'s body (for engine_core's own code that
    records the time in a body, as a step)."""
    return ctx._pass.clock
