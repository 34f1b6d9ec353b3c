"""A workflow body's stream writes ride the write of its next step (docs/guides/streams.md):
counted in write commands, on nx-27017 (which serves the client-level bulkWrite) and on
mongoeco (which does not: there they take one command per boundary)."""

from __future__ import annotations

from typing import Any

from pymongo import monitoring

from engine_core import Engine, WorkflowContext
from tests.conftest import mongo_store

#: The commands that write (the reads an idle engine makes meanwhile vary with timing).
WRITES = {"insert", "update", "delete", "findAndModify", "bulkWrite"}


class Commands(monitoring.CommandListener):
    """The write commands sent, and those sent to the ``streams`` collection alone."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.to_streams = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in WRITES:
            self.names.append(event.command_name)
            if str(event.command.get(event.command_name, "")).endswith("streams"):
                self.to_streams += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _register(engine: Engine) -> None:
    @engine.workflow("plain")
    async def plain(ctx: WorkflowContext, data: Any) -> int:
        for i in range(5):
            await ctx.step(f"s{i}", lambda i=i: i)
        return 5

    @engine.workflow("streamed")
    async def streamed(ctx: WorkflowContext, data: Any) -> int:
        for i in range(5):
            for j in range(3):
                await ctx.write_stream("progress", [i, j])
            await ctx.step(f"s{i}", lambda i=i: i)
        return 5


async def _commands(uri: str, workflow: str) -> tuple[int, int, list[Any]]:
    listener = Commands()
    store = await mongo_store(uri, event_listeners=[listener])
    engine = Engine(store, lease_ttl="5s")
    _register(engine)
    try:
        async with engine:
            before = len(listener.names)
            run_id = await engine.start(workflow)
            assert await engine.result(run_id, timeout=30) == 5
            used = len(listener.names) - before
            apart = listener.to_streams
            entries = [e.value async for e in engine.read_stream(run_id, "progress")]
        return used, apart, entries
    finally:
        await store.close()


async def test_stream_writes_followed_by_a_step_cost_no_command_on_nx(nx_uri: str) -> None:
    plain, _, _ = await _commands(nx_uri, "plain")
    streamed, apart, entries = await _commands(nx_uri, "streamed")
    assert entries == [[i, j] for i in range(5) for j in range(3)]
    assert apart == 0  # every entry went in the write of the step after it
    # The same write commands (give or take the one a step outcome takes when it is
    # written on its own: when it is depends on timing, streams or not).
    assert abs(streamed - plain) <= 1


async def test_without_the_command_the_writes_of_a_boundary_share_one(mongoeco_uri: str) -> None:
    _, _, _ = await _commands(mongoeco_uri, "plain")
    _, apart, entries = await _commands(mongoeco_uri, "streamed")
    assert entries == [[i, j] for i in range(5) for j in range(3)]
    assert apart <= 5  # 15 writes, one command per step they precede
