"""The dashboard's run pages: the runs list, a run's page, and the confirm step and the
POST of an action on a run (cancel, retry, ...)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engine_core import ForkPlan, QueueStatus, RunStatus
from engine_core.records import TERMINAL
from pikku_mongo.dashboard.actions import ACTIONS, Action, actions_for, perform
from pikku_mongo.dashboard.bulk_pages import BULK_ACTIONS
from pikku_mongo.dashboard.params import (
    LIMITS,
    RUN_STATUSES,
    parse_choice,
    parse_run_filters,
    parse_run_id,
    parse_step,
)
from pikku_mongo.dashboard.rendering import PageBase, is_htmx, links_for, log, redirect
from pikku_mongo.dashboard.streams_view import stream_tails
from pikku_mongo.dashboard.views import build_timeline
from pikku_mongo.dashboard.waiting import awaited_events, event_form, why_waiting
from pikku_mongo.doctor.stranded import why_stranded


def _bulk_notice(params: Any) -> str | None:
    """What a bulk action just did, from the list's query (``done``, ``count``)."""
    done, count = params.get("done"), params.get("count", "")
    if done not in BULK_ACTIONS or not count.isdigit():
        return None
    skipped = params.get("skipped", "0")
    text = f"{BULK_ACTIONS[done].label}: {int(count)} run(s) done"
    return text + (f", {int(skipped)} skipped." if skipped.isdigit() and int(skipped) else ".")


def fork_facts(plan: ForkPlan) -> list[tuple[str, str]]:
    """What a fork copies and what it runs again, as the confirm page lists them."""
    again = [
        f"{key} (its compensation ran)" if key in plan.compensated else key
        for key in plan.run_again
    ]
    return [
        ("Runs anew from step", plan.from_step or "-"),
        ("Copied (not run again)", ", ".join(plan.copied) or "none"),
        ("Run again", ", ".join(again) or "none"),
    ]


class RunPages(PageBase):
    """The pages of runs: listed, one by one, and acted on."""

    async def index(self, request: Request) -> Response:
        """The root: the runs list."""
        return redirect(links_for(request).runs())

    async def runs(self, request: Request) -> Response:
        """The runs list: counts by status, filters, a keyset-paginated page."""
        filters = parse_run_filters(request.query_params)
        found, counts = await asyncio.gather(
            self.engine.list_runs(
                workflow=filters.workflow,
                status=filters.status,
                version=filters.version,
                limit=filters.limit + 1,
                after=filters.after,
                prefix=filters.prefix,
                created_since=filters.since,
                created_before=filters.before,
                order=filters.order,
            ),
            self.engine.count_runs(filters.workflow),
        )
        statuses = list(RUN_STATUSES) + sorted(set(counts) - set(RUN_STATUSES))
        context: dict[str, Any] = {
            "filters": filters,
            "runs": found[: filters.limit],
            "more": len(found) > filters.limit,
            "counts": [(s, counts.get(s, 0)) for s in statuses],
            "total": sum(counts.values()),
            "bulk_notice": _bulk_notice(request.query_params),
        }
        if is_htmx(request):
            return self.render(request, "_runs_live.html", context)
        workflows = await self.engine.list_workflows()
        if filters.workflow is not None and filters.workflow not in workflows:
            workflows.append(filters.workflow)
        context.update(page="runs", workflows=workflows, statuses=RUN_STATUSES, limits=LIMITS)
        return self.render(request, "runs.html", context)

    async def run(self, request: Request) -> Response:
        """One run: its values (input, output, published), pending updates, family,
        streams, steps, timeline and actions."""
        run_id = parse_run_id(request.query_params)
        done = request.query_params.get("done")
        status, history, children, forks, streams, pending = await asyncio.gather(
            self.engine.status(run_id),
            self.engine.history(run_id),
            self.engine.list_children(run_id),
            self.engine.list_forks(run_id),
            stream_tails(self.engine.store, run_id),
            self.engine.store.list_updates(run_id, pending=True),
        )
        context: dict[str, Any] = {
            "page": "runs",
            "run": status,
            "active": status.status not in TERMINAL,
            "timeline": build_timeline(status, history),
            "children": children,
            "forks": forks,
            "can_fork": not self.read_only,
            "streams": streams,
            "pending_updates": pending,
            "actions": [] if self.read_only else actions_for(status.status),
            "waiting": why_waiting(
                status,
                await self._queue_of(status),
                undriven=await why_stranded(self.engine, status),
            ),
            "send_events": [] if self.read_only else awaited_events(status),
            "send_explain": ACTIONS["send-event"].explain,
            "notice": ACTIONS[done].done if done in ACTIONS else None,
            "trace_link": (
                self.trace_url.replace("{trace_id}", status.trace_id)
                if self.trace_url and status.trace_id
                else None
            ),
        }
        template = "_run_live.html" if is_htmx(request) else "run.html"
        return self.render(request, template, context)

    async def _queue_of(self, status: RunStatus) -> QueueStatus | None:
        if status.status != "queued" or status.queue is None:
            return None
        return next((q for q in await self.engine.list_queues() if q.name == status.queue), None)

    async def _applicable(
        self, request: Request, source: Any
    ) -> tuple[str, Action, Any] | Response:
        if self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        run_id = parse_run_id(source)
        action = ACTIONS[parse_choice(source, "action", tuple(ACTIONS))]
        status = await self.engine.status(run_id)
        if status.status not in action.applies_to:
            return self.error(
                request,
                409,
                f"run {run_id!r} is {status.status}: {action.label.lower()} applies to "
                f"{' or '.join(sorted(action.applies_to))} runs only",
            )
        return run_id, action, status

    async def confirm(self, request: Request) -> Response:
        """The confirm step of an action (the page a browser without JavaScript gets)."""
        checked = await self._applicable(request, request.query_params)
        if isinstance(checked, Response):
            return checked
        run_id, action, status = checked
        links = links_for(request)
        extra: list[tuple[str, str]] = []
        facts: list[tuple[str, str]] = []
        question = None
        if action.name == "send-event":
            event, text, _ = event_form(request.query_params, status)
            extra = [("event", event), ("payload", text)]
            question = f"Send event {event!r} to this run?"
        elif action.name == "fork":
            step = parse_step(request.query_params)
            extra = [("step", step)] if step is not None else []
            facts = fork_facts(await self.engine.fork_plan(run_id, from_step=step))
        return self.render_confirm(
            request,
            action,
            "run",
            status,
            ("id", run_id),
            links.action(),
            (links.run(run_id), "the run"),
            extra,
            question=question,
            facts=facts,
        )

    async def action(self, request: Request) -> Response:
        """Carry out a confirmed action (a POST with a valid CSRF token), then show the run."""
        form = await self.posted(request, changes=True)
        if isinstance(form, Response):
            return form
        checked = await self._applicable(request, form)
        if isinstance(checked, Response):
            return checked
        run_id, action, status = checked
        if action.name == "send-event":
            event, _, payload = event_form(form, status)
            await self.engine.send_event(run_id, event, payload)
        elif action.name == "fork":
            fork = await self.engine.fork(run_id, from_step=parse_step(form))
            log.info("dashboard: fork of run %r: run %r", run_id, fork)
            return redirect(links_for(request).run(fork, done="fork"))
        else:
            await perform(self.engine, action, run_id)
        log.info("dashboard: %s on run %r", action.name, run_id)
        return redirect(links_for(request).run(run_id, done=action.name))
