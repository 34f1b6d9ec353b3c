"""A stream write lands and its reply is lost (the proxy swallows it): the store sends
it again and learns it landed, so each entry is in the stream once, in order, and no
step runs twice. The body's writes ride a step's write in a client-level ``bulkWrite``
(nx-27017 serves it); a step's writes are inserts of their own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine_core import Engine, WorkflowContext, current_step
from tests.faults.workload import work
from tests.support.execution_log import read_log
from tests.support.proxy import FaultProxy, Where

pytestmark = pytest.mark.faults


def _riding(command: dict[str, Any]) -> bool:
    return any(str(ns.get("ns", "")).endswith("pikku_streams") for ns in command.get("nsInfo", []))


def _step_insert(command: dict[str, Any]) -> bool:
    return command.get("insert") == "pikku_streams" and any(
        d.get("step") == "speak" for d in command.get("documents", [])
    )


CASES: list[tuple[str, str, Where]] = [
    ("body entries riding a step's start: bulkWrite", "bulkWrite", _riding),
    ("a step's entry: insert into streams", "insert", _step_insert),
]


@pytest.mark.parametrize(("what", "command", "where"), CASES, ids=[c[0] for c in CASES])
async def test_a_lost_reply_to_a_stream_write(
    proxied: Engine, proxy: FaultProxy, exec_log: Path, what: str, command: str, where: Where
) -> None:
    engine = proxied

    async def speak() -> None:
        info = current_step()
        assert info is not None
        for word in ("x", "y"):
            await info.write_stream("words", word)

    @engine.workflow("streamer")
    async def streamer(ctx: WorkflowContext, data: Any) -> str:
        for i in range(3):
            await ctx.write_stream("progress", i)
        a = await ctx.step("a", work, "a", 0.01)
        await ctx.step("speak", speak)
        await ctx.write_stream("progress", 3)
        await ctx.close_stream("progress")
        return str(a)

    rule = proxy.drop_reply(command, where)
    async with engine:
        run_id = await engine.start("streamer", run_id="s-1")
        assert await engine.result(run_id, timeout=60) == "a"
        progress = [e async for e in engine.read_stream(run_id, "progress", timeout=30)]
        words = [e async for e in engine.read_stream(run_id, "words", timeout=30)]
    assert rule.hits, f"no {what} was seen: the scenario did not exercise it"
    assert proxy.stats["dropped"] == 1
    assert [(e.position, e.value) for e in progress] == [(i, i) for i in range(4)]
    assert [(e.position, e.attempt, e.n, e.value) for e in words] == [
        (0, 1, 0, "x"),
        (1, 1, 1, "y"),
    ]
    ran = Counter(r["step"] for r in read_log(str(exec_log)) if r["kind"] == "start")
    assert ran == {"a": 1}
