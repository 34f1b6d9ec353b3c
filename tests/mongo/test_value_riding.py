"""A workflow body's values ride the write of its next step (issue 42,
docs/guides/values-and-updates.md): counted in write commands on nx-27017, which serves
the client-level bulkWrite that carries them."""

from __future__ import annotations

from typing import Any

from engine_core import Engine, WorkflowContext
from tests.conftest import mongo_store
from tests.mongo.test_stream_riding import WRITES, Commands
from tests.mongo.test_stream_riding import _register as register_plain


def _register(engine: Engine) -> None:
    register_plain(engine)  # "plain": the same five steps, with no value

    @engine.workflow("published")
    async def published(ctx: WorkflowContext, data: Any) -> int:
        for i in range(5):
            await ctx.set_value("stage", i)
            await ctx.set_value(f"done-{i}", {"at": i})
            await ctx.step(f"s{i}", lambda i=i: i)
        return 5


class ValueWrites(Commands):
    """:class:`Commands`, and the write commands sent to the ``values`` collection."""

    def __init__(self) -> None:
        super().__init__()
        self.to_values = 0

    def started(self, event: Any) -> None:
        super().started(event)
        named = str(event.command.get(event.command_name, ""))
        if event.command_name in WRITES and named.endswith("values"):
            self.to_values += 1


async def _commands(uri: str, workflow: str) -> tuple[int, int, dict[str, Any]]:
    listener = ValueWrites()
    store = await mongo_store(uri, event_listeners=[listener])
    engine = Engine(store, lease_ttl="5s")
    _register(engine)
    try:
        async with engine:
            before = len(listener.names)
            run_id = await engine.start(workflow)
            assert await engine.result(run_id, timeout=30) == 5
            used = len(listener.names) - before
            values = (await engine.status(run_id)).values
        return used, listener.to_values, values
    finally:
        await store.close()


async def test_values_followed_by_a_step_cost_no_command_on_nx(nx_uri: str) -> None:
    plain, _, _ = await _commands(nx_uri, "plain")
    published, apart, values = await _commands(nx_uri, "published")
    assert values == {"stage": 4, **{f"done-{i}": {"at": i} for i in range(5)}}
    assert apart == 0  # every value went in the write of the step after it
    # The same write commands (give or take the one a step outcome takes when it is
    # written on its own: when it is depends on timing, values or not).
    assert abs(published - plain) <= 1
