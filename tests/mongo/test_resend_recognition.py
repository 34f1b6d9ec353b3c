"""A run write whose reply is lost, with another write landing on the run before it is
sent again, still knows that its first try landed (docs/guides/durability.md: past the driver's one
retryable-write retry, the store's own re-send must recognise its first try).

The write reaches the real server; only its reply is lost, on the client side."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from engine_core.common.clock import utcnow
from engine_core.common.journal import journals
from engine_core.records import RunState
from engine_core.testing.builders import begin, done_step, make_run
from pikku_mongo import MongoStore
from tests.conftest import mongo_store, with_database


@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_a_landed_write_is_recognised_after_another_landed(
    request: pytest.FixtureRequest, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store: MongoStore = await mongo_store(request.getfixturevalue(server))
    store.run_ops.beside_at = 1  # every outcome beside the run where the server can
    await store.insert_run(make_run("r"))
    token = await begin(store, "r")
    real = store.runs.update_one
    client = store.runs.database.client
    real_bulk = client.bulk_write
    lost: list[Any] = []

    async def another_lands() -> None:
        # Before the store sends it again, another write lands on the run (a stop, with
        # an operation id of its own; the first write's guard fails now).
        assert await store.set_run_status("r", "suspended", expect=["running"])
        raise AutoReconnect("connection reset: the reply was lost")

    async def reply_lost(filter: Any, update: Any, **kwargs: Any) -> Any:
        result = await real(filter, update, **kwargs)
        if not lost and "journal" in str(update):
            lost.append(filter)
            await another_lands()
        return result

    async def bulk_reply_lost(models: list[Any], **kwargs: Any) -> Any:
        if lost:
            return await real_bulk(models, **kwargs)
        # The run's write lands, and (as a server could only by failing between the two)
        # not the outcome after it: the re-send, confirming the first try, writes it.
        await real_bulk(models[:1], **kwargs)  # (refused where the command is not served)
        lost.append(models)
        await another_lands()

    monkeypatch.setattr(store.runs, "update_one", reply_lost)
    monkeypatch.setattr(client, "bulk_write", bulk_reply_lost)
    landed = await store.record_steps(
        "r", token=token, status="running", outcomes=[done_step("r", "a")]
    )
    assert lost, "the write was not sent"
    assert landed is True
    run = await store.get_run("r")
    assert run is not None and run.status == "suspended"
    if journals(store, [done_step("r", "a")]):
        assert "a" in run.journal
    else:  # nx-27017: its step document, by the client-level bulkWrite
        assert [s.key for s in await store.load_steps("r")] == ["a"]
    await store.close()


STOPS: list[tuple[RunState, RunState]] = [("running", "suspended"), ("suspended", "running")]


@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_a_pass_write_is_recognised_however_many_stops_landed_after_it(
    request: pytest.FixtureRequest, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass's write keeps its operation id in the pass's own ring: writes of other
    kinds (here nine stops and restarts, each with an id of its own) never push it out."""
    store: MongoStore = await mongo_store(request.getfixturevalue(server))
    await store.insert_run(make_run("r"))
    token = await begin(store, "r")
    real = store.runs.update_one
    lost: list[Any] = []

    async def reply_lost(filter: Any, update: Any, **kwargs: Any) -> Any:
        result = await real(filter, update, **kwargs)
        if not lost and "inflight" in str(update):
            lost.append(filter)
            # Suspend, resume, ... suspend: nine ids pushed, and the guard fails for good.
            for i in range(9):
                expect, status = STOPS[i % 2]
                assert await store.set_run_status("r", status, expect=[expect])
            raise AutoReconnect("connection reset: the reply was lost")
        return result

    monkeypatch.setattr(store.runs, "update_one", reply_lost)
    landed = await store.start_step(
        "r", token=token, status="running", key="a", attempt=1, started_at=utcnow()
    )
    assert lost, "the write was not sent"
    assert landed is True
    run = await store.get_run("r")
    assert run is not None and run.status == "suspended" and "a" in run.inflight
    await store.close()


@pytest.mark.parametrize("steps_before", [0, 8])
@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_a_settle_is_recognised_after_another_process_took_the_run_over(
    request: pytest.FixtureRequest,
    server: str,
    steps_before: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass parks (its settle frees the lease) and the reply is lost; another process
    begins the next pass and starts a step before the settle is sent again. The next
    pass counts its ring's slots from the first again, so the settle (here the pass's
    first write, or its ninth) must keep its id elsewhere to be recognised."""
    uri = request.getfixturevalue(server)
    store: MongoStore = await mongo_store(uri)
    other = MongoStore.from_uri(with_database(uri, store.database.name), max_clock_skew=0)
    await other.init()
    await store.insert_run(make_run("r"))
    token = await begin(store, "r")
    for i in range(steps_before):
        assert await store.start_step(
            "r", token=token, status="running", key=f"k{i}", attempt=1, started_at=utcnow()
        )
    real = store.runs.update_one
    lost: list[Any] = []

    async def reply_lost(filter: Any, update: Any, **kwargs: Any) -> Any:
        result = await real(filter, update, **kwargs)
        if not lost and update.get("$set", {}).get("open_pass") is False:
            lost.append(filter)
            next_token = await begin(other, "r")
            assert next_token == token + 1
            assert await other.start_step(
                "r", token=next_token, status="running", key="b", attempt=1,
                started_at=utcnow(),
            )  # fmt: skip
            raise AutoReconnect("connection reset: the reply was lost")
        return result

    monkeypatch.setattr(store.runs, "update_one", reply_lost)
    try:
        landed = await store.settle_run("r", token=token, expect=["running"])
    finally:
        await other.close()
    assert lost, "the settle was not sent"
    assert landed is True
    await store.close()
