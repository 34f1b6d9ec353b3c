"""``worker_concurrency``: how many runs of each queue this process drives at once.

A drive that finds its queue's slots here taken gives the run back to the fleet (owed a
pass) and is remembered: when a slot frees here, the oldest such run is kicked again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from engine_core.flow.queues import QueueLimits
from engine_core.records import RunRecord

#: Runs remembered per queue for a slot that frees here.
DEFERRED_MAX = 10_000


class QueueSlots:
    """This process's drives of runs, counted per queue with a ``worker_concurrency``."""

    def __init__(self, queues: Mapping[str, QueueLimits]) -> None:
        self._queues = queues
        self._driving: dict[str, int] = {}
        self._deferred: dict[str, OrderedDict[str, None]] = {}

    def take(self, run: RunRecord) -> bool:
        """Count a drive of ``run``; False (and the run remembered) when its queue's
        slots here are all taken."""
        limit = self._limit(run)
        if limit is None or run.queue is None:
            return True
        driving = self._driving.get(run.queue, 0)
        if driving >= limit:
            deferred = self._deferred.setdefault(run.queue, OrderedDict())
            deferred[run.run_id] = None
            while len(deferred) > DEFERRED_MAX:
                deferred.popitem(last=False)
            return False
        self._driving[run.queue] = driving + 1
        self._deferred.get(run.queue, OrderedDict()).pop(run.run_id, None)
        return True

    def give(self, run: RunRecord) -> str | None:
        """A drive of ``run`` ended: the run to kick next for the freed slot, if any."""
        if self._limit(run) is None or run.queue is None:
            return None
        self._driving[run.queue] = max(0, self._driving.get(run.queue, 0) - 1)
        deferred = self._deferred.get(run.queue)
        if deferred:
            run_id, _ = deferred.popitem(last=False)
            return run_id
        return None

    def _limit(self, run: RunRecord) -> int | None:
        limits = self._queues.get(run.queue) if run.queue is not None else None
        return limits.worker_concurrency if limits is not None else None
