"""The benchmark report's Markdown: the table of every workload (ours in memory and on
MongoDB against DBOS), the server's own rate, the commands per step, the notes and the
context of the run."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.common import Summary
from benchmarks.flow_keys import q2_rows
from benchmarks.numbers import X, num, ratio, thousands
from benchmarks.report_floor import floor_markdown
from benchmarks.results import SYSTEMS, Results

Row = tuple[str, str, str, str, str, str, str, str]


def ms(s: Summary | None) -> float | None:
    return None if s is None else s.per_step_ms


def secs(s: Summary | None) -> float | None:
    return None if s is None else s.seconds


def _cmds(s: Summary | None) -> str:
    if s is None or s.commands_per_step is None:
        return "n/a"
    return num(s.commands_per_step)


def w6_seconds(s: Summary) -> float:
    return s.seconds


def w6_capped(s: Summary) -> bool:
    return s.extra.get("capped", 0.0) > 0


def _two(s: Summary | None, first: str, second: str) -> str:
    """Two of a summary's extra figures, as "first (second)"; "n/a" without one."""
    if s is None:
        return "n/a"
    return f"{num(s.extra.get(first, 0))} ({num(s.extra.get(second, 0))})"


def _sealed_row(r: Results, workload: str, label: str) -> list[Row]:
    """The row of ``workload`` with every value sealed by ``AesGcmCodec`` (its "codec"
    variant): client CPU per step, and its ratio to the plain run's (the codec's cost)."""
    sealed = [r.get(workload, system, "codec") for system in ("memory", "mongo")]
    if all(s is None for s in sealed):
        return []

    def cpu(s: Summary | None) -> float | None:
        return None if s is None or not s.steps else s.extra.get("cpu_s", 0) * 1000 / s.steps

    def shown(s: Summary | None, system: str) -> str:
        mine, plain = cpu(s), cpu(r.get(workload, system))
        if mine is None:
            return "n/a"
        return num(mine) + (f" ({X}{mine / plain:.2f})" if plain else "")

    return [
        (
            label,
            "client CPU ms per step (÷ plain)",
            shown(sealed[0], "memory"),
            shown(sealed[1], "mongo"),
            "—",
            "—",
            "—",
            _cmds(sealed[1]),
        )
    ]


def _rows(r: Results) -> list[Row]:
    z = r.sizes
    rows: list[Row] = []

    def trio(workload: str, variant: str = "") -> tuple[Summary | None, ...]:
        return tuple(r.get(workload, system, variant) for system in SYSTEMS)

    # W1: latency per step.
    mem, mongo, dbos = trio("W1")
    rows.append(
        (
            f"W1: {z.w1_runs} workflows {X} {z.w1_steps} inline steps, one after another",
            "ms per step",
            num(mem.per_step_ms) if mem else "n/a",
            num(mongo.per_step_ms) if mongo else "n/a",
            num(dbos.per_step_ms) if dbos else "n/a",
            ratio(ms(mongo), ms(dbos)),
            ratio(ms(mem), ms(dbos)),
            _cmds(mongo),
        )
    )
    held = r.get("W1", "mongo", "held")
    if held is not None:
        grow = f" ({X}{held.per_step_ms / mongo.per_step_ms:.2f} of W1)" if mongo else ""
        rows.append(
            (
                f"W1 on a database already holding {z.w1_held:,} steps of finished runs",
                "ms per step (÷ W1)",
                "—",
                num(held.per_step_ms) + grow,
                "—",
                ratio(ms(held), ms(dbos)),
                "—",
                _cmds(held),
            )
        )
    rows += _sealed_row(r, "W1", "W1 with every value sealed by AesGcmCodec")
    # W2: throughput.
    mem, mongo, dbos = trio("W2")
    rows.append(
        (
            f"W2: {z.w2_runs} workflows {X} {z.w2_steps} inline steps, started together",
            "steps/s",
            num(mem.steps_per_s) if mem else "n/a",
            num(mongo.steps_per_s) if mongo else "n/a",
            num(dbos.steps_per_s) if dbos else "n/a",
            ratio(secs(mongo), secs(dbos)),
            ratio(secs(mem), secs(dbos)),
            _cmds(mongo),
        )
    )

    # W3: cost growth along one run.
    def w3(s: Summary | None) -> str:
        if s is None:
            return "n/a"
        return f"{num(s.per_step_ms)} ({X}{s.extra.get('growth', float('nan')):.2f})"

    mem, mongo, dbos = trio("W3")
    rows.append(
        (
            f"W3: 1 workflow {X} {z.w3_steps:,} inline steps",
            "ms per step (last tenth ÷ first tenth)",
            w3(mem),
            w3(mongo),
            w3(dbos),
            ratio(ms(mongo), ms(dbos)),
            ratio(ms(mem), ms(dbos)),
            _cmds(mongo),
        )
    )

    rows += _sealed_row(r, "W3", "W3 with every value sealed by AesGcmCodec")

    # W4: timer overhead.
    def over(s: Summary | None) -> float | None:
        return None if s is None else s.extra.get("overhead_s")

    def w4(s: Summary | None) -> str:
        return "n/a" if s is None else f"{num(over(s))} ({num(s.seconds)})"

    mem, mongo, dbos = trio("W4")
    rows.append(
        (
            f"W4: {z.w4_runs} workflows: step, sleep {z.w4_sleep:g} s, step; started together",
            f"s beyond the {z.w4_sleep:g} s sleep (wall s)",
            w4(mem),
            w4(mongo),
            w4(dbos),
            ratio(over(mongo), over(dbos)),
            ratio(over(mem), over(dbos)),
            _cmds(mongo),
        )
    )

    # W5: dispatched steps, in one process that is its own worker, then across processes.
    one = r.get("W5", "mongo", "1 process")
    mem = r.get("W5", "memory", "1 process")
    rows.append(
        (
            f"W5: {z.w5_total:,} dispatched steps ({z.w5_runs} workflows {X} "
            f"{z.w5_steps}), one process that is its own worker",
            "steps/s",
            num(mem.steps_per_s) if mem else "n/a",
            num(one.steps_per_s) if one else "n/a",
            "—",
            "—",
            "—",
            _cmds(one),
        )
    )
    for workers in z.w5_workers:
        variant = f"{workers} worker" + ("s" if workers > 1 else "")
        mongo = r.get("W5", "mongo", variant)
        cell = "n/a"
        if mongo is not None:
            cell = num(mongo.steps_per_s)
            if one is not None:
                cell += f" ({X}{mongo.steps_per_s / one.steps_per_s:.2f})"
        rows.append(
            (
                f"W5: the same, started by a client, run by {variant} beside it",
                "steps/s (÷ one process)",
                "—",
                cell,
                "—",
                "—",
                "—",
                _cmds(mongo),
            )
        )
    pickup = r.get("W5", "mongo", "pickup")
    if pickup is not None:
        rows.append(
            (
                "W5: a dispatched step started by an idle worker in another process",
                "ms, median (max)",
                "—",
                f"{num(pickup.extra.get('median_ms', 0))} ({num(pickup.extra.get('max_ms', 0))})",
                "—",
                "—",
                "—",
                "—",
            )
        )

    # S1: a schedule's fire to its run.
    fire_cells = [
        _two(r.get("S1", system), "median_ms", "max_ms") for system in ("memory", "mongo")
    ]
    if any(cell != "n/a" for cell in fire_cells):
        rows.append(
            (
                "S1: an every=1s schedule's fire time to its run recorded (10 fires)",
                "ms, median (max)",
                fire_cells[0],
                fire_cells[1],
                "—",
                "—",
                "—",
                "—",
            )
        )

    # Q1: admission from a deep queue.
    for limit in z.q1_limits:
        variant = f"{thousands(z.q1_depth)} deep, " + (
            f"concurrency={limit}" if limit else "no limit"
        )
        q1_cells = []
        q1_cmds = "n/a"
        for system in ("memory", "mongo"):
            q1 = r.get("Q1", system, variant)
            q1_cells.append("n/a" if q1 is None else num(q1.extra.get("admitted_per_s", 0)))
            if q1 is not None and system == "mongo" and q1.steps:
                q1_cmds = num(sum(q1.commands.values()) / q1.steps)
        if any(cell != "n/a" for cell in q1_cells):
            rows.append(
                (
                    f"Q1: admission from a queue {variant} (1-step runs, all driven here)",
                    "runs admitted/s",
                    q1_cells[0],
                    q1_cells[1],
                    "—",
                    "—",
                    "—",
                    q1_cmds,
                )
            )

    rows += q2_rows(r)

    # T1: streams.
    t1_rows: tuple[tuple[str, str, str, Callable[[Summary], str]], ...] = (
        ("ride", "T1: a body's stream write followed by a step", "extra write commands",
         lambda t: num(t.extra.get("extra_commands_per_write", 0))),
        ("reader", "T1: a stream entry seen by a reader in another process", "ms, median (max)",
         lambda t: f"{num(t.extra.get('median_ms', 0))} ({num(t.extra.get('max_ms', 0))})"),
        ("size", "T1: run document growth after 10,000 entries in one stream",
         "bytes (entries/s)",
         lambda t: f"{num(t.extra.get('run_doc_growth_bytes', 0))} "
         f"({num(t.extra.get('entries_per_s', 0))})"),
    )  # fmt: skip
    for variant, title, unit, render in t1_rows:
        t1 = r.get("T1", "mongo", variant)
        if t1 is not None:
            rows.append((title, unit, "—", render(t1), "—", "—", "—", "—"))

    # U1: an update's round trip.
    u1 = r.get("U1", "mongo", "round trip")
    if u1 is not None:
        e = u1.extra
        rows.append(
            (
                "U1: an update's round trip (caller → parked run → reply → caller)",
                f"ms p50 ({X} floor); the trip's commands (before the answer, in all)",
                "—",
                f"{num(e.get('p50_ms', 0))} ({num(e.get('p50_over_floor', 0))}{X}); "
                f"{num(e.get('round_trip_commands', 0))} "
                f"({num(e.get('commands_before_answer', 0))}, "
                f"{num(e.get('commands_in_all', 0))})",
                "—", "—", "—", "—",
            )
        )  # fmt: skip
    # T2: a month of sleeps on a virtual clock (the in-memory store only).
    t2 = r.get("T2", "memory")
    if t2 is not None:
        rows.append(
            (
                "T2: a workflow sleeping 30 times for a day each, on a VirtualClock",
                "real ms to its result (CPU ms)",
                _two(t2, "real_ms", "cpu_ms"),
                "refused",
                "—",
                "—",
                "—",
                "—",
            )
        )

    # A1: a durable agent against plain steps.
    a1_cells = [
        _two(r.get("A1", system), "extra_cpu_ms", "cpu_ms") for system in ("memory", "mongo")
    ]
    a1_mongo = r.get("A1", "mongo")
    a1_cmds = (
        "n/a"
        if a1_mongo is None
        else f"{num(a1_mongo.extra.get('commands_per_step', 0))} "
        f"({num(a1_mongo.extra.get('extra_commands_per_step', 0))} beyond)"
    )
    if any(cell != "n/a" for cell in a1_cells):
        rows.append(
            (
                f"A1: a durable agent, {z.a1_runs} runs {X} {2 * z.a1_turns + 1} model "
                "requests and tool calls, against as many plain ctx.step steps",
                "CPU ms per step beyond a plain step (all in)",
                a1_cells[0],
                a1_cells[1],
                "—",
                "—",
                "—",
                a1_cmds,
            )
        )

    # W6: recovery passes over parked runs.
    titles = {
        "due": "W6: one recovery pass over {n} runs whose sleeps fell due",
        "re-arm": "W6: startup pass re-arming {n} sleeps not yet due",
    }
    for mode, title in titles.items():
        for count in z.w6_parked:
            variant = f"{thousands(count)} {mode}"
            cells: list[str] = []
            cmds = "n/a"
            for system in ("memory", "mongo"):
                s = r.get("W6", system, variant)
                if s is None:
                    cells.append("n/a")
                    continue
                per_run = s.seconds / count * 1e6
                text = f"{num(s.seconds)} ({num(per_run)} µs)"
                if w6_capped(s):
                    text = f"≈{text} est.†"
                cells.append(text)
                if system == "mongo" and s.commands_per_step is not None:
                    cmds = num(s.commands_per_step)
            rows.append(
                (
                    title.format(n=f"{count:,}"),
                    "s per pass (µs per run)",
                    cells[0],
                    cells[1],
                    "—",
                    "—",
                    "—",
                    cmds,
                )
            )
    return rows


def table_markdown(r: Results) -> str:
    header = (
        "| workload | measure | ours, in-memory | ours, MongoStore | DBOS, SQLite "
        "| ours/DBOS, MongoStore | ours/DBOS, in-memory | MongoDB commands per step |"
    )
    lines = [header, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ran = [row for row in _rows(r) if any(c not in ("n/a", "—") for c in row[2:])]
    lines += ["| " + " | ".join(row) + " |" for row in ran]
    return "\n".join(lines)


def raw_markdown(r: Results) -> str:
    if not r.raw:
        return ""
    lines = [
        "| the server alone: `find_one_and_update` ($inc, return the document) "
        "| ops/s | ms per op |",
        "| --- | ---: | ---: |",
    ]
    for s in r.raw:
        lines.append(f"| {s.variant} | {num(s.steps_per_s)} | {num(s.per_step_ms)} |")
    text = "\n".join(lines)
    w1 = r.get("W1", "mongo")
    seq = r.raw[0]
    if w1 is not None and w1.commands_per_step:
        floor = w1.commands_per_step * seq.per_step_ms
        text += (
            f"\n\nAt that sequential rate, W1's {num(w1.commands_per_step)} commands per step "
            f"cost ≈{num(floor)} ms of server round trips; W1 measured "
            f"{num(w1.per_step_ms)} ms per step"
        )
        cpu = w1.extra.get("cpu_s")
        if cpu is not None:
            text += (
                f", of which {num(cpu / w1.steps * 1000)} ms was this process's CPU time "
                "(engine, store, PyMongo, asyncio)"
            )
        text += "."
    return text


def commands_markdown(r: Results) -> str:
    """MongoDB commands per step of each MongoStore workload, by command name."""
    mongo = [s for s in r.summaries if s.system == "mongo" and s.commands]
    if not mongo:
        return ""
    names = ["update", "findAndModify", "insert", "find", "aggregate", "getMore"]
    lines = [
        "| MongoStore workload | " + " | ".join(names) + " | other | all |",
        "| --- |" + " ---: |" * (len(names) + 2),
    ]
    for s in mongo:
        steps = s.steps or 1
        cells = [num(s.commands.get(n, 0) / steps, 2) for n in names]
        other = sum(v for n, v in s.commands.items() if n not in names) / steps
        total = sum(s.commands.values()) / steps
        label = s.workload + (f", {s.variant}" if s.variant else "")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {num(other, 2)} | {num(total)} |")
    return "\n".join(lines)


def notes_markdown(r: Results) -> str:
    notes = [
        "Ratios are ours ÷ DBOS in time for the same work (W1-W3 time per step, W4 time "
        "beyond the sleep): below 1 means ours is faster.",
        "Commands per step: every command the MongoStore clients sent during the timed "
        "part (pymongo command monitoring), divided by the steps done; W5 adds up the "
        "workers' commands and the client's starts.",
        "W3: the figure in brackets is the per-step time of the run's last tenth divided "
        "by its first tenth (1.00: no growth along the run).",
        "W5 runs each workflow's steps one after another and the workflows side by side; "
        "worker processes and the server share this machine's cores.",
    ]
    if any(w6_capped(s) for s in r.summaries if s.workload == "W6"):
        notes.append(
            "† capped: that sweep did not finish within its time box, so it ran once and "
            "was cancelled; the time shown is the box's time scaled by the share of the "
            "parked steps it had visited (assuming the remaining pages cost what the "
            "first ones did)."
        )
    notes += r.notes
    return "\n".join(f"- {n}" for n in notes)


def context_markdown(r: Results) -> str:
    m = r.machine
    mode = "full sizes" if r.mode == "full" else "quick sizes (`--quick`)"
    return (
        f"Run on {r.date}, {mode}, medians of {r.sizes.reps} repetitions, "
        f"{r.runtime_s / 60:.1f} min in all.  \n"
        f"Machine: {m['cores']} cores, {m['cpu']}, {m['memory']} memory, {m['os']}; "
        f"Python {m['python']}, pymongo {m['pymongo']}, pikku-mongo {m['pikku-mongo']}, "
        f"dbos {m['dbos']}.  \n"
        f"MongoDB server: {r.server}."
    )


def full_markdown(r: Results) -> str:
    parts = [
        "# pikku-mongo benchmarks",
        "",
        context_markdown(r),
        "",
        table_markdown(r),
        "",
        raw_markdown(r),
        "",
    ]
    floor = floor_markdown(r)
    if floor:
        parts += ["### The floor: one guarded write", "", floor, ""]
    parts += [
        notes_markdown(r),
        "",
        "### MongoDB commands per step, by command",
        "",
        commands_markdown(r),
    ]
    if r.profile_md:
        parts += ["", "## Where an inline step's time goes (MongoStore, W1)", "", r.profile_md]
    return "\n".join(parts).rstrip() + "\n"
