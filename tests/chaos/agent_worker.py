"""A worker process serving a durable pydantic-ai agent, for the chaos test of agents:
serves until killed. Its model (a ``FunctionModel``) and its tools append each call to
the execution log, so the test counts model requests and side effects independently of
the store.

    python -m tests.chaos.agent_worker URI LOG [--hold-request N]

``--hold-request N``: the model's request number N (0-based) of a conversation waits 60
s before it answers (the test kills the process meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from engine_core import Engine, WorkflowContext
from engine_core.pydantic_ai import PikkuDurability
from tests.support.execution_log import LOG_PATH, record
from tests.support.fleet import serve_until_killed, worker_engine, worker_parser

TURNS: list[list[tuple[str, dict[str, Any]]] | str] = [
    [("lookup", {"order": 7})],
    [("refund", {"order": 7})],
    "Order 7 was refunded.",
]


def support_agent(hold: int | None) -> Agent[None, str]:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index = sum(isinstance(m, ModelResponse) for m in messages)
        record("model-start", index=index)
        if index == hold:
            await asyncio.sleep(60)
        record("model", index=index)
        turn = TURNS[index]
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(
            parts=[ToolCallPart(n, a, tool_call_id=f"call-{index}") for n, a in turn]
        )

    agent = Agent(FunctionModel(answer), name="support", capabilities=[PikkuDurability()])

    @agent.tool_plain
    async def lookup(order: int) -> dict[str, Any]:
        record("lookup", order=order)
        return {"order": order, "total": 12.5}

    @agent.tool_plain
    async def refund(order: int) -> str:
        record("refund", order=order)  # the side effect a crash must not repeat
        return f"refunded order {order}"

    return agent


def register(engine: Engine, hold: int | None = None) -> None:
    agent = support_agent(hold)

    @engine.workflow("agent-ticket")
    async def ticket(ctx: WorkflowContext, question: str) -> str:
        return (await agent.run(question)).output


async def serve(args: argparse.Namespace) -> None:
    engine = worker_engine(args)
    register(engine, args.hold_request)
    await serve_until_killed(engine)


def main() -> None:
    parser = worker_parser(lease_ttl="1s", recovery_interval="0.5s", max_clock_skew="0s")
    parser.add_argument("--hold-request", type=int, default=None)
    args = parser.parse_args()
    LOG_PATH["path"] = args.log
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
