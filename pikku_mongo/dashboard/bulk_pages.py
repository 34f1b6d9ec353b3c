"""The dashboard's bulk actions on the runs list: "fork from failure" and "cancel" for
every run the list's filters match (workflow, status, creation time), behind the same
confirmation page and CSRF guard as the actions on one run. The confirmation counts the
runs first (a dry run) and lists the first ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from engine_core.records import STOPPABLE
from engine_core.run.bulk import BulkReport
from pikku_mongo.dashboard.params import BadRequest, RunFilters, parse_choice, parse_run_filters
from pikku_mongo.dashboard.rendering import PageBase, links_for, log, redirect

#: Run ids the confirmation lists.
SHOWN = 20


@dataclass(frozen=True)
class BulkAction:
    """One bulk action: its form value, its button label and what it does."""

    name: str
    label: str
    explain: str


BULK_ACTIONS: dict[str, BulkAction] = {
    a.name: a
    for a in (
        BulkAction(
            "fork",
            "Fork from failure",
            "Fork every failed run the filters match: each gets a new run that reuses the "
            "steps finished before the step that failed it and runs that step and every "
            "later one anew. The failed runs are not changed.",
        ),
        BulkAction(
            "cancel",
            "Cancel all",
            "Cancel every run the filters match that has not ended (queued, running or "
            "suspended), without compensating; their children are cancelled too.",
        ),
    )
}


class BulkPages(PageBase):
    """The confirmation and the POST of a bulk action on the runs list."""

    async def bulk_confirm(self, request: Request) -> Response:
        """How many runs a bulk action would take, the first of them, and the form."""
        checked = self._bulk(request, request.query_params)
        if isinstance(checked, Response):
            return checked
        action, filters = checked
        report = await self._apply(action, filters, dry_run=True)
        context: dict[str, Any] = {
            "page": "runs",
            "bulk": action,
            "filters": filters,
            "matched": report.matched,
            "shown": [r for r, _ in report.sample[:SHOWN]],
            "fields": _fields(filters),
        }
        return self.render(request, "bulk_confirm.html", context)

    async def bulk_action(self, request: Request) -> Response:
        """Carry out a confirmed bulk action, then show the list with what it did."""
        form = await self.posted(request, changes=True)
        if isinstance(form, Response):
            return form
        checked = self._bulk(request, QueryParams([(k, v) for k, vs in form.items() for v in vs]))
        if isinstance(checked, Response):
            return checked
        action, filters = checked
        report = await self._apply(action, filters, dry_run=False)
        log.info("dashboard: bulk %s on %d run(s)", action.name, report.done)
        query = filters.query(after=None)
        tail = f"done={action.name}&count={report.done}&skipped={report.skipped}"
        return redirect(links_for(request).runs((query + "&" if query else "?") + tail))

    def _bulk(
        self, request: Request, params: QueryParams
    ) -> tuple[BulkAction, RunFilters] | Response:
        if self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        action = BULK_ACTIONS[parse_choice(params, "bulk", tuple(BULK_ACTIONS))]
        filters = parse_run_filters(params)
        if filters.version is not None or filters.prefix is not None:
            raise BadRequest(
                "bulk actions take the workflow, status and creation-time filters only: "
                "clear the version and run id filters"
            )
        if action.name == "fork" and filters.status not in (None, "failed"):
            return self.error(request, 409, "fork from failure takes failed runs only")
        if action.name == "cancel" and filters.status not in (None, *STOPPABLE):
            return self.error(
                request, 409, f"{filters.status} runs have ended: there is nothing to cancel"
            )
        if action.name == "cancel" and (
            filters.workflow,
            filters.status,
            filters.since,
            filters.before,
        ) == (None, None, None, None):
            return self.error(
                request, 409, "choose a filter first: cancel all takes a filtered set"
            )
        return action, filters

    async def _apply(self, action: BulkAction, filters: RunFilters, *, dry_run: bool) -> BulkReport:
        where: dict[str, Any] = {
            "workflow": filters.workflow,
            "created_since": filters.since,
            "created_before": filters.before,
            "dry_run": dry_run,
        }
        if action.name == "fork":
            return await self.engine.fork_many(status="failed", **where)
        return await self.engine.cancel_many(status=filters.status, **where)


def _fields(filters: RunFilters) -> list[tuple[str, str]]:
    """The filters as the hidden fields of the confirmation's form."""
    query = filters.query(after=None, limit=50, order="newest")
    return list(QueryParams(query.lstrip("?")).multi_items())
