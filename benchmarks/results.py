"""What one run of the benchmark suite measured (:class:`Results`, saved as JSON and
read back), and the systems it compares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.common import Sizes, Summary

SYSTEMS = ("memory", "mongo", "dbos")
LABELS = {
    "memory": "ours, in-memory store",
    "mongo": "ours, MongoStore",
    "dbos": "DBOS Transact, SQLite",
}


@dataclass
class Results:
    """Everything one run of the suite measured."""

    sizes: Sizes
    mode: str  # "full" or "quick"
    date: str
    machine: dict[str, str]
    server: str
    summaries: list[Summary] = field(default_factory=list)
    raw: list[Summary] = field(default_factory=list)  # find_one_and_update rates
    floor: list[Summary] = field(default_factory=list)  # benchmarks.floor
    parking_s: dict[str, float] = field(default_factory=dict)
    profile_md: str = ""
    runtime_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def get(self, workload: str, system: str, variant: str = "") -> Summary | None:
        for s in self.summaries:
            if (s.workload, s.system, s.variant) == (workload, system, variant):
                return s
        return None

    def floor_of(self, variant: str) -> Summary | None:
        for s in self.floor:
            if s.variant == variant:
                return s
        return None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["sizes"] = asdict(self.sizes)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Results:
        """The inverse of :meth:`to_json` (to render a saved run again)."""
        fields = dict(data)
        sizes: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in fields.pop("sizes").items()
        }
        summaries = [Summary(**s) for s in fields.pop("summaries")]
        raw = [Summary(**s) for s in fields.pop("raw")]
        floor = [Summary(**s) for s in fields.pop("floor", [])]
        return cls(sizes=Sizes(**sizes), summaries=summaries, raw=raw, floor=floor, **fields)
