"""A worked example: an order workflow that survives the death of its worker.

``python -m examples.order_demo`` runs it end to end on MongoStore: against
``MONGODB_URI`` when set, otherwise on an nx-27017 server it starts on a free port
and stops afterwards. A first worker process is killed with SIGKILL in the middle of
the "charge" step; a second worker takes the run over and finishes it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine_core import Engine, WorkflowContext, current_step
from pikku_mongo import MongoStore

RUN_ID = "order-7"
ROOT = Path(__file__).resolve().parent.parent


def say(text: str) -> None:
    print(f"[{os.getpid()}] {text}", flush=True)


def attempt() -> str:
    info = current_step()
    return f"{info.step} attempt {info.attempt}" if info else "?"


async def reserve(items: list[str]) -> dict[str, Any]:
    say(f"step {attempt()}: reserving {items}")
    return {"reserved": items}


async def charge(card: str) -> dict[str, Any]:
    say(f"step {attempt()}: charging card {card} (takes 3 s)")
    await asyncio.sleep(3)
    return {"charged": card, "idempotency_key": current_step().idempotency_key}  # type: ignore[union-attr]


def build_engine(uri: str) -> Engine:
    engine = Engine(MongoStore.from_uri(uri), lease_ttl="2s", recovery_interval="1s")

    @engine.step_function("send-email")
    async def send_email(payload: dict[str, Any]) -> dict[str, Any]:
        say(f"step {attempt()}: e-mailing {payload['to']}")
        return {"sent": payload["to"]}

    @engine.workflow("order")
    async def order(ctx: WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
        reserved = await ctx.step("reserve", reserve, data["items"])
        paid = await ctx.step("charge", charge, data["card"], retries=2)
        mail = await ctx.dispatch("notify", "send-email", {"to": data["email"]})
        await ctx.sleep("cool-off", "1s")
        return {"reserved": reserved, "paid": paid, "mail": mail}

    return engine


async def work(uri: str) -> None:
    """A worker process: serves until killed."""
    engine = build_engine(uri)
    async with engine:
        say("worker up")
        await asyncio.Event().wait()


def start_worker(uri: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "examples.order_demo", "worker", uri], cwd=ROOT)


async def orchestrate(uri: str) -> None:
    client = build_engine(uri)  # outside `async with`: a client, it runs nothing
    first = start_worker(uri)
    second = None
    try:
        await client.start(
            "order", {"items": ["book"], "card": "4242", "email": "a@b.c"}, run_id=RUN_ID
        )
        say(f"started run {RUN_ID}")
        while True:
            steps = (await client.status(RUN_ID)).steps
            if "charge" in steps and steps["charge"].status == "running":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = time.monotonic()
        say(f"killed worker {first.pid} with SIGKILL in the middle of 'charge'")
        second = start_worker(uri)
        output = await client.result(RUN_ID, timeout=120)
        say(f"run finished {time.monotonic() - killed_at:.1f} s after the crash: {output}")
        status = await client.status(RUN_ID)
        print(f"\nrun {status.run_id}: {status.status}")
        print(f"{'step':<10} {'status':<10} attempts")
        for name, step in status.steps.items():
            print(f"{name:<10} {step.status:<10} {step.attempts}")
        print("\ntimeline:")
        for entry in await client.history(RUN_ID):
            error = f"  ({entry.error['message']})" if entry.error else ""
            print(
                f"  {entry.at:%H:%M:%S.%f}"[:-3] + f"  {entry.step:<9} #{entry.attempt} "
                f"{entry.status}{error}"
            )
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait()
        await client.store.close()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        asyncio.run(work(sys.argv[2]))
        return
    uri = os.environ.get("MONGODB_URI")
    if uri:
        asyncio.run(orchestrate(uri))
        return
    from tests.support import servers as test_servers

    with tempfile.TemporaryDirectory() as tmp:
        server = test_servers.start_nx(Path(tmp))
        say(f"started nx-27017 at {server.uri}")
        try:
            base = server.uri.split("/?")[0]
            asyncio.run(orchestrate(f"{base}/pikku_demo?directConnection=true"))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
