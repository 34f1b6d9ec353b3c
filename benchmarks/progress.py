"""The suite's progress: a bar counting repetitions, and how many it will count."""

from __future__ import annotations

import sys
from typing import Any

from benchmarks import ours
from benchmarks.common import Sizes


class Progress:
    """A tqdm bar counting repetitions (a plain counter on stderr without tqdm)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

            self.bar = tqdm(total=total, unit="rep", file=sys.stderr, dynamic_ncols=True)

    def stage(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description(text)

    def step(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def plan_units(sizes: Sizes, workloads: list[str], systems: list[str]) -> int:
    """How many repetitions the progress bar will count."""
    reps = sizes.reps
    units = 0
    if "mongo" in systems:
        units += 4 * reps + 2  # raw rates, floor, run document sizes, profile
    for w in workloads:
        if w in ("W1", "W2", "W3", "W4"):
            units += reps * (len(systems) + (w == "W1" and "mongo" in systems))
            if w in ("W1", "W3"):  # the codec rows (not on DBOS)
                units += reps * (("memory" in systems) + ("mongo" in systems))
        elif w == "W5":
            units += reps * (
                ("memory" in systems) + ("mongo" in systems) * (len(sizes.w5_workers) + 2)
            )
        elif w == "W6":
            units += (
                (1 + reps)
                * len(sizes.w6_parked)
                * len(ours.W6_MODES)
                * (("memory" in systems) + ("mongo" in systems))
            )
        elif w == "S1":
            units += ("memory" in systems) + ("mongo" in systems)
        elif w == "Q1":
            units += len(sizes.q1_limits) * (("memory" in systems) + ("mongo" in systems))
        elif w == "Q2":
            units += 3 * ("mongo" in systems)
        elif w == "T1":
            units += 3 * ("mongo" in systems)
        elif w == "U1":
            units += "mongo" in systems
        elif w == "T2":
            units += reps * ("memory" in systems)
        elif w == "A1":
            units += reps * (("memory" in systems) + ("mongo" in systems))
    return units
