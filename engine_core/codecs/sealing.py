"""Sealing: every user value as ``Engine(codec=...)`` keeps it at rest, and back.

A value is sealed to ``bytes``: the codec's output for its JSON (UTF-8). No JSON-shaped
value is ``bytes``, so a sealed value is told from a plain one by its type alone, and a
store keeps it as it is (MongoDB as BSON binary). ``None`` stays ``None``: it holds
nothing. An error keeps its ``type``, ``code`` and step fields readable; its ``message``
and ``stack`` (which repeats the message) go sealed together under ``"sealed"`` (base64
text: an error is JSON-shaped). Names, statuses, times and ids are never sealed.

Opening a value this process cannot decode (no codec, or a key it does not hold) raises
:class:`~engine_core.CodecError`, or, where the reader only shows values
(:func:`showing_undecodable`, or a read that must not fail for one run among many),
gives an :class:`Undecoded` in its place, which seals back to what was stored.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from engine_core.codecs.payload import PayloadCodec
from engine_core.errors import CodecError
from engine_core.records import AttemptEntry, RunRecord, StepRecord, Unread

#: The key of an error's sealed message and stack.
SEALED = "sealed"
#: What a value that cannot be decoded shows as.
ENCRYPTED = "encrypted"
_TEXT_FIELDS = ("message", "stack")
_SHOWING: ContextVar[bool] = ContextVar("pikku_showing_undecodable", default=False)
_R = TypeVar("_R")


@contextlib.contextmanager
def showing_undecodable() -> Iterator[None]:
    """Within it, reads give an :class:`Undecoded` ("encrypted") for a value they cannot
    decode instead of raising :class:`~engine_core.CodecError` (the CLI and dashboard
    read this way). Tasks started inside inherit it."""
    token = _SHOWING.set(True)
    try:
        yield
    finally:
        _SHOWING.reset(token)


class Undecoded(Unread):
    """A stored value this process cannot decode: the text "encrypted", holding what was
    stored (``stored``, written back unchanged) and why (``error``)."""

    error: CodecError

    def __new__(cls, stored: Any, error: CodecError) -> Undecoded:
        shown = super().__new__(cls, ENCRYPTED, stored)
        assert isinstance(shown, Undecoded)
        shown.error = error
        return shown


def check_decoded(*values: Any) -> None:
    """Raise the :class:`~engine_core.CodecError` of the first :class:`Undecoded` among
    ``values`` (an error dict's message counts), unless within
    :func:`showing_undecodable`."""
    if _SHOWING.get():
        return
    for value in values:
        if isinstance(value, dict):
            value = value.get("message")
        if isinstance(value, Undecoded):
            raise value.error


def copy_record(record: _R) -> _R:
    """A shallow copy of ``record`` (a frozen one too), made without running its
    constructor's checks again."""
    twin: _R = object.__new__(type(record))
    twin.__dict__.update(record.__dict__)
    return twin


class Sealer:
    """Seals and opens values and the records holding them with ``codec`` (None: values
    are written plain, and a sealed one read raises or shows as :class:`Undecoded`).

    ``seal_step`` hands the same sealed copy back for a record it sealed lately: the
    engine never changes a record it handed to a write, and a store may know a record it
    saw before by its identity (``pikku_mongo``'s journal texts)."""

    def __init__(self, codec: PayloadCodec | None, cached: int = 4096) -> None:
        self.codec = codec
        self._cached = cached
        self._steps: dict[int, tuple[StepRecord, StepRecord]] = {}

    # ---- values ---------------------------------------------------------------------

    def seal(self, value: Any) -> Any:
        """``value`` as stored: sealed bytes with a codec (None kept), else itself."""
        if value is None or type(value) is bytes:
            return value
        if isinstance(value, Unread):
            return value.stored
        if self.codec is None:
            return value
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return self.codec.encode(text.encode("utf-8", "surrogatepass"))

    def open(self, value: Any, strict: bool = True) -> Any:
        """The value ``value`` (as stored) holds. One that cannot be decoded raises
        :class:`~engine_core.CodecError` when ``strict`` (outside
        :func:`showing_undecodable`), else is an :class:`Undecoded`."""
        if type(value) is not bytes:
            return value
        try:
            if self.codec is None:
                raise CodecError(
                    "a stored value was encoded by a codec and this engine has none: pass "
                    "Engine(store, codec=...) with the codec that wrote it"
                )
            data = _decoded(self.codec, value)
            return json.loads(data.decode("utf-8", "surrogatepass"))
        except CodecError as exc:
            if strict and not _SHOWING.get():
                raise
            return Undecoded(value, exc)

    def seal_error(self, error: dict[str, Any] | None) -> dict[str, Any] | None:
        """``error`` with its message and stack sealed under ``"sealed"``."""
        if not error:
            return error
        message = error.get("message")
        if type(message) is Undecoded:
            return {**_without_text(error), SEALED: message.stored}
        if self.codec is None or SEALED in error or not any(f in error for f in _TEXT_FIELDS):
            return error
        text = json.dumps({f: error[f] for f in _TEXT_FIELDS if f in error})
        sealed = self.codec.encode(text.encode("utf-8", "surrogatepass"))
        return {**_without_text(error), SEALED: base64.b64encode(sealed).decode("ascii")}

    def open_error(self, error: dict[str, Any] | None, strict: bool = True) -> Any:
        """``error`` with its sealed message and stack back in place (see :meth:`open`)."""
        if not error or SEALED not in error:
            return error
        rest = {k: v for k, v in error.items() if k != SEALED}
        try:
            if self.codec is None:
                raise CodecError(
                    "a stored error message was encoded by a codec and this engine has "
                    "none: pass Engine(store, codec=...) with the codec that wrote it"
                )
            data = _decoded(self.codec, base64.b64decode(error[SEALED]))
            return {**rest, **json.loads(data.decode("utf-8", "surrogatepass"))}
        except CodecError as exc:
            if strict and not _SHOWING.get():
                raise
            return {**rest, "message": Undecoded(error[SEALED], exc)}

    # ---- records --------------------------------------------------------------------

    def seal_step(self, step: StepRecord) -> StepRecord:
        """``step`` as stored (itself when nothing in it is sealed)."""
        held = self._steps.get(id(step))
        if held is not None and held[0] is step:
            return held[1]
        sealed = self._step(step, self.seal, self.seal_error)
        if sealed is not step and self._cached:
            self._steps[id(step)] = (step, sealed)
            if len(self._steps) > self._cached:
                del self._steps[next(iter(self._steps))]  # the oldest
        return sealed

    def open_step(self, step: StepRecord, strict: bool = True) -> StepRecord:
        """``step`` with its values opened (see :meth:`open`)."""
        return self._step(
            step, lambda v: self.open(v, strict), lambda e: self.open_error(e, strict)
        )

    def _step(self, step: StepRecord, value: Any, error: Any) -> StepRecord:
        result, payload, err = value(step.result), value(step.payload), error(step.error)
        history = step.history
        if any(e.error for e in history):
            changed = [_entry(e, error(e.error)) for e in history]
            if any(a is not b for a, b in zip(changed, history, strict=True)):
                history = changed
        if (
            result is step.result
            and payload is step.payload
            and err is step.error
            and history is step.history
        ):
            return step
        twin = copy_record(step)
        twin.result, twin.payload, twin.error, twin.history = result, payload, err, history
        return twin

    def seal_run(self, run: RunRecord) -> RunRecord:
        """``run`` as stored: its input, output, error and journal sealed."""
        return self._run(run, self.seal, self.seal_error, self.seal_step)

    def open_run(self, run: RunRecord, strict: bool = True) -> RunRecord:
        """``run`` with its values and its journal's opened (see :meth:`open`)."""
        return self._run(
            run,
            lambda v: self.open(v, strict),
            lambda e: self.open_error(e, strict),
            lambda s: self.open_step(s, strict),
        )

    def _run(self, run: RunRecord, value: Any, error: Any, step: Any) -> RunRecord:
        inp, out, err = value(run.input), value(run.output), error(run.error)
        journal = run.journal
        if journal:
            journal = {k: step(s) for k, s in journal.items()}
            if all(journal[k] is s for k, s in run.journal.items()):
                journal = run.journal
        if inp is run.input and out is run.output and err is run.error and journal is run.journal:
            return run
        twin = copy_record(run)
        twin.input, twin.output, twin.error, twin.journal = inp, out, err, journal
        return twin

    def seal_changes(self, changes: dict[str, Any]) -> dict[str, Any]:
        """A step update's changes (StepRecord field names to values) as stored."""
        if not any(k in changes for k in ("result", "payload", "error")):
            return changes
        sealed = dict(changes)
        for name in ("result", "payload"):
            if name in sealed:
                sealed[name] = self.seal(sealed[name])
        if "error" in sealed:
            sealed["error"] = self.seal_error(sealed["error"])
        return sealed

    def seal_entry(self, entry: AttemptEntry | None) -> AttemptEntry | None:
        """A history entry as stored (its error sealed)."""
        if entry is None or not entry.error:
            return entry
        return _entry(entry, self.seal_error(entry.error))

    def seal_field(self, record: _R, name: str) -> _R:
        """``record`` with its value field ``name`` sealed (a copy when it changes)."""
        value = getattr(record, name)
        sealed = self.seal(value)
        if sealed is value:
            return record
        twin = copy_record(record)
        object.__setattr__(twin, name, sealed)  # a frozen record too (StreamEntry)
        return twin

    def open_field(self, record: _R, name: str, strict: bool = True) -> _R:
        """``record`` with its value field ``name`` opened (see :meth:`open`)."""
        value = getattr(record, name)
        opened = self.open(value, strict)
        if opened is value:
            return record
        twin = copy_record(record)
        object.__setattr__(twin, name, opened)
        return twin


def _entry(entry: AttemptEntry, error: dict[str, Any] | None) -> AttemptEntry:
    if error is entry.error:
        return entry
    twin = copy_record(entry)
    twin.error = error
    return twin


def _without_text(error: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in error.items() if k not in _TEXT_FIELDS}


def _decoded(codec: PayloadCodec, data: bytes) -> bytes:
    """``codec.decode(data)``, any failure a :class:`~engine_core.CodecError`."""
    try:
        return codec.decode(data)
    except CodecError:
        raise
    except Exception as exc:
        raise CodecError(
            f"the codec could not decode a stored value: {type(exc).__name__}: {exc}"
        ) from exc
