"""A stdio MCP server for the durable-agent tests (``python mcp_orders.py LOG``): one
tool, ``lookup``, which appends each call to the file ``LOG``."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("orders")


@server.tool()
def lookup(order: int) -> str:
    """Look an order up."""
    with open(sys.argv[1], "a") as log:
        log.write(f"{order}\n")
    return f"order {order}: 12.5 EUR"


if __name__ == "__main__":
    server.run()
