"""``engine.read_stream``: a run's stream, in order, live, until it ends.

Woken by the store's hints (a change stream on MongoDB, in-process on the memory store)
where it has them, polling with a backoff where not. A stream ends for its readers at
its closing entry, or once the run has ended and every entry written before is read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from engine_core.common.clock import real_seconds
from engine_core.common.durations import Duration, parse_duration
from engine_core.common.values import check_name, check_run_id
from engine_core.errors import InvalidOptionError, RunNotFoundError
from engine_core.records import TERMINAL
from engine_core.store import Store
from engine_core.streams import StreamEntry

#: Entries read per query.
BATCH = 500
#: Polling backoff without hints: from this, doubling, up to the cap.
POLL_MIN_S = 0.005
POLL_MAX_S = 0.5
#: How often a reader woken by hints still looks by itself (a hint may be missed while
#: the change stream opens) and whether the run has ended.
CHECK_S = 1.0


async def read_stream(
    store: Store, run_id: str, key: str, *, offset: int = 0, timeout: Duration | None = None
) -> AsyncIterator[StreamEntry]:
    """The entries of the run's stream ``key`` from position ``offset`` (see the module
    docstring). Raises ``RunNotFoundError`` for an unknown run and ``TimeoutError`` when
    the stream has not ended ``timeout`` seconds after the call."""
    check_run_id(run_id)
    check_name(key, "stream key")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidOptionError(f"offset must be a non-negative integer, not {offset!r}")
    limit = None if timeout is None else parse_duration(timeout, what="timeout")
    deadline = None if limit is None else real_seconds() + limit
    if await store.get_run(run_id) is None:
        raise RunNotFoundError(f"no run has id {run_id!r}")
    woken = asyncio.Event()
    hints = store.stream_hints(run_id)
    listener = None if hints is None else asyncio.ensure_future(_listen(hints, woken))
    delay = POLL_MIN_S
    try:
        while True:
            entries = await store.stream_entries(run_id, key, offset=offset, limit=BATCH)
            for entry in entries:
                if entry.closed:
                    return
                offset = entry.position + 1
                yield entry
            if entries:
                delay = POLL_MIN_S
                continue
            run = await store.get_run(run_id)
            if run is None or run.status in TERMINAL:
                # Entries written before the end were there for the read above, except
                # one that landed between the two reads: one read more.
                for entry in await store.stream_entries(run_id, key, offset=offset, limit=BATCH):
                    if entry.closed:
                        return
                    offset = entry.position + 1
                    yield entry
                return
            await _wait(listener, woken, delay, deadline, run_id, key)
            delay = min(delay * 2, POLL_MAX_S)
    finally:
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
        if hints is not None:
            with contextlib.suppress(Exception):
                await hints.aclose()  # type: ignore[attr-defined]


async def _listen(hints: AsyncIterator[None], woken: asyncio.Event) -> None:
    async for _ in hints:
        woken.set()


async def _wait(
    listener: asyncio.Future[None] | None,
    woken: asyncio.Event,
    delay: float,
    deadline: float | None,
    run_id: str,
    key: str,
) -> None:
    """Until a hint (or, without hints, the backoff's ``delay``), at most until the
    deadline (``TimeoutError`` once it has passed)."""
    live = listener is not None and not listener.done()
    wait = CHECK_S if live else delay
    if deadline is not None:
        left = deadline - real_seconds()
        if left <= 0:
            raise TimeoutError(f"stream {key!r} of run {run_id!r} has not ended in time")
        wait = min(wait, left)
    if live:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), wait)
        woken.clear()
    else:
        await asyncio.sleep(wait)
