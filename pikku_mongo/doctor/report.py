"""What ``doctor`` reports: one :class:`Check` per line, gathered in a
:class:`DoctorReport`, and the table the command line prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: Status
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    """The checks of one diagnosis, in the order they ran."""

    checks: list[Check]

    @property
    def failures(self) -> int:
        """How many checks failed."""
        return sum(1 for c in self.checks if c.status == "fail")

    @property
    def warnings(self) -> int:
        """How many checks warned."""
        return sum(1 for c in self.checks if c.status == "warn")

    @property
    def ok(self) -> bool:
        """No check failed (warnings allowed)."""
        return self.failures == 0

    def get(self, name: str) -> Check:
        """The check ``name``."""
        return next(c for c in self.checks if c.name == name)

    def to_json(self) -> dict[str, Any]:
        """The report as ``doctor --json`` prints it."""
        return {
            "ok": self.ok,
            "failures": self.failures,
            "warnings": self.warnings,
            "checks": [
                {"check": c.name, "status": c.status, "detail": c.detail, **c.data}
                for c in self.checks
            ],
        }


def render(report: DoctorReport) -> str:
    """The human table: check, status, detail."""
    rows = [(c.name, c.status.upper() if c.status == "fail" else c.status, c.detail)
            for c in report.checks]  # fmt: skip
    width = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(("check", "status"))]
    lines = [f"{'check'.ljust(width[0])}  {'status'.ljust(width[1])}  detail"]
    lines.append(f"{'-' * width[0]}  {'-' * width[1]}  {'-' * 6}")
    lines += [f"{n.ljust(width[0])}  {s.ljust(width[1])}  {d}" for n, s, d in rows]
    verdict = "FAIL" if not report.ok else "ok"
    lines.append(f"\n{verdict}: {report.failures} failure(s), {report.warnings} warning(s)")
    return "\n".join(lines)
