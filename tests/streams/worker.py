"""A worker process for the stream tests: serves until killed (or kills itself where a
workflow asks it to, on a step's first attempt).

    python -m tests.streams.worker URI LOG
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from engine_core import Engine, WorkflowContext, current_step
from tests.support.execution_log import LOG_PATH, record
from tests.support.fleet import serve_until_killed, worker_engine, worker_parser


def _die_on_first_attempt() -> None:
    info = current_step()
    if info is not None and info.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)


async def tick(i: int, die_at: int) -> int:
    record("tick", i=i)
    if i == die_at:
        _die_on_first_attempt()
    return i


def register(engine: Engine) -> None:
    @engine.step_function("export")
    async def export(payload: dict[str, Any]) -> dict[str, Any]:
        """Writes a token per page from where the previous attempt's heartbeat left it;
        its first attempt dies after two pages."""
        info = current_step()
        assert info is not None
        start = (info.last_heartbeat or {}).get("page", 0)
        for page in range(start, payload["pages"]):
            await info.write_stream("pages", {"page": page})
            await info.heartbeat({"page": page + 1})
            if page == 1:
                _die_on_first_attempt()
        return {"resumed_from": start, "attempt": info.attempt}

    @engine.workflow("streamer")
    async def streamer(ctx: WorkflowContext, data: dict[str, Any]) -> int:
        for i in range(data["n"]):
            await ctx.write_stream("progress", {"i": i})
            await ctx.step(f"tick-{i}", tick, i, data["die_at"], retries=1)
        await ctx.close_stream("progress")
        return int(data["n"])

    @engine.workflow("exporter")
    async def exporter(ctx: WorkflowContext, data: dict[str, Any]) -> Any:
        return await ctx.dispatch("export", "export", {"pages": data["pages"]}, retries=1)

    @engine.workflow("writer")
    async def writer(ctx: WorkflowContext, data: dict[str, Any]) -> int:
        for i in range(data["n"]):
            await ctx.write_stream("live", i)
            await ctx.wait_for_event(f"go-{i}")
        return int(data["n"])


async def serve(args: Any) -> None:
    engine = worker_engine(args)
    register(engine)
    await serve_until_killed(engine)


def main() -> None:
    parser = worker_parser(lease_ttl="1s", recovery_interval="0.5s", max_clock_skew="0s")
    args = parser.parse_args()
    LOG_PATH["path"] = args.log
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
