"""OS processes that race from one moment (``tests/mongo/test_*_race.py``): the test makes
a :func:`start_line` for them and passes it to each process it starts from
:data:`SPAWN`; each process, once it has imported everything and connected, waits at it
with :func:`all_ready`, and all of them go on together.

A barrier, not a moment fixed in advance: on a loaded machine (the suite's workers, other
jobs) starting a process and importing pymongo can take longer than any guess, and a
process that arrived late would race nobody.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from multiprocessing.synchronize import Barrier

#: The context the race tests start their processes from (a fresh interpreter each).
SPAWN = multiprocessing.get_context("spawn")

#: How long a process waits for the others: a process that dies before the line breaks
#: the barrier for the rest (``BrokenBarrierError``) instead of hanging them.
READY_TIMEOUT_S = 120.0


def start_line(processes: int) -> Barrier:
    """The barrier ``processes`` processes started from :data:`SPAWN` meet at."""
    return SPAWN.Barrier(processes)


async def all_ready(line: Barrier) -> None:
    """Wait until every process is at ``line`` (in a thread: the event loop runs on)."""
    await asyncio.to_thread(line.wait, READY_TIMEOUT_S)
