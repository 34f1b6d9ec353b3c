"""The dashboard's schedule pages: the schedules list, and the confirm step and the POST
of an action on a schedule (pause, resume, delete, run now)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engine_core import ScheduleNotFoundError
from pikku_mongo.dashboard.actions import (
    SCHEDULE_ACTIONS,
    ScheduleAction,
    perform_on_schedule,
    schedule_actions_for,
)
from pikku_mongo.dashboard.params import parse_choice, parse_schedule_name
from pikku_mongo.dashboard.rendering import PageBase, is_htmx, links_for, log, redirect


class SchedulePages(PageBase):
    """The pages of schedules: listed and acted on."""

    async def schedules(self, request: Request) -> Response:
        """The schedules: timing, next fire, input, and their actions."""
        done = request.query_params.get("done")
        name = request.query_params.get("name")
        action = SCHEDULE_ACTIONS.get(done or "")
        schedules = await self.engine.list_schedules()
        notice = None
        if action is not None and name:
            # Said only when it holds now (the query string alone proves nothing).
            paused = {s.name: s.paused for s in schedules}.get(name)
            holds = {"pause": paused is True, "resume": paused is False, "delete": paused is None}
            if holds.get(action.name):
                notice = f"Schedule {name} {action.done}."
        context: dict[str, Any] = {
            "page": "schedules",
            "schedules": schedules,
            "actions_for": (lambda paused: []) if self.read_only else schedule_actions_for,
            "notice": notice,
        }
        template = "_schedules_live.html" if is_htmx(request) else "schedules.html"
        return self.render(request, template, context)

    async def _schedule_applicable(
        self, request: Request, source: Any
    ) -> tuple[str, ScheduleAction, Any] | Response:
        if self.read_only:
            return self.error(request, 403, "this dashboard is read-only")
        name = parse_schedule_name(source)
        action = SCHEDULE_ACTIONS[parse_choice(source, "action", tuple(SCHEDULE_ACTIONS))]
        found = [s for s in await self.engine.list_schedules() if s.name == name]
        if not found:
            raise ScheduleNotFoundError(f"no schedule is named {name!r}")
        schedule = found[0]
        if not action.applies(schedule.paused):
            state = "paused" if schedule.paused else "not paused"
            return self.error(
                request, 409, f"schedule {name!r} is {state}: it cannot be {action.done}"
            )
        return name, action, schedule

    async def schedule_confirm(self, request: Request) -> Response:
        """The confirm step of a schedule action (the page a browser without JavaScript
        gets)."""
        checked = await self._schedule_applicable(request, request.query_params)
        if isinstance(checked, Response):
            return checked
        name, action, schedule = checked
        links = links_for(request)
        return self.render_confirm(
            request,
            action,
            "schedule",
            schedule,
            ("name", name),
            links.schedule_action(),
            (links.schedules(), "the schedules"),
        )

    async def schedule_action(self, request: Request) -> Response:
        """Carry out a confirmed schedule action (a POST with a valid CSRF token), then
        show the schedules."""
        form = await self.posted(request, changes=True)
        if isinstance(form, Response):
            return form
        checked = await self._schedule_applicable(request, form)
        if isinstance(checked, Response):
            return checked
        name, action, _ = checked
        if action.name == "trigger":  # the new run's page
            run_id = await self.engine.trigger_schedule(name)
            log.info("dashboard: trigger on schedule %r: run %r", name, run_id)
            return redirect(links_for(request).run(run_id))
        await perform_on_schedule(self.engine, action, name)
        log.info("dashboard: %s on schedule %r", action.name, name)
        return redirect(links_for(request).schedules(done=action.name, name=name))
