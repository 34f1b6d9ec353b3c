"""Plain (non-async) step functions run in a worker thread, never on the event loop.

A blocking step function would otherwise stop the loop: no lease or claim is renewed
while it runs (another worker then takes the step for lost and runs it again) and no
other run makes progress. The thread runs the call in a copy of the caller's context,
so :func:`~engine_core.current_step` and the attempt's trace span are seen inside it.

A thread cannot be killed. When the attempt's ``timeout`` passes, or the pass waiting
for it is cancelled (shutdown, a lost lease), the attempt ends as it would for an async
step (``TimeoutError``, or the cancellation) and the thread is left to finish on its
own: what it returns or raises then is dropped, never recorded. A retry of a timed-out
attempt may therefore start while the old call is still running; make such steps
idempotent (``current_step().idempotency_key``) or give them their own deadline.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: The most step calls that run in threads at once in one process (the engine's
#: ``concurrency`` bounds them first); more wait for a thread.
MAX_THREADS = 64

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="engine-step")
        return _pool


def runs_in_thread(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a plain function (called in a thread), not an async one."""
    if type(fn) is types.FunctionType:  # the common case, first (this runs for every step)
        return not fn.__code__.co_flags & inspect.CO_COROUTINE
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return False
    if not inspect.isfunction(target) and not inspect.ismethod(target):
        call = getattr(target, "__call__", None)  # noqa: B004 (an object with __call__)
        if call is not None and inspect.iscoroutinefunction(call):
            return False
    return True


async def call_in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` in a worker thread, in a copy of this context."""
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), context.run, call)
