"""``SealedStore``: the seam where the engine's values meet the store: sealed by
``Engine(codec=...)``, and the large ones kept apart where the store offers it.

The engine works with plain values; every store method that takes or gives user values
passes through here, sealing them on the way in and opening them on the way out (see
:mod:`engine_core.codecs.sealing`). So one codec covers every store (the in-memory one
too), a store only ever sees JSON-shaped values or ``bytes`` it keeps as they are, and
the engine seals a value once, where it writes it. Every other method goes to the store
unchanged (:data:`PASSED_THROUGH`; ``tests/test_codecs.py`` checks that each protocol
method is in one list or the other).

Reads whose values always reach user code (a pass's run and steps, a claimed job's
payload, a consumed event, a heartbeat, a stream) raise :class:`~engine_core.CodecError`
for a value this process cannot decode; the others (lists, sweeps, a run read to steer
it) give an :class:`~engine_core.codecs.sealing.Undecoded` in its place, which the
engine's readers check (``engine.status``, ``engine.result``...) and which a write puts
back as it was stored. Within ``showing_undecodable()`` none raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

from engine_core.codecs.apart import RUN_VALUES, STEP_VALUES, ValuesApart
from engine_core.codecs.payload import PayloadCodec
from engine_core.codecs.sealing import Sealer
from engine_core.errors import InvalidOptionError
from engine_core.records import (
    Apart,
    AttemptEntry,
    EventRecord,
    RunRecord,
    RunState,
    ScheduleRecord,
    StepGuard,
    StepRecord,
    UpdateRecord,
    UpdateSubmission,
    ValueRecord,
)
from engine_core.store import Store
from engine_core.streams import StreamEntry

_R = TypeVar("_R")
#: At most this many steps' last heartbeat details kept apart are remembered (to drop
#: them when the next heartbeat replaces them).
_BEATS_HELD = 10_000

#: The store protocol's methods that carry no user value: passed to the store as they are.
PASSED_THROUGH = frozenset(
    {
        "init",
        "close",
        "extend_pass",
        "release_pass",
        "request_pass",
        "request_passes",
        "find_runs_needing_pass",
        "delete_runs",
        "list_forks",
        "clean_forks",
        "get_queue_state",
        "save_queue_state",
        "admit_runs",
        "count_admitted",
        "count_admitted_keys",
        "dedup_holder",
        "count_queue",
        "queue_names",
        "put_queue_limits",
        "list_queue_limits",
        "find_unnotified_steps",
        "requeue_lapsed_claims",
        "extend_claim",
        "halt_steps",
        "find_scheduled_steps",
        "job_hints",
        "acquire_lease",
        "refresh_lease",
        "release_lease",
        "stream_length",
        "list_streams",
        "stream_hints",
        "delete_schedule",
        "advance_schedule",
        "put_worker",
        "delete_worker",
        "list_workers",
        "count_runs",
        "list_workflows",
        "expire_runs",
        "value_hints",
        "answer_hints",
        "update_hints",
        "get_key_windows",
        "save_key_windows",
        "count_waiting_keys",
        "follow_clock",
    }
)


class SealedStore:
    """``inner`` with every user value sealed by ``codec`` at rest (None: written plain;
    a sealed value read raises or shows as "encrypted"), and its large values kept apart
    where ``inner`` keeps values apart (:mod:`engine_core.codecs.apart`). Anything not
    listed here is ``inner``'s own (its other methods and attributes)."""

    def __init__(self, inner: Store, codec: PayloadCodec | None) -> None:
        self.inner = inner
        self.sealer = Sealer(codec)
        self.apart = ValuesApart(inner)
        # The heartbeat details this process wrote last per (run, step), where kept
        # apart: replaced by the next heartbeat, so dropped then (heartbeats repeat).
        self._beats: dict[tuple[str, str], Apart] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"SealedStore({self.inner!r}, codec={self.sealer.codec!r})"

    # ---- sealing and placing on the way in ------------------------------------------

    async def _run_in(self, run: RunRecord) -> RunRecord:
        return await self.apart.placed_run(self.sealer.seal_run(run))

    async def _steps_in(self, steps: Sequence[StepRecord]) -> list[StepRecord]:
        return await self.apart.placed_steps([self.sealer.seal_step(s) for s in steps])

    async def _value_in(self, run_id: str, value: Any) -> Any:
        return (await self.apart.place(run_id, [self.sealer.seal(value)]))[0]

    # ---- fetching and opening on the way out ----------------------------------------

    async def _runs_out(
        self, runs: Sequence[RunRecord], strict: bool = False, fetch: bool = True
    ) -> list[RunRecord]:
        if fetch:
            runs = await self.apart.fetched_runs(runs)
        return [self.sealer.open_run(r, strict) for r in runs]

    async def _run_out(self, run: RunRecord | None, strict: bool = False) -> RunRecord | None:
        return None if run is None else (await self._runs_out([run], strict))[0]

    async def _steps_out(
        self, steps: Sequence[StepRecord], strict: bool = True
    ) -> list[StepRecord]:
        fetched = await self.apart.fetched(steps, STEP_VALUES)
        return [self.sealer.open_step(s, strict) for s in fetched]

    async def _field_out(self, record: _R, name: str, strict: bool = True) -> _R:
        fetched = await self.apart.fetched_one(record, (name,))
        assert fetched is not None
        return self.sealer.open_field(fetched, name, strict)

    # ---- runs -----------------------------------------------------------------------

    async def insert_run(self, run: RunRecord) -> RunRecord | None:
        stored = await self._run_in(run)
        try:
            existing = await self.inner.insert_run(stored)
        except BaseException:
            await self.apart.drop([stored], RUN_VALUES)
            raise
        if existing is None:
            return None
        await self.apart.drop([stored], RUN_VALUES)  # the run was there: ours is not
        return await self._run_out(existing)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._run_out(await self.inner.get_run(run_id))

    async def get_runs(self, run_ids: Sequence[str], **options: Any) -> list[RunRecord]:
        return await self._runs_out(await self.inner.get_runs(run_ids, **options))

    async def begin_pass(self, run_id: str, **options: Any) -> RunRecord | None:
        return await self._run_out(await self.inner.begin_pass(run_id, **options), strict=True)

    async def start_step(
        self, run_id: str, *, outcomes: Sequence[StepRecord] = (), **options: Any
    ) -> bool:
        sealed = await self._steps_in(outcomes)
        return await self.inner.start_step(run_id, outcomes=sealed, **options)

    async def record_steps(
        self, run_id: str, *, outcomes: Sequence[StepRecord], **options: Any
    ) -> bool:
        sealed = await self._steps_in(outcomes)
        return await self.inner.record_steps(run_id, outcomes=sealed, **options)

    async def settle_run(
        self,
        run_id: str,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
        outcomes: Sequence[StepRecord] = (),
        **options: Any,
    ) -> bool:
        return await self.inner.settle_run(
            run_id,
            output=await self._value_in(run_id, output),
            error=self.sealer.seal_error(error),
            outcomes=await self._steps_in(outcomes),
            **options,
        )

    async def set_run_status(
        self,
        run_id: str,
        status: RunState,
        *,
        error: dict[str, Any] | None = None,
        **options: Any,
    ) -> RunRecord | None:
        error = self.sealer.seal_error(error)
        set_to = await self.inner.set_run_status(run_id, status, error=error, **options)
        return await self._run_out(set_to)

    async def list_child_runs(self, run_id: str) -> list[RunRecord]:
        return await self._runs_out(await self.inner.list_child_runs(run_id), fetch=False)

    async def find_idle_runs(self, *args: Any, **options: Any) -> list[RunRecord]:
        return await self._runs_out(await self.inner.find_idle_runs(*args, **options), fetch=False)

    async def list_runs(self, **options: Any) -> list[RunRecord]:
        return await self._runs_out(await self.inner.list_runs(**options), fetch=False)

    async def fork_run(self, run: RunRecord, steps: Sequence[StepRecord]) -> RunRecord | None:
        stored, copied = await self._run_in(run), await self._steps_in(steps)
        try:
            existing = await self.inner.fork_run(stored, copied)
        except BaseException:
            await self.apart.drop([stored], RUN_VALUES)
            raise
        return await self._run_out(existing)

    # ---- flow control: the runs as read go back as they are (their values unwritten) --

    async def queued_runs(self, queue: str, **options: Any) -> list[RunRecord]:
        return await self._runs_out(await self.inner.queued_runs(queue, **options), fetch=False)

    async def admit_run_holding(self, run: RunRecord, **options: Any) -> RunRecord | None:
        begun = await self.inner.admit_run_holding(run, **options)
        return await self._run_out(begun, strict=True)

    async def find_delayed_runs(self, *args: Any) -> list[RunRecord]:
        return await self._runs_out(await self.inner.find_delayed_runs(*args), fetch=False)

    async def release_delayed_runs(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        released = await self.inner.release_delayed_runs(runs)
        return await self._runs_out(released, fetch=False)

    async def reenter_run(self, run: RunRecord, **options: Any) -> RunRecord | None:
        return await self._run_out(await self.inner.reenter_run(run, **options))

    async def find_deadlines(self, *args: Any) -> list[RunRecord]:
        return await self._runs_out(await self.inner.find_deadlines(*args), fetch=False)

    # ---- steps ----------------------------------------------------------------------

    async def load_steps(self, run_id: str) -> list[StepRecord]:
        return await self._steps_out(await self.inner.load_steps(run_id))

    async def load_steps_of(
        self, run_ids: Sequence[str], **options: Any
    ) -> dict[str, list[StepRecord]]:
        # An offline check of many runs: one run's undecodable value must not stop it.
        loaded = await self.inner.load_steps_of(run_ids, **options)
        return {r: await self._steps_out(steps, strict=False) for r, steps in loaded.items()}

    async def get_step(self, run_id: str, key: str) -> StepRecord | None:
        step = await self.inner.get_step(run_id, key)
        return None if step is None else (await self._steps_out([step]))[0]

    async def get_steps(self, run_id: str, keys: Any) -> list[StepRecord]:
        return await self._steps_out(await self.inner.get_steps(run_id, keys))

    async def save_steps(self, steps: Sequence[StepRecord]) -> None:
        await self.inner.save_steps(await self._steps_in(steps))

    async def insert_step(self, step: StepRecord) -> bool:
        return await self.inner.insert_step((await self._steps_in([step]))[0])

    async def update_step(
        self,
        run_id: str,
        key: str,
        *,
        guard: StepGuard,
        changes: dict[str, Any],
        entry: AttemptEntry | None = None,
    ) -> bool:
        sealed = self.sealer.seal_changes(changes)
        for name in STEP_VALUES:
            if name in sealed:
                sealed[name] = (await self.apart.place(run_id, [sealed[name]]))[0]
        return await self.inner.update_step(
            run_id, key, guard=guard, changes=sealed, entry=self.sealer.seal_entry(entry)
        )

    async def claim_steps(self, functions: Sequence[str], **options: Any) -> list[StepRecord]:
        return await self._steps_out(await self.inner.claim_steps(functions, **options))

    async def find_claims(self, holder: str) -> list[StepRecord]:
        return await self._steps_out(await self.inner.find_claims(holder))

    # ---- events, streams, heartbeats, schedules -------------------------------------

    async def insert_event(self, event: EventRecord) -> None:
        stored = self.sealer.seal_field(event, "payload")
        await self.inner.insert_event(await self.apart.placed(stored, ("payload",), event.run_id))

    async def consume_event(self, run_id: str, name: str, consumer: str) -> EventRecord | None:
        event = await self.inner.consume_event(run_id, name, consumer)
        return None if event is None else await self._field_out(event, "payload")

    async def append_stream(self, entry: StreamEntry) -> StreamEntry | None:
        stored = self.sealer.seal_field(entry, "value")
        stored = await self.apart.placed(stored, ("value",), entry.run_id)
        held = await self.inner.append_stream(stored)
        return None if held is None else await self._field_out(held, "value", strict=False)

    async def stream_entries(self, run_id: str, key: str, **options: Any) -> list[StreamEntry]:
        entries = await self.inner.stream_entries(run_id, key, **options)
        fetched = await self.apart.fetched(entries, ("value",))
        return [self.sealer.open_field(e, "value") for e in fetched]

    async def put_heartbeat(self, run_id: str, key: str, *, attempt: int, details: Any) -> None:
        details = await self._value_in(run_id, details)
        try:
            await self.inner.put_heartbeat(run_id, key, attempt=attempt, details=details)
        except BaseException:
            if isinstance(details, Apart):
                await self.apart.drop_values([details])
            raise
        replaced = self._beats.pop((run_id, key), None)
        if isinstance(details, Apart):
            if len(self._beats) >= _BEATS_HELD:  # steps that ended: their files go with the run
                self._beats.pop(next(iter(self._beats)))
            self._beats[(run_id, key)] = details
        if replaced is not None:
            await self.apart.drop_values([replaced])

    async def get_heartbeat(self, run_id: str, key: str) -> tuple[int, Any] | None:
        held = await self.inner.get_heartbeat(run_id, key)
        if held is None:
            return None
        return held[0], self.sealer.open(await self.apart.fetched_value(held[1]))

    # A schedule belongs to no run: its input stays in its record (it goes to the runs
    # it starts as stored, so a read of it never raises).

    async def put_schedule(self, schedule: ScheduleRecord) -> None:
        await self.inner.put_schedule(self.sealer.seal_field(schedule, "input"))

    def _schedule(self, schedule: ScheduleRecord | None) -> ScheduleRecord | None:
        return None if schedule is None else self.sealer.open_field(schedule, "input", False)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        return self._schedule(await self.inner.get_schedule(name))

    async def list_schedules(self) -> list[ScheduleRecord]:
        schedules = await self.inner.list_schedules()
        return [self.sealer.open_field(s, "input", False) for s in schedules]

    async def set_schedule_paused(
        self, name: str, paused: bool, **options: Any
    ) -> ScheduleRecord | None:
        return self._schedule(await self.inner.set_schedule_paused(name, paused, **options))

    # ---- published values and updates (a run's, like its events) -------------------

    async def put_value(self, run_id: str, key: str, value: Any, **options: Any) -> bool:
        stored = await self._value_in(run_id, value)
        try:
            written = await self.inner.put_value(run_id, key, stored, **options)
        except BaseException:
            if isinstance(stored, Apart):
                await self.apart.drop_values([stored])
            raise
        if not written and isinstance(stored, Apart):
            await self.apart.drop_values([stored])  # an earlier pass wrote it: ours is not
        return written

    async def _values_out(self, values: Sequence[ValueRecord], strict: bool) -> list[ValueRecord]:
        fetched = await self.apart.fetched(values, ("value",))
        return [self.sealer.open_field(v, "value", strict) for v in fetched]

    async def get_value(self, run_id: str, key: str) -> ValueRecord | None:
        found = await self.inner.get_value(run_id, key)
        return None if found is None else (await self._values_out([found], True))[0]

    async def list_values(self, run_id: str) -> list[ValueRecord]:
        # Read for status, the CLI and the dashboard: an undecodable one shows as such.
        return await self._values_out(await self.inner.list_values(run_id), False)

    async def _updates_out(
        self, updates: Sequence[UpdateRecord], strict: bool = True
    ) -> list[UpdateRecord]:
        fetched = await self.apart.fetched(updates, ("payload",))
        return [
            self.sealer.open_field(self.sealer.open_field(u, "payload", strict), "answer", strict)
            for u in fetched
        ]

    async def _update_out(self, update: UpdateRecord | None) -> UpdateRecord | None:
        return None if update is None else (await self._updates_out([update]))[0]

    async def submit_update(self, update: UpdateRecord) -> UpdateSubmission:
        stored = self.sealer.seal_field(update, "payload")
        stored = await self.apart.placed(stored, ("payload",), update.run_id)
        try:
            submitted = await self.inner.submit_update(stored)
        except BaseException:
            await self.apart.drop([stored], ("payload",))
            raise
        if not submitted.kept:
            await self.apart.drop([stored], ("payload",))  # not kept: ours is no one's
        if submitted.existing is None:
            return submitted
        return replace(submitted, existing=await self._update_out(submitted.existing))

    async def consume_update(self, run_id: str, name: str, consumer: str) -> UpdateRecord | None:
        return await self._update_out(await self.inner.consume_update(run_id, name, consumer))

    async def answer_update(
        self, run_id: str, update_id: str, answer: dict[str, Any], **options: Any
    ) -> UpdateRecord | None:
        # The whole answer is one sealed value: a reply and a rejection's reason alike.
        sealed_answer = self.sealer.seal(answer)
        answered = await self.inner.answer_update(run_id, update_id, sealed_answer, **options)
        return await self._update_out(answered)

    async def get_update(self, run_id: str, update_id: str) -> UpdateRecord | None:
        return await self._update_out(await self.inner.get_update(run_id, update_id))

    async def list_updates(self, run_id: str, *, pending: bool) -> list[UpdateRecord]:
        listed = await self.inner.list_updates(run_id, pending=pending)
        return await self._updates_out(listed, strict=False)

    # ---- a debounced start: its input is the run's, sealed as an insert's -----------

    async def debounce_run(self, run: RunRecord, **options: Any) -> tuple[str, bool]:
        stored = await self._run_in(run)
        try:
            return await self.inner.debounce_run(stored, **options)
        except BaseException:
            await self.apart.drop([stored], RUN_VALUES)
            raise


def sealed(store: Store, codec: PayloadCodec | None) -> Store:
    """``store`` behind a :class:`SealedStore` with ``codec`` (one already sealed is kept
    as it is when no codec is given; with one, its own store is sealed afresh).
    :class:`~engine_core.errors.InvalidOptionError` for a codec without the methods."""
    if codec is not None and not isinstance(codec, PayloadCodec):
        raise InvalidOptionError(
            f"codec must have encode(bytes) and decode(bytes) methods, not {codec!r}"
        )
    if isinstance(store, SealedStore):
        if codec is None:
            return cast(Store, store)
        store = store.inner
    return cast(Store, SealedStore(store, codec))
