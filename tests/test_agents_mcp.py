"""A durable agent's MCP server: its discovery and its tool calls are steps of the run,
so a replay asks the server nothing again (a real MCP server over stdio)."""

from __future__ import annotations

from pathlib import Path

from fastmcp.client.transports import PythonStdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

from engine_core import Engine
from engine_core.pydantic_ai import PikkuDurability
from tests.support import mcp_orders
from tests.support.agents import Script, call, replayed, run_agent


async def test_mcp_discovery_and_calls_are_steps_of_the_run(engine: Engine, tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    server = PythonStdioTransport(mcp_orders.__file__, args=[str(log)])
    orders = MCPToolset(server, id="orders")
    script = Script([call("lookup", order=7)], "Order 7 costs 12.5 EUR.")
    agent = Agent(
        script.model(), name="support", toolsets=[orders], capabilities=[PikkuDurability()]
    )

    run_agent(engine, "mcp", agent, then="go")
    async with engine:
        run_id, output = await replayed(engine, "mcp")
    assert output == "Order 7 costs 12.5 EUR."
    steps = (await engine.status(run_id)).steps
    assert steps["support__mcp_server__orders.call_tool"].result["result"] == ("order 7: 12.5 EUR")
    assert steps["support__mcp_server__orders.get_tools"].status == "succeeded"
    assert log.read_text().split() == ["7"] and script.calls == 2  # once, both passes
