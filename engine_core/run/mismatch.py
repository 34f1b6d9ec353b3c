"""A recorded value that no longer fits the type the code declares for it (a changed
model under live runs): :class:`ValueMismatch`, raised by :func:`as_declared` where a
workflow body is handed a recorded value."""

from __future__ import annotations

import json
from typing import Any

from engine_core.common.convert import from_json
from engine_core.common.lifecycle_log import one_line
from engine_core.errors import InvalidInputError


class ValueMismatch(BaseException):
    """A recorded value does not fit the type the code now declares for it: the run is
    suspended with the error, as a divergence is (a ``BaseException``: a workflow body's
    ``except Exception`` must not take it for its own failure). ``step``: the step whose
    value it is (``"(input)"`` for the run's input); ``recorded`` and ``found`` say what
    the record holds and what the code declares, one line each."""

    REASON = "value no longer fits the declared type"

    def __init__(
        self, what: str, declared: Any, exc: BaseException, *, step: str, value: Any = None
    ) -> None:
        name = getattr(declared, "__name__", str(declared))
        super().__init__(f"{what} does not fit the type the code declares ({name}): {exc}")
        self.step = step
        self.recorded = one_line(json.dumps(value, default=str, sort_keys=True), 300)
        self.found = one_line(f"declares {name}: {_problems(exc)}", 300)


#: The "step" a run's input stands at when it no longer fits the declared type.
INPUT_STEP = "(input)"


def _problems(exc: BaseException) -> str:
    """What does not fit, one line: pydantic's errors by field, else the message."""
    listed = getattr(exc, "errors", None)
    try:
        errors = listed() if callable(listed) else None
    except Exception:  # not pydantic's ``errors()``
        errors = None
    if not isinstance(errors, list) or not errors:
        return str(exc)
    return "; ".join(
        f"{'.'.join(map(str, e.get('loc', ()))) or 'value'}: {e.get('msg', '')}" for e in errors
    )


def as_declared(value: Any, declared: Any, what: str, *, step: str) -> Any:
    """``value`` as recorded, given as the ``declared`` type (:class:`ValueMismatch`,
    naming ``step``)."""
    try:
        return from_json(value, declared)
    except (ValueError, TypeError) as exc:
        raise ValueMismatch(what, declared, exc, step=step, value=value) from exc


def read_input(workflow: str, value: Any, declared: Any) -> Any:
    """A run's ``value`` as its input, of the ``declared`` type: else
    :class:`InvalidInputError`, carrying what does not fit."""
    try:
        return from_json(value, declared)
    except (ValueError, TypeError) as exc:
        listed: Any = getattr(exc, "errors", None)  # pydantic's ValidationError lists them
        name = getattr(declared, "__name__", str(declared))
        raise InvalidInputError(
            f"input of workflow {workflow!r} does not fit {name}: {exc}",
            errors=listed() if callable(listed) else None,
        ) from exc
