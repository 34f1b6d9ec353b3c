"""The store protocol's values and updates: what a run publishes and the updates it
answers (docs/guides/values-and-updates.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Protocol

from engine_core.records import UpdateRecord, UpdateSubmission, ValueRecord


class TalkStore(Protocol):
    """Values and updates. Part of :class:`~engine_core.store.Store`."""

    # ---- values (ctx.set_value, engine.get_value) ---------------------------------

    async def put_value(
        self,
        run_id: str,
        key: str,
        value: Any,
        *,
        branch: str,
        position: int,
        written_at: datetime,
    ) -> bool:
        """Make ``value`` the run's value ``key``, marked as written by ``branch`` of the
        body at ``position``, unless that branch's mark for the key is at ``position`` or
        past it already (a write made before, or a later one of the branch): then change
        nothing. True when written. Atomic: of racing writes, each lands or not whole."""

    async def get_value(self, run_id: str, key: str) -> ValueRecord | None:
        """The run's value ``key`` (its latest), or None when none was written."""

    async def list_values(self, run_id: str) -> list[ValueRecord]:
        """Every value of the run, sorted by key (one query)."""

    def value_hints(self) -> AsyncIterator[str] | None:
        """Wake-ups for readers waiting for a value: yields "" once it watches, then the id
        of a run a value of which may have been written by any process since (a hint,
        never a promise); None when the store has no way to tell (or it ends): readers
        then poll with a backoff. Open while someone waits (the store may pay for every
        write while it is)."""

    # ---- updates (engine.update, ctx.wait_for_update) ----------------------------

    async def submit_update(self, update: UpdateRecord) -> UpdateSubmission:
        """Keep ``update`` for its run and mark the run owed a pass, if the run exists,
        has not ended and holds no update of that ``update_id``. An update of that id
        kept already is returned whatever the run's status (nothing is stored), else the
        run's status is told. Atomic on a store that can (a run that ends meanwhile may
        otherwise get an update no wait will take); a repeat after a lost reply finds
        its own first try and reports it kept."""

    async def consume_update(self, run_id: str, name: str, consumer: str) -> UpdateRecord | None:
        """The update ``consumer`` took already, else the oldest (by ``seq``)
        unconsumed update of that name, marked consumed by ``consumer`` (atomically; two
        consumers never take one update). None when there is none."""

    async def answer_update(
        self, run_id: str, update_id: str, answer: dict[str, Any], *, answered_at: datetime
    ) -> UpdateRecord | None:
        """Record ``answer`` on the update unless it holds one (the first answer is
        kept); the update as it is afterwards, or None when there is no such update."""

    async def get_update(self, run_id: str, update_id: str) -> UpdateRecord | None:
        """The update, or None."""

    async def list_updates(self, run_id: str, *, pending: bool) -> list[UpdateRecord]:
        """The run's updates in the order they were sent (``pending``: only those not
        answered yet)."""

    def answer_hints(self) -> AsyncIterator[str] | None:
        """Wake-ups for callers waiting for answers: as :meth:`value_hints`, for updates
        answered."""

    def update_hints(self) -> AsyncIterator[None] | None:
        """Wake-ups for idle workers: yields when an update may have been submitted by
        any process (its run is owed a pass), or None when the store cannot tell."""
