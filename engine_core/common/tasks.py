"""Stopping background tasks without swallowing the caller's own cancellation."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

log = logging.getLogger("engine_core")

#: How long work cancelled at shutdown gets to unwind before it is left behind.
UNWIND_S = 1.0
#: How often a task that has not stopped is cancelled again.
RECANCEL_S = 0.25


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` and wait until they have finished, cancelling again, every
    :data:`RECANCEL_S` seconds, those that are still running.

    For background loops with nothing to clean up: on Python 3.11 a cancellation can be
    lost inside a library (``asyncio.wait_for`` returning a result that raced it), and a
    loop that lost its one cancellation would run for ever. Unlike ``task.cancel();
    await task`` under ``suppress(CancelledError)``, a cancellation of the *caller*
    while it waits still propagates.
    """
    pending = {t for t in tasks if t is not None and not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; whether it was set.

    ``asyncio.timeout`` rather than ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can
    lose a cancellation that arrives as the event is set, and a loop stopped by
    cancelling it would then never stop.
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def abandon(tasks: Collection[asyncio.Future[Any]], what: str) -> None:
    """Cancel ``tasks`` (work in flight at shutdown, past its grace) and give them
    :data:`UNWIND_S` seconds to unwind; those that do not (a step that blocks or swallows
    its cancellation) are left behind, with a warning, so shutdown still ends. What they
    were doing is recovered by the fleet like the work of a process that died."""
    pending = [t for t in tasks if not t.done()]
    if not pending:
        return
    log.warning(
        "shutdown: the grace ended with %d %s in flight; cancelling them "
        "(the fleet recovers their runs)",
        len(pending),
        what,
    )
    for task in pending:
        task.cancel()
    _, left = await asyncio.wait(pending, timeout=UNWIND_S)
    if left:
        log.warning(
            "shutdown left %d %s behind that did not stop when cancelled; "
            "the fleet recovers their runs",
            len(left),
            what,
        )
