"""A worker process of the shop's fleet, for the API-tier tests: pins its version.

    python -m tests.tier.worker URI LOG --version v2 [--lease-ttl 2s] ...

It registers ``order`` (an ``Order`` model as its input) with ``version=`` the given
label, and ``Engine(pin_versions=True)``: it drives only the runs of that version. Each
step logs who ran it (its version) to the execution log.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import BaseModel, Field

from engine_core import Engine, WorkflowContext
from tests.support.execution_log import LOG_PATH, record
from tests.support.fleet import serve_until_killed, worker_engine, worker_parser


class Line(BaseModel):
    sku: str
    qty: int = Field(ge=1)


class Order(BaseModel):
    order_id: str
    lines: list[Line]


def register(engine: Engine, version: str) -> None:
    def pack(order: Order) -> str:
        record("pack", version=version, order=order.order_id)
        return f"packed {order.order_id} on {version}"

    @engine.workflow("order", version=version)
    async def order(ctx: WorkflowContext, data: Order) -> str:
        return str(await ctx.step("pack", pack, data))


def main() -> None:
    parser = worker_parser(lease_ttl="2s", recovery_interval="1s", max_clock_skew="0s")
    parser.add_argument("--version", required=True)
    args = parser.parse_args()
    LOG_PATH["path"] = args.log
    logging.basicConfig(level=logging.INFO, format="worker %(process)d %(name)s %(message)s")
    engine = worker_engine(args, pin_versions=True)
    register(engine, args.version)
    asyncio.run(serve_until_killed(engine))


if __name__ == "__main__":
    main()
