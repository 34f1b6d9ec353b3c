"""Listing runs: a page of them by filters, and a run's children. A mixin of
:class:`~engine_core.Engine`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from engine_core.codecs.sealing import check_decoded
from engine_core.common.options import check_order
from engine_core.common.status import RunStatus, fold_status
from engine_core.common.values import check_moment, check_page, check_prefix, check_run_id
from engine_core.records import RunRecord
from engine_core.store import Store

_T = TypeVar("_T")

#: The most runs one page of ``list_runs`` holds.
MAX_LIST = 10_000


class ListingApi:
    """``engine.list_runs`` and ``engine.list_children``."""

    store: Store

    if TYPE_CHECKING:

        async def _call(self, fn: Callable[[], Awaitable[_T]], *, again: bool = True) -> _T: ...

    async def list_runs(
        self,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 50,
        after: str | None = None,
        *,
        prefix: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        version: str | None = None,
        order: str = "newest",
    ) -> list[RunStatus]:
        """Runs newest first (by creation time; ``order="oldest"`` the other way round,
        ``order="id"`` by run id); pass the last id seen as ``after`` for the next page.

        ``prefix`` keeps the ids that start with it (plain characters, not a pattern);
        ``created_since`` (inclusive) and ``created_before`` (exclusive) bound the
        creation time (timezone-aware datetimes); ``version`` keeps the runs started with
        that ``version=`` label."""
        check_page(limit, after, MAX_LIST)
        check_order(order)
        prefix = check_prefix(prefix)
        check_moment(created_since, "created_since")
        check_moment(created_before, "created_before")
        runs = await self._call(
            lambda: self.store.list_runs(
                workflow=workflow,
                status=status,
                limit=limit,
                after=after,
                prefix=prefix,
                created_since=created_since,
                created_before=created_before,
                version=version,
                order=order,
            )
        )
        return _listed(runs)

    async def list_children(self, run_id: str) -> list[RunStatus]:
        """The child runs of the run, ordered by id (without their steps)."""
        check_run_id(run_id)
        children = await self._call(lambda: self.store.list_child_runs(run_id))
        return _listed(sorted(children, key=lambda r: r.run_id))


def _listed(runs: list[RunRecord]) -> list[RunStatus]:
    """Runs as a list shows them (without steps); a value this process cannot decode
    raises :class:`~engine_core.CodecError` (outside ``showing_undecodable()``)."""
    for run in runs:
        check_decoded(run.input, run.output, run.error)
    return [fold_status(r, None) for r in runs]
