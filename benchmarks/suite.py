"""``python -m benchmarks``: every workload on the in-memory store, on MongoStore and on
DBOS Transact (W1-W4), medians of repetitions, as a Markdown table and a PNG chart.

The MongoDB server is ``MONGODB_URI`` when set, else an nx-27017 server the suite starts
on a free loopback port and stops at the end. Each repetition runs in a fresh engine on a
fresh store (a new database, dropped afterwards). DBOS runs in a subprocess of its own,
on a new SQLite file per repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from benchmarks import ours
from benchmarks.common import (
    FULL,
    OUT_DIR,
    QUICK,
    REPO_ROOT,
    Measurement,
    ServerInfo,
    Sizes,
    StoreKind,
    Summary,
    machine_info,
    mongo_server,
    server_version,
    summarise,
)
from benchmarks.data_at_rest import sealed_run
from benchmarks.progress import Progress, plan_units
from benchmarks.report import save
from benchmarks.report_markdown import full_markdown
from benchmarks.results import Results

WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "S1", "Q1", "Q2", "T1", "T2", "U1", "A1")
#: The workloads that run on MongoStore alone, and the module that measures each.
MONGO_ONLY = {"Q2": "benchmarks.flow_keys", "T1": "benchmarks.streams", "U1": "benchmarks.updates"}
SYSTEMS = ("memory", "mongo", "dbos")
DBOS_WORKLOADS = ("W1", "W2", "W3", "W4")


def _k(count: int) -> str:
    return f"{count // 1000}k" if count % 1000 == 0 else str(count)


class Suite:
    def __init__(
        self,
        sizes: Sizes,
        workloads: list[str],
        systems: list[str],
        server: ServerInfo | None,
        tmp: Path,
        progress: Progress,
        w6_box: float,
        profile: bool,
        mode: str,
        out_dir: Path = OUT_DIR,
    ) -> None:
        self.z = sizes
        self.workloads = workloads
        self.systems = systems
        self.server = server
        self.tmp = tmp
        self.progress = progress
        self.w6_box = w6_box
        self.profile = profile
        self.out_dir = out_dir
        self.results = Results(
            sizes=sizes,
            mode=mode,
            date=datetime.now(UTC).strftime("%Y-%m-%d"),
            machine=machine_info(),
            server=server.label if server else "none (MongoStore workloads skipped)",
        )

    @property
    def uri(self) -> str | None:
        return self.server.uri if self.server else None

    def _failed(self, what: str, exc: BaseException) -> None:
        message = f"{what} failed: {type(exc).__name__}: {exc}"
        self.progress.write(message)
        self.results.notes.append(message)

    async def repeat(
        self, desc: str, fn: Callable[[], Awaitable[Measurement]]
    ) -> list[Measurement]:
        self.progress.stage(desc)
        out: list[Measurement] = []
        for _ in range(self.z.reps):
            out.append(await fn())
            self.progress.step()
        return out

    async def measure(
        self,
        workload: str,
        system: str,
        variant: str,
        fn: Callable[[], Awaitable[Measurement]],
    ) -> Summary | None:
        desc = f"{workload} {system}" + (f" {variant}" if variant else "")
        try:
            reps = await self.repeat(desc, fn)
        except Exception as exc:
            self._failed(desc, exc)
            return None
        summary = summarise(workload, system, variant, reps)
        self.results.summaries.append(summary)
        return summary

    # ---- the parts ----------------------------------------------------------------

    async def raw_rates(self) -> None:
        assert self.uri is not None
        uri, ops = self.uri, self.z.raw_ops
        version = await server_version(uri)
        self.results.server += f"; the server reports MongoDB version {version}"
        for parallel, label in ((1, "1 at a time"), (16, "16 in flight")):
            try:
                reps = await self.repeat(
                    f"raw find_one_and_update ({label})",
                    lambda p=parallel: ours.raw_find_one_and_update(uri, ops, p),  # type: ignore[misc]
                )
            except Exception as exc:
                self._failed(f"raw find_one_and_update ({label})", exc)
                continue
            self.results.raw.append(summarise("raw", "mongo", label, reps))

    async def floor(self) -> None:
        """The floor and the run document's size along a W3 run (:mod:`benchmarks.floor`)."""
        from benchmarks.floor import floor_section

        assert self.uri is not None
        self.results.floor += await floor_section(
            self.uri, self.z.raw_ops, self.z.w3_steps, self.repeat, self._failed
        )
        self.progress.step()

    async def ours_inline(self, workload: str, kind: StoreKind) -> None:
        z, uri = self.z, self.uri if kind == "mongo" else None
        fns: dict[str, Callable[[], Awaitable[Measurement]]] = {
            "W1": lambda: ours.w1_sequential(kind, uri, z.w1_runs, z.w1_steps),
            "W2": lambda: ours.w2_concurrent(kind, uri, z.w2_runs, z.w2_steps),
            "W3": lambda: ours.w3_long_run(kind, uri, z.w3_steps),
            "W4": lambda: ours.w4_sleepers(kind, uri, z.w4_runs, z.w4_sleep),
        }
        await self.measure(workload, kind, "", fns[workload])
        if workload in ("W1", "W3"):
            sealed = functools.partial(sealed_run, workload, kind, self.uri, self.z)
            await self.measure(workload, kind, "codec", sealed)
        if workload == "W1" and kind == "mongo":
            held = z.w1_held
            await self.measure(
                "W1",
                kind,
                "held",
                lambda: ours.w1_sequential(kind, uri, z.w1_runs, z.w1_steps, held=held),
            )

    async def dbos(self, workload: str) -> None:
        z = self.z
        args = {
            "W1": ["--runs", str(z.w1_runs), "--steps", str(z.w1_steps)],
            "W2": ["--runs", str(z.w2_runs), "--steps", str(z.w2_steps)],
            "W3": ["--steps", str(z.w3_steps)],
            "W4": ["--runs", str(z.w4_runs), "--sleep", str(z.w4_sleep)],
        }[workload]
        workdir = self.tmp / f"dbos-{workload}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.progress.stage(f"{workload} dbos")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        errors = workdir / "stderr.txt"
        reps: list[Measurement] = []
        with errors.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.peer_dbos",
                "--workload",
                workload,
                "--reps",
                str(z.reps),
                "--dir",
                str(workdir),
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                cwd=str(workdir),
                env=env,
            )
            assert proc.stdout is not None
            async for line in proc.stdout:
                text = line.decode().strip()
                if text.startswith("{"):
                    reps.append(Measurement.from_json(json.loads(text)["measurement"]))
                    self.progress.step()
            code = await proc.wait()
        if code != 0 or len(reps) < z.reps:
            tail = errors.read_text(errors="replace")[-1500:]
            self._failed(f"{workload} dbos", RuntimeError(f"exit {code}: {tail}"))
            self.progress.step(z.reps - len(reps))
        if reps:
            self.results.summaries.append(summarise(workload, "dbos", "", reps))

    def ours(self) -> list[tuple[StoreKind, str | None]]:
        """Our stores to measure: in memory, and on MongoDB when there is a server."""
        both: tuple[StoreKind, ...] = ("memory", "mongo")
        return [
            (kind, self.uri if kind == "mongo" else None)
            for kind in both
            if kind in self.systems and (kind == "memory" or self.uri is not None)
        ]

    async def w5(self) -> None:
        z = self.z
        for kind, uri in self.ours():
            await self.measure(
                "W5",
                kind,
                "1 process",
                lambda k=kind, u=uri: ours.w5_in_process(k, u, z.w5_runs, z.w5_steps),  # type: ignore[misc]
            )
        if "mongo" in self.systems and self.uri is not None:
            from benchmarks.dispatch import pickup_latency, w5_workers

            uri = self.uri
            for workers in z.w5_workers:
                variant = f"{workers} worker" + ("s" if workers > 1 else "")
                await self.measure(
                    "W5",
                    "mongo",
                    variant,
                    lambda n=workers: w5_workers(uri, n, z.w5_runs, z.w5_steps),  # type: ignore[misc]
                )
            await self.measure("W5", "mongo", "pickup", lambda: pickup_latency(uri, 15))

    async def w6(self) -> None:
        for kind, uri in self.ours():
            for count in self.z.w6_parked:
                for mode in ours.W6_MODES:
                    await self._w6_one(kind, uri, count, mode)

    async def _w6_one(self, kind: StoreKind, uri: str | None, count: int, mode: str) -> None:
        variant = f"{_k(count)} {mode}"
        self.progress.stage(f"W6 {kind} {variant}")
        try:
            reps, parking = await ours.w6_sweeps(
                kind, uri, count, mode, self.z.reps, self.w6_box, self.progress.step
            )
        except Exception as exc:
            self._failed(f"W6 {kind} {variant}", exc)
            return
        self.progress.step(self.z.reps - len(reps))  # a capped size ran once
        capped = any(m.extra.get("capped") for m in reps)
        note = "capped" if capped else ""
        self.results.summaries.append(summarise("W6", kind, variant, reps, note))
        self.results.parking_s[f"{kind} {variant}"] = parking

    async def s1(self) -> None:
        """Schedule fire latency: one repetition of 10 fires per store (about 10 s each)."""
        from benchmarks.schedule_latency import fire_latency

        for kind, uri in self.ours():
            self.progress.stage(f"S1 {kind}")
            try:
                measured = await fire_latency(kind, uri, 10)
            except Exception as exc:
                self._failed(f"S1 {kind}", exc)
                continue
            finally:
                self.progress.step()
            self.results.summaries.append(summarise("S1", kind, "", [measured]))

    async def q1(self) -> None:
        """Admission from a queue ``q1_depth`` runs deep, with and without a limit."""
        from benchmarks.admission import admission_rate

        for kind, uri in self.ours():
            for limit in self.z.q1_limits:
                variant = f"{_k(self.z.q1_depth)} deep, " + (
                    f"concurrency={limit}" if limit else "no limit"
                )
                self.progress.stage(f"Q1 {kind} {variant}")
                try:
                    measured = await admission_rate(kind, uri, self.z.q1_depth, limit)
                except Exception as exc:
                    self._failed(f"Q1 {kind} {variant}", exc)
                    continue
                finally:
                    self.progress.step()
                self.results.summaries.append(summarise("Q1", kind, variant, [measured]))

    async def mongo_only(self, workload: str) -> None:
        """A MongoStore-only workload, each part once: T1 streams
        (:mod:`benchmarks.streams`), Q2 flow control per key (:mod:`benchmarks.flow_keys`),
        U1 an update's round trip (:mod:`benchmarks.updates`)."""
        if "mongo" in self.systems and self.uri is not None:
            measure_all = importlib.import_module(MONGO_ONLY[workload]).measure_all
            sized = {"sizes": self.z} if workload == "Q2" else {}
            await measure_all(
                self.uri, self.progress, self._failed, self.results.summaries, **sized
            )

    async def t2(self) -> None:
        """A month of sleeps on a VirtualClock (:mod:`benchmarks.virtual_time`)."""
        from benchmarks.virtual_time import thirty_days

        if "memory" in self.systems:
            await self.measure("T2", "memory", "", thirty_days)

    async def a1(self) -> None:
        """A durable pydantic-ai agent against plain steps (:mod:`benchmarks.agents`)."""
        if importlib.util.find_spec("pydantic_ai") is None:
            self._failed("A1", RuntimeError("pydantic-ai is not installed: pip install '.[ai]'"))
            return
        from benchmarks.agents import agent_steps

        z = self.z
        for kind, uri in self.ours():
            await self.measure(
                "A1",
                kind,
                "",
                lambda k=kind, u=uri: agent_steps(k, u, z.a1_runs, z.a1_turns),  # type: ignore[misc]
            )

    async def profile_w1(self) -> None:
        from benchmarks.profile_w1 import profile_w1, summary_markdown

        assert self.uri is not None
        self.progress.stage("profile W1 mongo")
        try:
            prof = await profile_w1(self.uri, self.z.profile_runs, self.z.w1_steps)
        except Exception as exc:
            self._failed("profile of W1", exc)
            return
        finally:
            self.progress.step()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "profile_w1.txt").write_text(prof.text)
        w1 = self.results.get("W1", "mongo")
        self.results.profile_md = summary_markdown(prof, w1.per_step_ms if w1 else None)

    async def run(self) -> Results:
        began = time.perf_counter()
        mongo = "mongo" in self.systems and self.uri is not None
        if mongo:
            await self.raw_rates()
            await self.floor()
        for workload in self.workloads:
            if workload in ("W1", "W2", "W3", "W4"):
                if "memory" in self.systems:
                    await self.ours_inline(workload, "memory")
                if mongo:
                    await self.ours_inline(workload, "mongo")
                if "dbos" in self.systems:
                    await self.dbos(workload)
                if workload == "W1" and mongo and self.profile:
                    await self.profile_w1()
            elif workload in MONGO_ONLY:
                await self.mongo_only(workload)
            else:  # every other workload has a method of its name
                await getattr(self, workload.lower())()
        self.results.runtime_s = time.perf_counter() - began
        return self.results


@contextlib.contextmanager
def maybe_server(needed: bool, tmp: Path) -> Iterator[ServerInfo | None]:
    if not needed:
        yield None
        return
    with mongo_server(tmp) as server:
        yield server


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    parser.add_argument("--reps", type=int, help="repetitions per measurement (default 3)")
    parser.add_argument(
        "--only", help=f"comma-separated workloads to run (default all: {','.join(WORKLOADS)})"
    )
    parser.add_argument(
        "--systems", help=f"comma-separated systems (default all: {','.join(SYSTEMS)})"
    )
    parser.add_argument(
        "--w6-box",
        type=float,
        default=25.0,
        help="seconds a W6 sweep may take before it is capped and estimated (default 25)",
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile of W1")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--publish", action="store_true", help="also copy the chart to docs/benchmarks.png"
    )
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    parser.add_argument(
        "--write-concern",
        choices=("durable", "w1"),
        default="durable",
        help="MongoStore's write concern: its durable default (majority, journaled), or "
        "w=1 (reads then use read concern local); W5's worker processes keep the default",
    )
    parser.add_argument(
        "--targeted-polling",
        action="store_true",
        help="MongoStore(targeted_polling=True) in every process, W5's workers included: "
        "what the job and line indexes of a sharded cluster cost here",
    )
    return parser.parse_args(argv)


def _pick(text: str | None, allowed: tuple[str, ...], what: str) -> list[str]:
    if not text:
        return list(allowed)
    picked = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in picked if t not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(allowed)})")
    return [t for t in allowed if t in picked]


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.write_concern == "w1":
        from pymongo import WriteConcern

        from benchmarks import common

        common.STORE_OPTIONS["write_concern"] = WriteConcern(w=1)
    if args.targeted_polling:
        from benchmarks import common

        common.STORE_OPTIONS["targeted_polling"] = True
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = replace(sizes, reps=max(1, args.reps))
    workloads = _pick(args.only, WORKLOADS, "workloads")
    systems = _pick(args.systems, SYSTEMS, "systems")
    missing = [m for m in ("matplotlib", "tqdm") if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"missing {', '.join(missing)}: pip install -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    if (
        "mongo" in systems
        and not os.environ.get("MONGODB_URI")
        and importlib.util.find_spec("nx_27017") is None
    ):
        print(
            "no MongoDB server: set MONGODB_URI, or pip install nx-27017 (in the bench "
            "extra) for the suite to start one; or run --systems memory,dbos",
            file=sys.stderr,
        )
        return 2
    if "dbos" in systems and importlib.util.find_spec("dbos") is None:
        print("dbos is not installed (pip install -e '.[bench]'): skipping DBOS", file=sys.stderr)
        systems.remove("dbos")
    progress = Progress(plan_units(sizes, workloads, systems), enabled=not args.no_progress)
    try:
        with tempfile.TemporaryDirectory(prefix="pikku-bench-") as tmp:
            with maybe_server("mongo" in systems, Path(tmp)) as server:
                suite = Suite(
                    sizes,
                    workloads,
                    systems,
                    server,
                    Path(tmp),
                    progress,
                    args.w6_box,
                    profile=not args.no_profile,
                    mode="quick" if args.quick else "full",
                    out_dir=args.out,
                )
                results = asyncio.run(suite.run())
    finally:
        progress.close()
    md, js, png = save(results, args.out)
    print(full_markdown(results))
    print(f"Written: {md}, {js}, {png}", file=sys.stderr)
    if args.publish:
        docs = REPO_ROOT / "docs"
        docs.mkdir(exist_ok=True)
        shutil.copyfile(png, docs / "benchmarks.png")
        print(f"Copied the chart to {docs / 'benchmarks.png'}", file=sys.stderr)
    return 0
