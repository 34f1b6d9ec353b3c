"""Targeted polling, on or off: the two indexes of queued work it keeps
(:mod:`pikku_mongo.store.job_index`, :mod:`pikku_mongo.store.line_index`), shared by the
parts of the store that write or read queued work. Off, both are None."""

from __future__ import annotations

from pymongo.asynchronous.collection import AsyncCollection

from pikku_mongo.store.job_index import JobIndex
from pikku_mongo.store.line_index import LineIndex
from pikku_mongo.wire.documents import Doc


class Targeting:
    """Whether targeted polling is on, and its indexes: the job index over ``steps`` in
    ``jobs``, the line index over ``runs`` in ``lines``."""

    def __init__(
        self,
        *,
        jobs: AsyncCollection[Doc],
        steps: AsyncCollection[Doc],
        lines: AsyncCollection[Doc],
        runs: AsyncCollection[Doc],
    ) -> None:
        self._collections = (jobs, steps, lines, runs)
        #: The index of claimable jobs while targeted polling is on, else None.
        self.job_index: JobIndex | None = None
        #: The index of queue lines while targeted polling is on, else None.
        self.line_index: LineIndex | None = None

    def turn_on(self) -> None:
        """Keep the job and line indexes: polls then read one shard, not every shard."""
        jobs, steps, lines, runs = self._collections
        self.job_index = JobIndex(jobs, steps)
        self.line_index = LineIndex(lines, runs)
