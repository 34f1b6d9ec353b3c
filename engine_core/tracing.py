"""W3C trace context for runs: each run owns one trace, each step attempt is a span in it.

Only the OpenTelemetry API is used; without an SDK configured every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_propagator = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("engine_core")


def parse_traceparent(value: object) -> tuple[str, str] | None:
    """(trace id, span id) of a valid ``traceparent``, else None."""
    if not isinstance(value, str):
        return None
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "00" or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if set(parts[1]) == {"0"} or set(parts[2]) == {"0"}:
        return None
    return parts[1], parts[2]


def new_run_traceparent() -> str:
    """The caller's trace when it is inside a sampled or recording span, else a new one."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent``, or None."""
    parsed = parse_traceparent(traceparent)
    return parsed[0] if parsed else None


#: The environment variable that makes OpenTelemetry load a provider by itself; the
#: environment is read once (it is set before a process starts).
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"
_env_provider: bool | None = None
_configured = False


def tracing_configured() -> bool:
    """Whether an OpenTelemetry SDK is configured (spans would be recorded). Runs for
    every step attempt, so it looks at the API's global (set once, by
    ``set_tracer_provider``) rather than through ``get_tracer_provider``, which reads the
    environment each time."""
    global _configured, _env_provider
    if _configured:
        return True
    if _env_provider is None:
        _env_provider = _ENV_PROVIDER in os.environ
    if not hasattr(trace, "_TRACER_PROVIDER"):  # an API without that global: ask it
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    if getattr(trace, "_TRACER_PROVIDER", None) is None and not _env_provider:
        return False
    _configured = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _configured


@contextmanager
def attempt_span(traceparent: str | None, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
    """A span for one step attempt, a child of the run's stored trace."""
    if not tracing_configured():
        # No SDK configured: every span would be a no-op, so skip building one.
        yield trace.INVALID_SPAN
        return
    carrier = {"traceparent": traceparent} if traceparent else {}
    context = _propagator.extract(carrier)
    with _tracer.start_as_current_span(
        name,
        context=context,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def record_failure(span: Span, exc: BaseException) -> None:
    """Mark a span failed with the exception that failed the attempt."""
    if span.is_recording():
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


_run_context: ContextVar[tuple[str, str | None, str | None] | None] = ContextVar(
    "engine_core_run_context", default=None
)
_step_context: ContextVar[tuple[str, str] | None] = ContextVar(
    "engine_core_step_log_context", default=None
)


@contextmanager
def run_log_context(
    run_id: str, traceparent: str | None, workflow: str | None = None
) -> Iterator[None]:
    """Within: log records from this task carry the run's id, trace id and workflow
    (a workflow not given is kept from an enclosing context of the same run: a job run
    for a pass of this process knows it from there)."""
    current = _run_context.get()
    if workflow is None and current is not None and current[0] == run_id:
        workflow = current[2]
    reset = _run_context.set((run_id, trace_id_of(traceparent), workflow))
    try:
        yield
    finally:
        _run_context.reset(reset)


def current_workflow(run_id: str) -> str | None:
    """The workflow of the run whose log context this task is in, if it is ``run_id``'s."""
    current = _run_context.get()
    return current[2] if current is not None and current[0] == run_id else None


def enter_step_log(run_id: str, step: str) -> Token[tuple[str, str] | None]:
    """While a step attempt of ``run_id`` runs, its records name ``step`` (until
    :func:`leave_step_log` with the token)."""
    return _step_context.set((run_id, step))


def leave_step_log(token: Token[tuple[str, str] | None]) -> None:
    _step_context.reset(token)


class TraceIdFilter(logging.Filter):
    """Adds ``run_id``, ``trace_id``, ``workflow`` and ``step`` to every record logged
    while a run's pass or step runs (``"-"`` elsewhere), for formats such as
    ``"%(trace_id)s %(workflow)s %(step)s %(message)s"``; the engine's lifecycle lines
    bring their own, kept.

    Attach it to a handler: ``handler.addFilter(TraceIdFilter())``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Add ``run_id`` and ``trace_id`` to ``record``; always keep it."""
        current = _run_context.get()
        # A lifecycle line names its run itself (``extra=``): kept, "-" for None.
        given = getattr(record, "run_id", None)
        run_id = given or (current[0] if current else "-")
        record.run_id = run_id
        ours = current is not None and run_id == current[0]
        if not ours:
            record.trace_id = getattr(record, "trace_id", None) or "-"
            record.workflow = getattr(record, "workflow", None) or "-"
        else:
            assert current is not None
            record.trace_id = getattr(record, "trace_id", None) or current[1] or "-"
            record.workflow = getattr(record, "workflow", None) or current[2] or "-"
        step = _step_context.get()
        here = step[1] if step is not None and step[0] == run_id else None
        record.step = getattr(record, "step", None) or here or "-"
        return True
