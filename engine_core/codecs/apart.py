"""Values a store keeps apart from its records (MongoStore: in GridFS): which values go
there, and giving them back where a read needs them.

A store that keeps large values apart says how large a value may be in its records
(``offload_over_bytes``) and offers ``offload_values(run_id, values)`` (each value as
stored, its reference back: an :class:`~engine_core.records.Apart`),
``fetch_values(references)`` and ``drop_values(references)``. The engine decides here,
on each write, which values go apart (their stored size, after the codec, is past the
limit), so a store's records only ever hold values under it; a read that gives values to
a caller fetches them back, one that lists records (sweeps, lists of runs) leaves them
where they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from engine_core.codecs.sealing import copy_record
from engine_core.records import Apart, RunRecord, StepRecord

_R = TypeVar("_R")
#: The value fields of the records that may hold values kept apart.
RUN_VALUES = ("input", "output")
STEP_VALUES = ("result", "payload")


def stored_bytes(value: Any, over: int) -> int:
    """The size of ``value`` as a store keeps it (``bytes`` as they are, anything else as
    compact JSON text), exactly where it might be past ``over``, else a bound."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float:
        return 8
    if kind is bytes:
        return len(value)
    if kind is str and len(value) * 12 + 2 <= over:
        # Under even with every character escaped (one past U+FFFF: two \\uXXXX).
        return len(value) + 2
    if isinstance(value, Apart):
        return 0
    return len(json.dumps(value, separators=(",", ":")))


class ValuesApart:
    """Moves the large values of records apart on writes, and fetches them back on reads,
    for a store ``inner`` that keeps values apart (else it does nothing)."""

    def __init__(self, inner: Any) -> None:
        over = getattr(inner, "offload_over_bytes", None)
        self.over: int | None = over if isinstance(over, int) else None
        self.inner = inner

    # ---- writes ---------------------------------------------------------------------

    async def place(self, run_id: str, values: Sequence[Any]) -> list[Any]:
        """``values`` (as stored) with each one past the limit replaced by its reference,
        placed apart for run ``run_id`` in one call."""
        over = self.over
        if over is None:
            return list(values)
        large = [i for i, v in enumerate(values) if stored_bytes(v, over) > over]
        if not large:
            return list(values)
        placed = await self.inner.offload_values(run_id, [values[i] for i in large])
        out = list(values)
        for i, reference in zip(large, placed, strict=True):
            out[i] = reference
        return out

    async def placed(self, record: _R, names: Sequence[str], run_id: str) -> _R:
        """``record`` with its value fields ``names`` placed (a copy when one moves)."""
        if self.over is None:
            return record
        values = [getattr(record, name) for name in names]
        moved = await self.place(run_id, values)
        if all(a is b for a, b in zip(values, moved, strict=True)):
            return record
        twin = copy_record(record)
        for name, value in zip(names, moved, strict=True):
            object.__setattr__(twin, name, value)  # a frozen record too (StreamEntry)
        return twin

    async def placed_steps(self, steps: Sequence[StepRecord]) -> list[StepRecord]:
        """Each of ``steps`` with its result and payload placed."""
        return [await self.placed(s, STEP_VALUES, s.run_id) for s in steps]

    async def placed_run(self, run: RunRecord) -> RunRecord:
        """``run`` with its input, output and its journal's values placed."""
        run = await self.placed(run, RUN_VALUES, run.run_id)
        if self.over is not None and run.journal:
            steps = await self.placed_steps(list(run.journal.values()))
            journal = dict(zip(run.journal, steps, strict=True))
            if any(journal[k] is not s for k, s in run.journal.items()):
                run = copy_record(run)
                run.journal = journal
        return run

    async def drop(self, records: Sequence[Any], names: Sequence[str]) -> None:
        """Drop the values of ``records``' fields ``names`` placed apart by a write that
        did not land (a start whose run existed already, say)."""
        placed = [v for r in records for n in names if isinstance(v := getattr(r, n), Apart)]
        await self.drop_values(placed)

    async def drop_values(self, values: Sequence[Apart]) -> None:
        """Drop ``values`` placed apart (replaced, or written by a write that did not
        land)."""
        if values:
            await self.inner.drop_values(list(values))

    # ---- reads ----------------------------------------------------------------------

    async def fetched(self, records: Sequence[_R], names: Sequence[str]) -> list[_R]:
        """``records`` with their value fields ``names`` fetched back (one call)."""
        wanted = [
            (i, name, value)
            for i, record in enumerate(records)
            for name in names
            if isinstance(value := getattr(record, name), Apart)
        ]
        if not wanted:
            return list(records)
        values = await self.inner.fetch_values([value for _, _, value in wanted])
        out = list(records)
        copied: set[int] = set()
        for (i, name, _), value in zip(wanted, values, strict=True):
            if i not in copied:
                out[i] = copy_record(out[i])
                copied.add(i)
            object.__setattr__(out[i], name, value)
        return out

    async def fetched_runs(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        """``runs`` with their input, output and their journals' values fetched back."""
        if self.over is None:
            return list(runs)
        runs = await self.fetched(runs, RUN_VALUES)
        return [await self._journal_fetched(run) for run in runs]

    async def _journal_fetched(self, run: RunRecord) -> RunRecord:
        steps = list(run.journal.values())
        if not any(isinstance(s.result, Apart) or isinstance(s.payload, Apart) for s in steps):
            return run
        fetched = await self.fetched(steps, STEP_VALUES)
        twin = copy_record(run)
        twin.journal = {s.key: s for s in fetched}
        return twin

    async def fetched_one(self, record: _R | None, names: Sequence[str]) -> _R | None:
        """:meth:`fetched` for one record (or None)."""
        if record is None or self.over is None:
            return record
        return (await self.fetched([record], names))[0]

    async def fetched_value(self, value: Any) -> Any:
        """``value``, fetched back if it is kept apart."""
        if not isinstance(value, Apart):
            return value
        return (await self.inner.fetch_values([value]))[0]
