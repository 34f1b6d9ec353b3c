"""W3C trace context for runs: each run owns one trace, each step attempt is a span in it.

Only the OpenTelemetry API is used; without an SDK configured every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


_run_context: ContextVar[tuple[str, str | None] | None] = ContextVar(
    "engine_core_run_context", default=None
)


@contextmanager
def run_log_context(run_id: str, traceparent: str | None) -> Iterator[None]:
    """Within: log records from this task carry the run's id and trace id."""
    reset = _run_context.set((run_id, trace_id_of(traceparent)))
    try:
        yield
    finally:
        _run_context.reset(reset)


class TraceIdFilter(logging.Filter):
    """Adds ``run_id`` and ``trace_id`` to every record logged while a run's pass or step
    runs (``"-"`` elsewhere), for formats such as ``"%(trace_id)s %(message)s"``; the
    engine's lifecycle lines bring their own (and ``workflow`` and ``step``), kept.

    Attach it to a handler: ``handler.addFilter(TraceIdFilter())``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Add ``run_id`` and ``trace_id`` to ``record``; always keep it."""
        current = _run_context.get()
        # A lifecycle line names its run itself (``extra=``): kept, "-" for None.
        given = getattr(record, "run_id", None)
        record.run_id = given or (current[0] if current else "-")
        if given is not None and given != (current[0] if current else None):
            record.trace_id = getattr(record, "trace_id", None) or "-"
        else:
            record.trace_id = getattr(record, "trace_id", None) or (
                (current[1] or "-") if current else "-"
            )
        record.workflow = getattr(record, "workflow", None) or "-"
        record.step = getattr(record, "step", None) or "-"
        return True
