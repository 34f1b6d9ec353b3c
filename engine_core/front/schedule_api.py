"""The schedule half of the engine's API (docs/guides/schedules.md): stored schedules a process
creates and steers, and schedules declared in code. A mixin of :class:`Engine`, kept
apart so the facade stays one screen per concern."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from engine_core.common.durations import Duration
from engine_core.front.host import Host
from engine_core.front.starting import record_for_fleet
from engine_core.schedules.control import ScheduleControl
from engine_core.schedules.declared import DeclaredSchedule, declare_schedule
from engine_core.schedules.times import Schedule, trigger_run_id

_T = TypeVar("_T")


class ScheduleApi:
    """Create, declare, fire, pause, resume, delete and list schedules."""

    _host: Host
    _schedules: ScheduleControl
    _declared_schedules: dict[str, DeclaredSchedule]

    if TYPE_CHECKING:

        async def _call(self, fn: Callable[[], Awaitable[_T]], *, again: bool = True) -> _T: ...

        async def start(
            self, workflow: str, input: Any = None, *, run_id: str | None = None
        ) -> str: ...

    # ---- schedules ---------------------------------------------------------------

    async def create_schedule(
        self,
        name: str,
        workflow: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        input: Any = None,
    ) -> Schedule:
        """Store a schedule that starts ``workflow`` with ``input`` at every fire: of
        ``cron`` (read in ``timezone``) or ``every`` (whole seconds, at the multiples of
        the interval since the Unix epoch). Replaces a schedule of the same name (the
        new one is not paused). Each fire starts one run across the fleet, with run id
        ``"{name}@{fire time, UTC, e.g. 2026-12-03T01:00:00Z}"``, in a serving process
        that registered ``workflow``.

        Raises :class:`WorkflowNotRegisteredError` for a workflow not registered on this
        engine and :class:`InvalidScheduleError` for an unusable timing."""
        return await self._call(
            lambda: self._schedules.create_schedule(
                name, workflow, cron=cron, every=every, timezone=timezone, input=input
            )
        )

    def schedule(
        self,
        name: str,
        workflow: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        timezone: str = "UTC",
        input: Any = None,
        catch_up: str = "latest",
    ) -> None:
        """Declare the schedule ``name`` in code, before ``async with`` (like
        :meth:`queue`): timing and input as :meth:`create_schedule`. The code owns the
        specification (stored when the engine starts serving, where it differs); the
        operator owns ``paused`` (a restart never resumes a paused schedule).
        ``catch_up`` says what the fires missed while nothing ran start: ``"latest"``
        (one run), ``"none"``, or ``"all"`` (each, at most the last 100)."""
        if self._host.serving:
            raise RuntimeError("declare schedules before `async with engine`")
        self._declared_schedules[name] = declare_schedule(
            name,
            workflow,
            cron=cron,
            every=every,
            timezone=timezone,
            input=input,
            catch_up=catch_up,
        )

    async def trigger_schedule(self, name: str) -> str:
        """Fire the schedule once now, paused or not, and return the run's id
        (``name@manual-...``, an id no regular fire takes). The run starts here when
        this engine registered the workflow, else it is recorded for the fleet."""
        schedule = await self._call(lambda: self._schedules.get(name))
        run_id = trigger_run_id(schedule.name)
        if schedule.workflow in self._host.workflows:
            return await self.start(schedule.workflow, schedule.input, run_id=run_id)
        return await record_for_fleet(
            self._host, self._call, schedule.workflow, schedule.input, run_id
        )

    async def pause_schedule(self, name: str) -> None:
        """Stop the schedule firing until :meth:`resume_schedule`."""
        await self._call(lambda: self._schedules.pause_schedule(name))

    async def resume_schedule(self, name: str) -> None:
        """Let a paused schedule fire again, from its next fire after now (the fires
        it missed while paused are not made up)."""
        await self._call(lambda: self._schedules.resume_schedule(name))

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule; the runs it started are not touched."""
        await self._call(lambda: self._schedules.delete_schedule(name))

    async def list_schedules(self) -> list[Schedule]:
        """Every stored schedule, sorted by name (registered on this engine or not)."""
        return await self._call(self._schedules.list_schedules)

    async def _start_scheduled(self, workflow: str, input: Any, run_id: str) -> None:
        await self.start(workflow, input, run_id=run_id)
