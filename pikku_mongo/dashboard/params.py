"""Checking what a request brings: query parameters and form bodies.

Every value that reaches the Engine passes through here first: statuses must be known,
lengths and limits are bounded, times must parse. Anything else raises
:class:`BadRequest`, which the app answers with a 400 page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import get_args
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request

from engine_core.common.options import ORDERS
from engine_core.records import RunState

#: Every run status of the engine (section 4 of the design), in its order.
RUN_STATUSES: tuple[str, ...] = tuple(get_args(RunState))
MAX_RUN_ID = 200
MAX_NAME = 500
MAX_TIME_TEXT = 40
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
LIMITS = (25, 50, 100, 200)
#: A form body larger than this is refused.
MAX_FORM_BYTES = 16 * 1024


class BadRequest(Exception):
    """The request is malformed; the message says how (shown on the 400 page)."""


def _single(
    params: QueryParams | Mapping[str, Sequence[str]], name: str, *, nul: bool = False
) -> str | None:
    """The parameter's one value (None when absent or empty). Only run ids (``nul``) may
    hold a NUL character: a run id is any string, names are not."""
    values = params.getlist(name) if isinstance(params, QueryParams) else params.get(name, [])
    if len(values) > 1:
        raise BadRequest(f"the parameter {name!r} is given {len(values)} times")
    value = values[0] if values else ""
    if not nul and "\x00" in value:
        raise BadRequest(f"the parameter {name!r} holds a NUL character")
    return value or None


def _bounded(value: str | None, name: str, most: int) -> str | None:
    if value is not None and len(value) > most:
        raise BadRequest(f"{name} is {len(value)} characters long, at most {most} are allowed")
    return value


def parse_time(value: str | None, name: str) -> datetime | None:
    """An ISO 8601 time (the form's ``YYYY-MM-DDTHH:MM[:SS]``); without an offset it is
    UTC."""
    if value is None:
        return None
    _bounded(value, name, MAX_TIME_TEXT)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{name} is not a time such as 2026-12-02T10:44 (got {value!r})") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def format_time_input(moment: datetime | None) -> str:
    """A time as the value of a ``datetime-local`` input (UTC, to the second)."""
    return "" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class RunFilters:
    """What the runs list shows: its filters, its page (``after``) and its size."""

    workflow: str | None = None
    status: str | None = None
    version: str | None = None
    prefix: str | None = None
    since: datetime | None = None
    before: datetime | None = None
    after: str | None = None
    limit: int = DEFAULT_LIMIT
    #: newest (the default), oldest or id (see ``Engine.list_runs``).
    order: str = "newest"

    def query(self, **changes: object) -> str:
        """This list's query string (``?...``, or ``""``), with ``changes`` applied."""
        changed = replace(self, **changes)  # type: ignore[arg-type]
        pairs = [
            ("workflow", changed.workflow),
            ("status", changed.status),
            ("version", changed.version),
            ("prefix", changed.prefix),
            ("since", format_time_input(changed.since) or None),
            ("before", format_time_input(changed.before) or None),
            ("after", changed.after),
            ("limit", str(changed.limit) if changed.limit != DEFAULT_LIMIT else None),
            ("order", changed.order if changed.order != "newest" else None),
        ]
        kept = [(k, v) for k, v in pairs if v is not None]
        return "?" + urlencode(kept) if kept else ""


def parse_run_filters(params: QueryParams) -> RunFilters:
    """The runs list's filters from its query string, checked."""
    status = _single(params, "status")
    if status is not None and status not in RUN_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(RUN_STATUSES)} (got {status!r:.60})")
    limit_text = _single(params, "limit")
    limit = DEFAULT_LIMIT
    if limit_text is not None:
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
            raise BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}")
        limit = int(limit_text)
    order = _single(params, "order") or "newest"
    if order not in ORDERS:
        raise BadRequest(f"order must be one of {', '.join(ORDERS)} (got {order!r:.60})")
    since = parse_time(_single(params, "since"), "since")
    before = parse_time(_single(params, "before"), "before")
    return RunFilters(
        workflow=_bounded(_single(params, "workflow"), "workflow", MAX_NAME),
        status=status,
        version=_bounded(_single(params, "version"), "version", MAX_NAME),
        prefix=_bounded(_single(params, "prefix", nul=True), "prefix", MAX_RUN_ID),
        since=since,
        before=before,
        after=_bounded(_single(params, "after", nul=True), "after", MAX_RUN_ID),
        limit=limit,
        order=order,
    )


def parse_run_id(params: QueryParams | Mapping[str, Sequence[str]]) -> str:
    """The ``id`` parameter: a run id (1 to 200 characters)."""
    run_id = _bounded(_single(params, "id", nul=True), "the run id", MAX_RUN_ID)
    if run_id is None:
        raise BadRequest("the run id (parameter 'id') is missing")
    return run_id


def parse_step(params: QueryParams | Mapping[str, Sequence[str]]) -> str | None:
    """The optional ``step`` parameter: a step key (1 to 200 characters), or None."""
    return _bounded(_single(params, "step", nul=True), "the step", MAX_RUN_ID)


def parse_schedule_name(params: QueryParams | Mapping[str, Sequence[str]]) -> str:
    """The ``name`` parameter: a schedule's name (1 to 500 characters, no NUL)."""
    name = _bounded(_single(params, "name"), "the schedule name", MAX_NAME)
    if name is None:
        raise BadRequest("the schedule name (parameter 'name') is missing")
    return name


def parse_choice(
    params: QueryParams | Mapping[str, Sequence[str]], name: str, choices: Sequence[str]
) -> str:
    """A parameter that must be one of ``choices``."""
    value = _single(params, name)
    if value is None or value not in choices:
        raise BadRequest(f"{name} must be one of {', '.join(choices)} (got {value!r:.60})")
    return value


async def read_form(request: Request) -> dict[str, list[str]]:
    """The request's ``application/x-www-form-urlencoded`` body, at most 16 KiB."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise BadRequest("a form must be sent as application/x-www-form-urlencoded")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadRequest(f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"the form cannot be read: {exc}") from None
    form: dict[str, list[str]] = {}
    for key, value in pairs:
        form.setdefault(key, []).append(value)
    return form
