"""``pikku-mongo runs tail RUN_ID [--stream KEY]``: print a run's stream entries as they
come, until the streams end (closed, or the run ended). Without ``--stream``, every
stream of the run, including those it starts while tailed. One line per entry: the
stream key, the position, the step tag of an entry a step wrote, and the value as JSON
(``--json``: one JSON object per line)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from engine_core import Engine, StreamEntry
from engine_core.errors import RunNotFoundError
from engine_core.records import TERMINAL
from engine_core.store import Store

#: How often a tail of every stream looks for streams the run started meanwhile.
RELIST_S = 1.0


def add_parser(actions: Any, common: argparse.ArgumentParser) -> None:
    """Add ``runs tail`` and its options to the ``runs`` command's ``actions``."""
    tail = actions.add_parser(
        "tail", parents=[common], help="print a run's stream entries as they come"
    )
    tail.add_argument("run_id")
    tail.add_argument("--stream", help="only this stream (default: every stream of the run)")


def entry_line(entry: StreamEntry, as_json: bool) -> str:
    """How ``tail`` prints one entry."""
    if as_json:
        row: dict[str, Any] = {
            "stream": entry.key,
            "position": entry.position,
            "value": entry.value,
        }
        if entry.step is not None:
            row.update(step=entry.step, attempt=entry.attempt, n=entry.n)
        return json.dumps(row)
    tag = f" [{entry.step} attempt {entry.attempt} #{entry.n}]" if entry.step is not None else ""
    return f"{entry.key} {entry.position}{tag}: {json.dumps(entry.value)}"


async def tail(store: Store, run_id: str, stream: str | None, as_json: bool) -> int:
    """Print the entries (see the module docstring); the exit code."""
    engine = Engine(store)
    if await store.get_run(run_id) is None:
        raise RunNotFoundError(f"no run has id {run_id!r}")

    async def follow(key: str) -> None:
        async for entry in engine.read_stream(run_id, key):
            print(entry_line(entry, as_json), flush=True)

    if stream is not None:
        await follow(stream)
        return 0
    followed: dict[str, asyncio.Task[None]] = {}
    try:
        while True:
            for key in await store.list_streams(run_id):
                if key not in followed:
                    followed[key] = asyncio.ensure_future(follow(key))
            run = await store.get_run(run_id)
            if run is None or run.status in TERMINAL:
                # Streams that began before the end are all listed now.
                for key in await store.list_streams(run_id):
                    if key not in followed:
                        followed[key] = asyncio.ensure_future(follow(key))
                await asyncio.gather(*followed.values())
                return 0
            await asyncio.sleep(RELIST_S)
    finally:
        for task in followed.values():
            task.cancel()
