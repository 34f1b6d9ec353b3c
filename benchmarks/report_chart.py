"""The benchmark report's chart: grouped bars per workload, one panel each (a PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.common import Summary
from benchmarks.numbers import X, num, thousands
from benchmarks.report_markdown import w6_capped
from benchmarks.results import LABELS, SYSTEMS, Results

COLOURS = {"memory": "#4C72B0", "mongo": "#55A868", "dbos": "#C44E52"}


def chart(r: Results, path: Path) -> None:
    """Grouped bars per workload, one panel each, log scale where values span a lot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5))
    z = r.sizes

    def bars(
        ax: Any,
        title: str,
        unit: str,
        groups: list[str],
        series: dict[str, list[float | None]],
        hatched: dict[str, list[bool]] | None = None,
    ) -> None:
        present = {k: v for k, v in series.items() if any(x is not None for x in v)}
        n = max(1, len(present))
        width = 0.8 / n
        values: list[float] = []
        for i, (system, vals) in enumerate(present.items()):
            for j, v in enumerate(vals):
                if v is None or v <= 0:
                    continue
                values.append(v)
                hatch = "//" if hatched and hatched.get(system, [False] * len(vals))[j] else ""
                bar = ax.bar(
                    j + (i - (n - 1) / 2) * width,
                    v,
                    width,
                    color=COLOURS[system],
                    hatch=hatch,
                    edgecolor="black" if hatch else "white",
                )
                ax.bar_label(bar, labels=[num(v)], fontsize=7, padding=1)
        ax.set_xticks(range(len(groups)), groups, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit, fontsize=8)
        if values and max(values) / min(values) > 20:
            ax.set_yscale("log")
            ax.set_ylim(min(values) / 3, max(values) * 3)
        elif values:
            ax.set_ylim(0, max(values) * 1.15)

    def get(workload: str, system: str, variant: str = "") -> Summary | None:
        return r.get(workload, system, variant)

    def val(s: Summary | None, what: str) -> float | None:
        if s is None:
            return None
        if what == "ms":
            return s.per_step_ms
        if what == "rate":
            return s.steps_per_s
        return s.extra.get(what)

    bars(
        axes[0][0],
        f"W1: latency per step ({z.w1_runs} {X} {z.w1_steps} steps, sequential)",
        "ms per step (lower is better)",
        ["W1"],
        {s: [val(get("W1", s), "ms")] for s in SYSTEMS},
    )
    bars(
        axes[0][1],
        f"W2: throughput ({z.w2_runs} {X} {z.w2_steps} steps, concurrent)",
        "steps/s (higher is better)",
        ["W2"],
        {s: [val(get("W2", s), "rate")] for s in SYSTEMS},
    )
    bars(
        axes[0][2],
        f"W3: one run of {z.w3_steps:,} steps: per-step time along the run",
        "ms per step (lower is better)",
        ["first tenth", "last tenth"],
        {s: [val(get("W3", s), "first_ms"), val(get("W3", s), "last_ms")] for s in SYSTEMS},
    )
    bars(
        axes[1][0],
        f"W4: {z.w4_runs} runs with a {z.w4_sleep:g} s sleep: time beyond the sleep",
        "s (lower is better)",
        ["W4"],
        {s: [val(get("W4", s), "overhead_s")] for s in SYSTEMS},
    )
    variants = ["1 process"] + [f"{w} worker" + ("s" if w > 1 else "") for w in z.w5_workers]
    bars(
        axes[1][1],
        f"W5: {z.w5_total:,} dispatched steps by worker processes (in-memory: in-process)",
        "steps/s (higher is better)",
        variants,
        {s: [val(get("W5", s, v), "rate") for v in variants] for s in ("memory", "mongo")},
    )
    w6_variants = [f"{thousands(n)} due" for n in z.w6_parked]
    w6: dict[str, list[float | None]] = {}
    capped: dict[str, list[bool]] = {}
    for system in ("memory", "mongo"):
        found = [get("W6", system, v) for v in w6_variants]
        w6[system] = [s.seconds if s else None for s in found]
        capped[system] = [bool(s and w6_capped(s)) for s in found]
    bars(
        axes[1][2],
        "W6: recovery pass waking N overdue runs (hatched: estimated)",
        "s per sweep (lower is better)",
        w6_variants,
        w6,
        capped,
    )
    fig.suptitle(
        f"pikku-mongo benchmarks, {r.date}: {r.machine['cores']} cores; "
        f"server: {r.server.split(',')[0]}; medians of {r.sizes.reps}",
        fontsize=11,
    )
    from matplotlib.patches import Patch

    handles = [Patch(color=COLOURS[s], label=LABELS[s]) for s in SYSTEMS]
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=9, bbox_to_anchor=(0.5, 0.955))
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
