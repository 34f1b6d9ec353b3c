"""Where the time of an inline step goes on MongoStore: one W1 run under cProfile.

Profiles only the timed loop (workflows started and awaited one after another), then
sorts every function's own time into buckets: waiting for the server (the event loop's
``epoll``), socket calls, PyMongo and BSON, the engine, the store and asyncio (the time
of builtins and other stdlib functions goes to the bucket of whoever called them).
Standalone: ``python -m benchmarks.profile_w1 [--runs 100]`` (starts its own server
unless ``MONGODB_URI`` is set); the suite runs it too and adds it to its report.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import INLINE_WF, OUT_DIR, mongo_server, open_store, register_inline
from engine_core import Engine

WAITING = "waiting for the server (event loop idle in epoll)"
SOCKET = "socket send/recv calls (on 2 cores, includes yielding the CPU to the server)"
PYMONGO = "PyMongo and BSON (commands, pool, encode/decode)"
STORE = "pikku_mongo (documents, filters, checks)"
ENGINE = "engine_core (replay, steps, leases, values)"
ASYNCIO = "asyncio event loop (tasks, futures, callbacks)"
RETRY = "tenacity (the store's retry decorator)"
BENCH = "the benchmark itself (its loop and no-op steps)"
OTHER = "unattributed"
BUCKETS = [WAITING, SOCKET, PYMONGO, STORE, RETRY, ENGINE, ASYNCIO, BENCH, OTHER]

Func = tuple[str, int, str]


Test = Callable[[str, str], bool]  # (filename, function name) -> whether it holds


def waiting(filename: str, name: str) -> bool:
    return "epoll" in name and "poll" in name


def builtin(*words: str) -> Test:
    """A builtin (cProfile's ``~`` file) whose name holds one of ``words``."""
    return lambda filename, name: filename == "~" and any(w in name for w in words)


def in_file(*parts: str) -> Test:
    """A function whose file's path holds one of ``parts``."""
    return lambda filename, _name: any(p in filename for p in parts)


def in_asyncio(filename: str, _name: str) -> bool:
    return "/asyncio/" in filename or filename.endswith("selectors.py")


def classifier(rules: Sequence[tuple[Test, str]]) -> Callable[[Func], str | None]:
    """A function's own bucket: that of the first rule it meets, or None (builtins and
    the stdlib), whose time goes to whoever called it."""

    def own(func: Func) -> str | None:
        filename, _, name = func
        for test, bucket in rules:
            if test(filename, name):
                return bucket
        return None

    return own


_own_bucket = classifier(
    [
        (waiting, WAITING),
        (builtin("socket"), SOCKET),
        (in_file("/pymongo/", "/bson/"), PYMONGO),
        (in_file("/pikku_mongo/"), STORE),
        (in_file("/tenacity/"), RETRY),
        (in_file("/engine_core/"), ENGINE),
        (in_file("/benchmarks/"), BENCH),
        (in_asyncio, ASYNCIO),
    ]
)


def attribute(
    raw: dict[Func, Any],
    own_bucket: Callable[[Func], str | None] = _own_bucket,
    buckets: Sequence[str] = BUCKETS,
    other: str = OTHER,
) -> dict[str, float]:
    """Own time per bucket (``own_bucket``: a function's own bucket, None for one whose
    time goes to its callers); a builtin's or a stdlib function's own time is shared
    among its callers (by the time it spent for each) up to the first caller with a
    bucket."""
    memo: dict[Func, dict[str, float]] = {}

    def shares(func: Func, seen: frozenset[Func]) -> dict[str, float]:
        if func in memo:
            return memo[func]
        own = own_bucket(func)
        if own is not None:
            result = {own: 1.0}
        else:
            callers: dict[Func, Any] = raw[func][4] if func in raw else {}
            weights = {c: float(v[2]) for c, v in callers.items() if c not in seen}
            total = sum(weights.values())
            if not callers or total <= 0:
                result = {other: 1.0}
            else:
                result = {}
                for caller, weight in weights.items():
                    for bucket, part in shares(caller, seen | {func}).items():
                        result[bucket] = result.get(bucket, 0.0) + part * weight / total
        memo[func] = result
        return result

    totals = dict.fromkeys(buckets, 0.0)
    for func, (_cc, _calls, own, _cum, _callers) in raw.items():
        for bucket, part in shares(func, frozenset({func})).items():
            totals[bucket] += own * part
    return totals


@dataclass
class Profile:
    steps: int
    wall_s: float
    buckets: dict[str, float]  # seconds of own time
    top: list[tuple[str, float, int]] = field(default_factory=list)  # (function, s, calls)
    commands: dict[str, int] = field(default_factory=dict)
    text: str = ""

    def per_step_us(self, seconds: float) -> float:
        return seconds / self.steps * 1e6


def function_label(func: Func) -> str:
    """``file:line(name)`` with the file's last two path parts; a builtin's name."""
    filename, line, name = func
    if filename == "~":
        return name
    parts = Path(filename).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else filename
    return f"{short}:{line}({name})"


async def profile_w1(uri: str, runs: int, steps: int = 10) -> Profile:
    async with open_store("mongo", uri, "profile") as (store, counter, _):
        assert counter is not None
        engine = Engine(store)
        register_inline(engine)
        async with engine:
            profiler = cProfile.Profile()
            counter.reset()
            began = time.perf_counter()
            profiler.enable()
            for _ in range(runs):
                run_id = await engine.start(INLINE_WF, {"steps": steps})
                await engine.result(run_id, timeout=600)
            profiler.disable()
            wall = time.perf_counter() - began
            commands = counter.snapshot()
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    buckets = attribute(raw)
    rows = [(function_label(func), v[2], int(v[1])) for func, v in raw.items()]
    rows.sort(key=lambda r: r[1], reverse=True)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    return Profile(runs * steps, wall, buckets, rows[:15], commands, text.getvalue())


def summary_markdown(profile: Profile, unprofiled_ms: float | None = None) -> str:
    """The profile as a Markdown section."""
    per_step = profile.wall_s / profile.steps * 1000
    lines = [
        f"One W1 run on MongoStore under cProfile ({profile.steps} inline steps): "
        f"{per_step:.2f} ms per step with the profiler on"
        + (f" ({unprofiled_ms:.2f} ms without it)." if unprofiled_ms else "."),
        "",
        "| where the time goes (own time) | µs per step | share |",
        "| --- | ---: | ---: |",
    ]
    total = sum(profile.buckets.values()) or 1.0
    for name, seconds in sorted(profile.buckets.items(), key=lambda kv: -kv[1]):
        if seconds <= 0:
            continue
        lines.append(f"| {name} | {profile.per_step_us(seconds):,.0f} | {seconds / total:.0%} |")
    cmds = sum(profile.commands.values())
    by_name = ", ".join(
        f"{name} {count / profile.steps:.2f}"
        for name, count in sorted(profile.commands.items(), key=lambda kv: -kv[1])
    )
    lines += [
        "",
        f"Commands per step: {cmds / profile.steps:.2f} ({by_name}).",
        "",
        "Top functions by own time:",
        "",
        "| function | µs per step | calls per step |",
        "| --- | ---: | ---: |",
    ]
    for label, seconds, calls in profile.top[:10]:
        lines.append(
            f"| `{label}` | {profile.per_step_us(seconds):,.0f} | {calls / profile.steps:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pikku-profile-") as tmp:
        with mongo_server(Path(tmp)) as server:
            profile = asyncio.run(profile_w1(server.uri, args.runs))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "profile_w1.txt").write_text(profile.text)
    print(summary_markdown(profile))
    print(f"(full pstats listing in {OUT_DIR / 'profile_w1.txt'})")


if __name__ == "__main__":
    main()
