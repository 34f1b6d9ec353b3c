"""Rate windows kept small: a queue's (``rate``) in its state, each key's (``key_rate``)
in a record of its own.

A window is (time, count) entries, at most :data:`WINDOW_ENTRIES`: when there are
more, the two closest in time merge into one stamped with the later time, which counts
every admission in it for at least as long as its own time would. At most N admissions
in any window, always.

``key_rate`` keeps the queue's state bounded whatever the number of keys: each key's
window is a :class:`~engine_core.records.KeyWindow` of the store, and the state lists
only the admissions per key that those windows may not hold yet (``key_unsaved``: one
entry per key, at most :data:`UNSAVED_KEYS`). A round reads the windows of its keys
after the state, counts an unsaved entry for a key whose stored window is older than the
entry, saves the state (compare-and-set: the serialisation point), then saves the
windows it knows, each with the state's new version, where a later version was not
stored already. An admitter that dies before that leaves its entries in the state for
the next round to count and save. So the windows never lose an admission, and the
compare-and-set on the state keeps two rounds from both taking a key's last slot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine_core.flow.queues import Rate
from engine_core.records import KeyWindow, QueueState, RunRecord
from engine_core.store import Store

#: Entries of a rate window kept at most (see the module's docstring).
WINDOW_ENTRIES = 64
#: Keys the state lists admissions of, not yet saved in their windows, at most: past
#: it, a round admits no run of a key not listed (it saves the listed ones first).
UNSAVED_KEYS = 200

Entry = tuple[str | None, datetime, int, int]


def live_window(
    window: Iterable[tuple[datetime, int]], now: datetime, rate: Rate | None
) -> list[tuple[datetime, int]]:
    """The entries of ``window`` still inside the rate window that ends at ``now``."""
    if rate is None:
        return []
    since = now - timedelta(seconds=rate.per)
    return sorted((t, n) for t, n in window if t > since)


def window_with(
    window: list[tuple[datetime, int]], now: datetime, admitted: int
) -> list[tuple[datetime, int]]:
    """``window`` with ``admitted`` admissions at ``now``, in at most
    :data:`WINDOW_ENTRIES` entries: the two entries closest in time merge into one at
    the later time (so each admission is counted at least as long as its own time
    says: merging may delay an admission, never allow one too many)."""
    entries = sorted([*window, (now, admitted)] if admitted else window)
    while len(entries) > WINDOW_ENTRIES:
        i = min(range(len(entries) - 1), key=lambda j: entries[j + 1][0] - entries[j][0])
        entries[i : i + 2] = [(entries[i + 1][0], entries[i][1] + entries[i + 1][1])]
    return entries


@dataclass
class KeyRates:
    """A round's view of the ``key_rate`` windows of its keys: each key's admissions
    within the window (stored, and unsaved in the state), and the state's unsaved
    entries the stored windows do not hold yet."""

    rate: Rate
    windows: dict[str | None, list[tuple[datetime, int]]]
    unsaved: list[Entry]

    def room(self, key: str | None, picked: Counter[str | None]) -> bool:
        """Whether one more run of ``key`` may be admitted, ``picked`` taken this round."""
        listed = {e[0] for e in self.unsaved} | set(picked)
        if key not in listed and len(listed) >= UNSAVED_KEYS:
            return False
        used = sum(n for _, n in self.windows.get(key, []))
        return used + picked[key] < self.rate.count

    def entries_after(
        self, picked: Counter[str | None], now: datetime, version: int
    ) -> list[Entry]:
        """The state's ``key_unsaved`` after a round (version ``version``) that admitted
        ``picked`` at ``now``: one entry per key, the later time, the counts added."""
        merged = {e[0]: e for e in self.unsaved}
        for key, count in picked.items():
            old = merged.get(key)
            if old is None:
                merged[key] = (key, now, count, version)
            else:
                merged[key] = (key, max(old[1], now), old[2] + count, version)
        return sorted(merged.values(), key=lambda e: (e[0] is not None, e[0] or ""))

    def windows_to_save(
        self, picked: Counter[str | None], now: datetime, entries: list[Entry]
    ) -> dict[str | None, list[tuple[datetime, int]]]:
        """The window of every key listed in ``entries``, this round's admissions in."""
        return {
            key: window_with(self.windows.get(key, []), now, picked[key]) for key, *_ in entries
        }


async def read_key_rates(
    store: Store, rate: Rate, state: QueueState, line: list[RunRecord], now: datetime
) -> KeyRates:
    """The windows of the keys of ``line`` and of the state's unsaved entries, read from
    the store (1 read) after ``state`` was."""
    keys = {r.queue_key for r in line} | {e[0] for e in state.key_unsaved}
    ordered = sorted(keys, key=lambda k: (k is not None, k or ""))
    stored = await store.get_key_windows(state.name, ordered) if ordered else {}
    unsaved = [e for e in state.key_unsaved if e[3] > stored.get(e[0], KeyWindow()).version]
    windows = {
        key: live_window(
            [*stored.get(key, KeyWindow()).window, *((t, n) for k, t, n, _ in unsaved if k == key)],
            now,
            rate,
        )
        for key in ordered
    }
    return KeyRates(rate, windows, unsaved)
