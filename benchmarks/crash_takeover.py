"""Time from a worker's SIGKILL to its run finishing on another worker, by ``lease_ttl``.

A worker runs the "crashy" workflow of the chaos tests and is killed in the middle of an
inline step; a second worker (started at once) takes the run over when the run's lease
has lapsed and its recovery pass (every ``lease_ttl / 2``) finds it. Prints, per
``lease_ttl``, the median over the repetitions of: kill -> lost step restarted, and kill
-> run completed. Usage: python -m benchmarks.crash_takeover [--ttls 1 2 4] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from engine_core import Engine
from pikku_mongo import MongoStore
from tests.chaos.worker import register

ROOT = Path(__file__).resolve().parent.parent


def spawn(uri: str, log: Path, ttl: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.chaos.worker",
            uri,
            str(log),
            "--lease-ttl",
            f"{ttl}s",
            "--recovery-interval",
            f"{ttl / 2}s",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


async def once(base_uri: str, ttl: float, tmp: Path) -> tuple[float, float]:
    uri = f"{base_uri}/takeover_{uuid.uuid4().hex[:8]}?directConnection=true"
    log = tmp / f"log-{uuid.uuid4().hex[:6]}.jsonl"
    store = MongoStore.from_uri(uri)
    await store.init()
    client = Engine(store)
    register(client, functions=False, workflows=True)
    first = spawn(uri, log, ttl)
    second = None
    try:
        run_id = await client.start("crashy", {"slow": 0.5})
        while True:
            steps = (await client.status(run_id)).steps
            if "b" in steps and steps["b"].status == "running":
                break
            await asyncio.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed = time.time()
        second = spawn(uri, log, ttl)
        await client.result(run_id, timeout=120)
        done = time.time()
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        restarted = next(r["t"] for r in rows if r["kind"] == "step-start" and r["attempt"] == 2)
        return restarted - killed, done - killed
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait()
        await store.close()


async def main(ttls: list[float], reps: int) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import test_servers  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory() as tmp:
        uri = os.environ.get("MONGODB_URI")
        server = None if uri else test_servers.start_nx(Path(tmp))
        base = (uri or server.uri).split("/?")[0].rstrip("/")  # type: ignore[union-attr]
        try:
            print("| lease_ttl | kill -> lost step restarted | kill -> run completed |")
            print("|---|---|---|")
            for ttl in ttls:
                samples = [await once(base, ttl, Path(tmp)) for _ in range(reps)]
                restart = statistics.median(s[0] for s in samples)
                finish = statistics.median(s[1] for s in samples)
                print(f"| {ttl:g} s | {restart:.2f} s | {finish:.2f} s |", flush=True)
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ttls", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.ttls, args.reps))
