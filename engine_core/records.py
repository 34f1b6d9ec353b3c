"""The stored shapes of runs, steps, events and leases, shared by every store."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

RunState = Literal[
    "queued",
    "running",
    "suspended",
    "completed",
    "failed",
    "cancelled",
    "compensating",
    "compensated",
    "compensation_failed",
]
StepState = Literal["pending", "running", "scheduled", "succeeded", "failed"]
StepKind = Literal[
    "inline", "dispatch", "sleep", "event", "child", "compensation", "patch", "update", "reply"
]

#: A run in one of these states is owed passes: its body still has work to do.
ACTIVE: tuple[RunState, ...] = ("running", "compensating")
#: A run in one of these states never moves again.
TERMINAL: frozenset[str] = frozenset(
    {"completed", "failed", "cancelled", "compensated", "compensation_failed"}
)
#: The endings ``engine.result`` reports as :class:`~engine_core.WorkflowRunFailedError`.
FAILED_ENDINGS: frozenset[str] = frozenset({"failed", "compensated", "compensation_failed"})
#: Run states a cancel may act on (a suspend acts on ``running`` only).
STOPPABLE: tuple[RunState, ...] = ("queued", "running", "suspended")


class Unread(str):
    """A stored value a read did not give back, shown as its text: one this process
    cannot decode ("encrypted"), or one a list left where the store keeps it apart
    ("offloaded, N bytes"). A write of a record holding it stores what was stored
    (``stored``), unchanged."""

    stored: Any

    def __new__(cls, text: str, stored: Any = None) -> Unread:
        shown = super().__new__(cls, text)
        shown.stored = shown if stored is None else stored
        return shown

    # Copied records share it (a copy would call ``__new__`` with its text alone).
    def __copy__(self) -> Unread:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Unread:
        return self


class Apart(Unread):
    """A value a store keeps apart from its record (MongoStore: in GridFS, past its
    ``offload_over``), referenced from it; the store's ``fetch_values`` gives it back."""


#: Patch markers are keyed apart from steps (a step's name has its ``:`` escaped in its
#: key): ``patched:`` and the patch id.
PATCH_PREFIX = "patched:"


@dataclass
class InflightStep:
    """A step attempt a pass has started and not yet recorded an outcome for."""

    attempt: int
    started_at: datetime
    # A step's first attempt has no record yet: its order and batch (as a record would
    # hold them) are kept here until it has, so a fork can start from it.
    order: int | None = None
    group: int | None = None


@dataclass
class RunRecord:
    """One workflow run: the control plane of its passes."""

    run_id: str
    workflow: str
    status: RunState
    input: Any
    created_at: datetime
    updated_at: datetime
    output: Any = None
    error: dict[str, Any] | None = None
    parent_run_id: str | None = None
    parent_step: str | None = None
    wire: dict[str, Any] = field(default_factory=dict)
    # A pass is owed: set by every trigger, cleared when a pass begins.
    pending_pass: bool = True
    # Passes begun so far; the first pass knows there are no steps to load.
    passes: int = 0
    # Bumped by each pass as it begins; that pass's writes are fenced by it.
    token: int = 0
    inflight: dict[str, InflightStep] = field(default_factory=dict)
    # A pass began and has not settled: if its process died, only recovery sees it.
    open_pass: bool = False
    # Who holds the run's lease (the pass in progress), and until when.
    lease_holder: str | None = None
    lease_expires_at: datetime | None = None
    # Step outcomes a pass recorded on the run itself (one write per step) and not yet
    # copied to their step records; read through ``journal.merged_steps``.
    journal: dict[str, StepRecord] = field(default_factory=dict)
    # Steps settled outside the passes (a worker, a child run) since the last pass began:
    # what a pass that remembers the steps of its previous pass must read again.
    changed: list[str] = field(default_factory=list)
    # How this run's step keys and child run ids are made (see ``engine_core.run.keys``):
    # runs stored before names were escaped keep replaying with the old scheme.
    key_scheme: int = 1
    # Flow control (``engine.start(queue=..., ...)``). A ``queued`` run waits for
    # ``not_before`` (a delay), then in its queue's line for admission.
    queue: str | None = None
    queue_key: str | None = None
    priority: int = 0
    dedup_id: str | None = None
    not_before: datetime | None = None
    deadline_at: datetime | None = None
    #: The ``deadline`` duration the run was started with (seconds): a retry re-arms a
    #: fresh window of it (``deadline_at`` is the due time of the current window).
    deadline_s: float | None = None
    # The label of the workflow's code that started the run (``version=``), if any.
    version: str | None = None
    #: A fork's origin (``engine.fork``): ``{"run_id", "step"}``, the run it was forked
    #: from and the first step it runs anew; None for a run that is not a fork.
    forked_from: dict[str, str] | None = None
    #: On a queue declared ``fairness="key"``: the run waits in its line by turn (keys in
    #: turn among equal priorities), ``queue_turn`` being the turn its store gave it when
    #: it joined the line (see :class:`QueueState`).
    fair: bool = False
    queue_turn: int | None = None
    #: A debounced start's key (``engine.start(debounce_key=...)``): the run is the
    #: pending run of its (workflow, key) until its delay (``not_before``) is released.
    debounce_key: str | None = None
    #: How long the run is kept once it ended (seconds; None: for ever), as the process
    #: that started it knew: the process that ends it may know better (its workflow's
    #: ``retention=``). See docs/guides/data-at-rest.md.
    retention: float | None = None
    #: When the run (ended) may be deleted with all it owns; None while it has not ended
    #: or when it is kept for ever.
    expire_at: datetime | None = None


@dataclass
class QueueState:
    """What a queue's admissions need to know across the fleet, in one record that
    admitters replace by compare-and-set on ``version``. Its size is bounded whatever
    the limits: the admitted runs themselves are counted in the store, not listed here
    (see ``engine_core.flow.admission``)."""

    name: str
    version: int = 0
    #: With ``concurrency``: at least as many as the queue's admitted runs that have not
    #: ended (each admission adds to it; a count in the store sets it exactly when the
    #: limit would bind).
    held: int = 0
    #: Runs a round reserved slots for and may not have moved out of the line yet (at
    #: most one round's batch): they count as admitted until seen moved.
    reserved: list[str] = field(default_factory=list)
    #: Admissions within the rate window as (time, count), oldest first, in a bounded
    #: number of entries: merged entries carry the later time, so they count as long
    #: as, or longer than, each of their admissions would (never more admitted).
    window: list[tuple[datetime, int]] = field(default_factory=list)
    #: Admissions counted per minute (Unix minute, count), the last two minutes.
    minutes: list[tuple[int, int]] = field(default_factory=list)
    #: Runs an earlier version admitted and listed here (with their keys): counted
    #: while they have not ended, never added to.
    legacy: dict[str, str | None] = field(default_factory=dict)
    #: With ``fairness="key"``: the highest turn admitted so far. A run joining the line
    #: takes a turn one past its key's last, and at least this one, so a key that was
    #: idle waits its turn with the others instead of going first.
    turn: int = 0
    #: With ``key_rate``: admissions per key that the keys' windows
    #: (:class:`KeyWindow`) may not hold yet, as (key, time, count, the state version
    #: that admitted them), one entry per key at most (see ``engine_core.flow.rate_windows``).
    key_unsaved: list[tuple[str | None, datetime, int, int]] = field(default_factory=list)


@dataclass
class KeyWindow:
    """One key's admissions within a queue's ``key_rate`` window, as (time, count) in a
    bounded number of entries, and the version of the queue's state whose admissions
    it holds (every admission of that version and earlier)."""

    window: list[tuple[datetime, int]] = field(default_factory=list)
    version: int = 0


@dataclass(frozen=True)
class LinePage:
    """Where the next page of a queue's line starts: the last run read."""

    priority: int
    created_at: datetime
    run_id: str
    #: The run's turn, on a queue with ``fairness="key"``.
    turn: int | None = None


@dataclass
class AttemptEntry:
    """One line of a step's timeline."""

    attempt: int
    status: StepState
    at: datetime
    started_at: datetime | None = None
    error: dict[str, Any] | None = None


@dataclass
class StepRecord:
    """A step's latest state, plus its attempt history."""

    run_id: str
    key: str
    kind: StepKind
    status: StepState
    attempts: int = 0
    max_attempts: int = 1
    result: Any = None
    error: dict[str, Any] | None = None
    # When a scheduled step is due: a wake-up, a retry, an event timeout or a queue job.
    due_at: datetime | None = None
    scheduled_at: datetime | None = None
    updated_at: datetime | None = None
    ended_at: datetime | None = None
    retry_delay: float | str | None = None
    timeout: float | None = None
    # Dispatched steps: the step function and what it is called with.
    function: str | None = None
    payload: Any = None
    # A stopped run's queue jobs are halted so no worker claims them.
    halted: bool = False
    claim_holder: str | None = None
    claim_expires_at: datetime | None = None
    child_run_id: str | None = None
    event: str | None = None
    compensable: bool = False
    # False between a worker (or a child run) settling this step and its run being
    # told; a crash in between leaves it False for recovery to find.
    notified: bool = True
    # The run's trace, so a worker's span joins it without reading the run.
    traceparent: str | None = None
    history: list[AttemptEntry] = field(default_factory=list)
    # When the run first started this step, among its steps (0, 1, ...), and what it
    # ran (see ``engine_core.run.divergence``); None on records older than the check.
    order: int | None = None
    ran: str | None = None
    # The batch of tasks the body's root created together that the step ran under
    # (see ``engine_core.run.branches``); None for a step the root itself reached.
    group: int | None = None
    # First started by a task the body's branch adopted (``adopting_tasks``): such
    # tasks reach their steps in no set order, so only its kind and callable are judged.
    loose: bool = False
    # Where the branch it ran in was made: how many steps of its own each branch on the
    # way down from the body had reached when it made the next ("2", "2/0"; None for the
    # body's own steps). A replay that reaches the step elsewhere has moved it.
    made_after: str | None = None
    # A dispatched step of a fork that keeps its original's idempotency keys: the run
    # whose keys it uses (the worker running it does not read the run).
    idempotency_of: str | None = None


@dataclass
class EventRecord:
    """An event sent to a run, kept until a wait consumes it."""

    event_id: str
    run_id: str
    name: str
    payload: Any
    created_at: datetime
    consumed_by: str | None = None


@dataclass
class ValueRecord:
    """A value a run published (``ctx.set_value``): the latest ``value`` of ``key``, when
    it was written, and ``marks``: for each branch of the body that wrote the key (its
    path, "" for the body itself), the position of its last write there (0 for its
    first ``set_value`` of the key, 1 for its second...), so a replay writes nothing
    it wrote before (see ``engine_core.run.values``)."""

    run_id: str
    key: str
    value: Any
    written_at: datetime
    marks: dict[str, int] = field(default_factory=dict)


@dataclass
class UpdateRecord:
    """An update sent to a run (``engine.update``), kept until a wait of its ``name``
    consumes it (oldest ``seq`` first), and, once the run answered, its ``answer``:
    ``{"value": reply}`` or ``{"rejected": reason}``."""

    run_id: str
    update_id: str
    name: str
    payload: Any
    created_at: datetime
    #: Sorts updates in the order they were sent (consumed oldest first).
    seq: str
    consumed_by: str | None = None
    answer: dict[str, Any] | None = None
    answered_at: datetime | None = None


@dataclass(frozen=True)
class UpdateSubmission:
    """What ``Store.submit_update`` did: ``kept`` the update (and marked its run owed a
    pass); or found ``existing``, the update of that id kept already (nothing stored);
    or neither, the run being ended (``run_status``) or missing (``run_status`` None)."""

    kept: bool
    existing: UpdateRecord | None = None
    run_status: str | None = None


@dataclass(frozen=True)
class Lease:
    """Proof of holding a lease; ``token`` grows on every takeover."""

    key: str
    holder: str
    token: int
    expires_at: datetime


@dataclass(frozen=True)
class StepGuard:
    """The state a step record must be in for a guarded write to land (a missing record
    never matches). Every field left ``None`` is not checked."""

    status_in: tuple[StepState, ...] | None = None
    attempts_below: int | None = None
    attempts: int | None = None
    claim_holder: str | None = None


@dataclass(frozen=True)
class StepPage:
    """Where the next page of a keyset-paginated scan of scheduled steps starts."""

    due_at: datetime
    run_id: str
    key: str


@dataclass
class ScheduleRecord:
    """A stored schedule: what to start (``workflow`` with ``input``), when (``cron`` in
    ``timezone``, or ``every`` seconds since the epoch), and its next fire."""

    name: str
    workflow: str
    cron: str | None
    every: float | None
    timezone: str
    input: Any
    paused: bool
    next_fire_at: datetime
    created_at: datetime
    updated_at: datetime
    #: The fires missed while nothing ran: "latest" (one run), "none" or "all".
    catch_up: str = "latest"


@dataclass
class Worker:
    """A serving engine as it records itself in the store (see
    :mod:`engine_core.fleet.registry`), refreshed every few seconds while it serves.

    ``versions``: the workflow versions it serves (none until workflows have versions);
    ``queues``: the queues it declared, name to limits; ``slots_used`` of
    ``concurrency``: its step slots in use at the last refresh; ``clock_offset``: its
    clock against the store's in seconds, when the store measured it. ``pinned``: it
    drives only runs of the versions it registers (``pin_versions=True``), which
    ``workflow_versions`` names, workflow to version label (workflows registered with
    one); ``input_schemas``: workflow to the JSON Schema of the input its type
    declares, for a client without the code to check an input against."""

    instance_id: str
    host: str
    pid: int
    versions: list[str]
    workflows: list[str]
    step_functions: list[str]
    queues: dict[str, dict[str, Any]]
    started_at: datetime
    last_seen: datetime
    expires_at: datetime
    concurrency: int = 0
    slots_used: int = 0
    clock_offset: float | None = None
    pinned: bool = False
    workflow_versions: dict[str, str] = field(default_factory=dict)
    input_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)


def debounce_run_id(workflow: str, key: str, window: int) -> str:
    """The id of the run of debounce window ``window`` (0, 1, ...) of ``workflow`` and
    ``key``: the same in every process and store, so a start learns the pending run's id
    from the window's number alone."""
    name = json.dumps(["pikku-debounce", workflow, key, window])
    return uuid.uuid5(uuid.NAMESPACE_URL, name).hex
