"""Stopping background tasks without swallowing the caller's own cancellation."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel ``tasks`` and wait until they have finished.

    Unlike ``task.cancel(); await task`` under ``suppress(CancelledError)``, a
    cancellation of the *caller* while it waits still propagates.
    """
    pending = [t for t in tasks if t is not None and not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)


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
