"""The benchmark report's floor section: W1-W3 on MongoStore beside what the server
needs for one guarded write (:mod:`benchmarks.floor`), per step, with ratios."""

from __future__ import annotations

from benchmarks.common import Summary
from benchmarks.floor import INDEXED
from benchmarks.numbers import X, num, ratio
from benchmarks.results import Results

SEQUENTIAL = "1 at a time"


def _per_step(s: Summary, name: str, scale: float = 1000.0) -> float | None:
    value = s.extra.get(name)
    return None if value is None or not s.steps else value / s.steps * scale


def _row(label: str, s: Summary, floor: Summary | None) -> str:
    wall = s.per_step_ms
    cpu = _per_step(s, "cpu_s")
    server = _per_step(s, "server_cpu_s")
    floor_server = _per_step(floor, "server_cpu_s") if floor else None
    sent = _per_step(s, "bytes", 1.0)
    written = _per_step(s, "server_written", 1.0)
    cells = [
        label,
        num(wall),
        ratio(wall, floor.per_step_ms if floor else None),
        num(cpu),
        num(server),
        ratio(server, floor_server),
        num(sent),
        num(written),
        num(s.commands_per_step) if s.commands_per_step is not None else "n/a",
    ]
    return "| " + " | ".join(cells) + " |"


def floor_markdown(r: Results) -> str:
    """The floor table, or "" when the floor was not measured."""
    seq, indexed = r.floor_of(SEQUENTIAL), r.floor_of(INDEXED)
    bulk = next((s for s in r.floor if s.workload == "floor" and s not in (seq, indexed)), None)
    if seq is None and bulk is None:
        return ""
    lines = [
        "| per step (MongoStore) | wall ms | ÷ floor | client CPU ms | server CPU ms "
        "| ÷ floor | bytes sent | server bytes written | commands |",
        "| --- |" + " ---: |" * 8,
    ]
    if seq is not None:
        lines.append(_row(f"floor: one guarded update, {SEQUENTIAL}", seq, seq))
        for workload, label in (("W3", "W3, 1 long run"), ("W1", "W1, runs one after another")):
            s = r.get(workload, "mongo")
            if s is not None:
                lines.append(_row(label, s, seq))
        if indexed is not None:
            lines.append(_row("floor, with the run collection's indexes", indexed, seq))
    if bulk is not None:
        lines.append(_row(f"floor: guarded updates in unordered {bulk.variant}", bulk, bulk))
        w2 = r.get("W2", "mongo")
        if w2 is not None:
            lines.append(_row("W2, runs started together", w2, bulk))
    text = "\n".join(lines)
    size = next((s for s in r.floor if s.workload == "docsize"), None)
    if size is not None:
        e = size.extra
        text += (
            f"\n\nThe run document along one run of {size.steps:,} inline steps: "
            f"{num(e.get('doc_first', 0))} bytes in its first tenth, "
            f"{num(e.get('doc_last', 0))} in its last, {num(e.get('doc_max', 0))} at most"
        )
        if "written_first" in e:
            first, last = e["written_first"], e["written_last"]
            growth = f" ({X}{last / first:.2f})" if first else ""
            text += (
                f"; the server wrote {num(first)} bytes per step over the first tenth "
                f"and {num(last)} over the last{growth}"
            )
        text += "."
    text += (
        "\n\nFloor: `update_one` by `_id` with the run's status and token in the "
        "filter, `$set` of two fields, the store's write concern, on a document the "
        "size of a fresh run document; ÷ floor divides by the floor of the same row "
        "group (W1, W3: one at a time; W2: bulks, per write). The indexed floor is "
        "the sequential one in a collection with the run indexes (none of whose keys "
        "it changes), divided by the plain floor: what keeping them costs a server "
        "that rewrites every index of a document it updates (nx-27017; MongoDB skips "
        "unchanged keys). Client CPU is this process's time; server CPU the server "
        "process's (user + system, from `/proc`, only when the suite started the "
        "server); bytes sent: BSON of the write commands; server bytes written: the "
        "server process's `wchar` (its storage and its replies). All in the same run,"
        " on a machine whose cores other processes may share: compare ratios, not "
        "absolute figures."
    )
    return text
