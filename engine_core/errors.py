"""Every error the engine raises on purpose; all subclass :class:`EngineError`."""

from __future__ import annotations

from typing import Any


class EngineError(Exception):
    """Base class of every error raised by the engine."""


class WorkflowRunFailedError(EngineError):
    """The run ended ``failed``, ``compensated`` or ``compensation_failed``."""

    def __init__(self, message: str, *, run_id: str = "", error: dict[str, Any] | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.error = error


class WorkflowRunCancelledError(EngineError):
    """The run was cancelled."""

    def __init__(self, message: str, *, run_id: str = "", error: dict[str, Any] | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.error = error


class StepFailedError(EngineError):
    """A step failed for good: every attempt it was allowed has failed."""

    def __init__(self, step: str, attempts: int, error_type: str, message: str):
        super().__init__(
            f"step {step!r} failed after {attempts} attempt(s): {error_type}: {message}"
        )
        self.step = step
        self.attempts = attempts
        self.error_type = error_type
        self.error_message = message


class RunNotFoundError(EngineError, LookupError):
    """No run has this id."""


class StepNotFoundError(EngineError, ValueError):
    """The run has no step of this key (``engine.fork(from_step=...)``)."""


class RunNotActiveError(EngineError):
    """The run has ended (completed, failed, cancelled, ...): it takes no more events or
    updates (nothing was stored), or it ended without setting the value asked for or
    without answering the update waited for."""

    def __init__(self, message: str, *, run_id: str = "", status: str = ""):
        super().__init__(message)
        self.run_id = run_id
        self.status = status


class InvalidOptionError(EngineError, ValueError):
    """An option was given a value it does not take (an ``order``, a ``catch_up``, a
    dashboard ``secret`` of the wrong type...); the message says what to pass."""


class WorkflowNotRegisteredError(EngineError, LookupError):
    """No workflow (or step function) of this name is registered on this engine."""


class NotSerializableError(EngineError, TypeError):
    """A value that has to be checkpointed is not JSON/BSON-serialisable."""


class CodecError(EngineError, ValueError):
    """A codec (``Engine(codec=...)``, see ``engine_core.codecs``) could not decode a
    stored value (for ``AesGcmCodec``: a key id it does not hold, or data that fails
    authentication), or was built with keys it cannot use. The message names the key id;
    add the key to the codec's ``keys`` (rotation keeps old keys for decoding)."""


class InvalidDurationError(EngineError, ValueError):
    """A duration could not be understood."""


class InvalidInputError(EngineError, ValueError):
    """A workflow's input does not fit the type its annotation declares; nothing was
    recorded. ``errors`` lists what did not fit (pydantic's ``errors()`` when it read the
    input, else the one message)."""

    def __init__(self, message: str, *, errors: list[Any] | None = None):
        super().__init__(message)
        self.errors: list[Any] = errors if errors is not None else [message]


class InvalidRunIdError(EngineError, ValueError):
    """A run id is not a usable string, or belongs to another workflow."""


class InvalidNameError(EngineError, ValueError):
    """A step, event or workflow name is not a usable string."""


class InvalidLimitError(EngineError, ValueError):
    """A count or a page size is not a usable integer."""


class StoreUnavailableError(EngineError):
    """The store could not be reached (its server is down, failing over, or the network
    is), and did not come back within the time the caller allowed. Stores raise it for
    transient failures they gave up retrying; the engine waits such outages out inside
    passes, workers and recovery, and raises it only from a client call. From
    ``engine.start``, ``run_id`` is the id the run has if it was recorded: start again
    with it to start the run exactly once."""

    def __init__(self, message: str = "", *, run_id: str | None = None):
        super().__init__(message)
        self.run_id = run_id


class RecordTooLargeError(EngineError, ValueError):
    """A store refused a record as larger than one of its records may be. Nothing was
    written, and the same write would be refused again. Stores raise a subclass (for
    MongoDB, ``pikku_mongo.errors.DocumentTooLargeError``); a step whose outcome is
    refused fails with it."""


class ValueTooLargeError(NotSerializableError, RecordTooLargeError):
    """A value is larger than the store keeps in one value (``MongoStore(max_value=...)``,
    256 MiB by default; as JSON, before a codec). Nothing was written: a larger input,
    payload or event raises it at the call; a larger step result fails its step, not
    retried (the same result would be refused again). Store large data elsewhere and
    checkpoint a reference to it."""


class QueueNotDeclaredError(EngineError, ValueError):
    """A run was started on a queue this engine did not declare with ``engine.queue``."""


class DuplicateRunError(EngineError):
    """A run that has not ended holds the same ``dedup_id`` on the same queue; ``.run_id``
    names it. Nothing was recorded."""

    def __init__(self, message: str, *, run_id: str):
        super().__init__(message)
        self.run_id = run_id


class WorkflowDeadlineExceededError(WorkflowRunCancelledError):
    """The run passed its ``deadline`` and was cancelled, with its unfinished children."""


class InvalidScheduleError(EngineError, ValueError):
    """A schedule's timing is unusable: a bad cron expression, an unknown time zone,
    neither or both of ``cron`` and ``every``, or a bad ``every`` duration."""


class ScheduleNotFoundError(EngineError, LookupError):
    """No schedule has this name."""


class NonDeterminismError(EngineError):
    """A replay of a run parted from what the run recorded: the code reached a recorded
    step as another kind or callable, reached steps in another order, or started a new
    step before reaching one recorded earlier. The run was suspended; ``.step`` names
    where code and record part ways, ``.recorded`` and ``.found`` what each holds."""

    def __init__(
        self, message: str, *, step: str = "", recorded: str = "", found: str = "", reason: str = ""
    ):
        super().__init__(message)
        self.step = step
        self.recorded = recorded
        self.found = found
        self.reason = reason


class StreamTooLargeError(EngineError, ValueError):
    """A stream write went past the per-stream limit (see ``engine_core.streams``:
    at most ``STREAM_MAX_ENTRIES`` entries, each at most ``STREAM_MAX_ENTRY_BYTES`` of
    JSON). Nothing was written; split the data over several streams or entries."""


class StreamClosedError(EngineError, ValueError):
    """A write to a stream that was closed (``ctx.close_stream``). Nothing was written;
    write to another stream."""


class StreamConflictError(EngineError, ValueError):
    """A workflow body's stream position holds an entry a step wrote: the body and its
    steps must write different streams (a body's positions are its own, counted again on
    each replay)."""


class UpdateRejectedError(EngineError, ValueError):
    """The run rejected the update (``req.reject(reason)`` in its body); ``.reason``
    holds why. Asking again with the same ``update_id`` raises it again."""

    def __init__(self, message: str, *, reason: str = "", update_id: str = "", run_id: str = ""):
        super().__init__(message)
        self.reason = reason
        self.update_id = update_id
        self.run_id = run_id


class UpdateAlreadyAnsweredError(EngineError, RuntimeError):
    """A workflow body answered an update it had answered already (a second ``reply``
    or ``reject``): an update is answered once. Nothing more was stored."""
