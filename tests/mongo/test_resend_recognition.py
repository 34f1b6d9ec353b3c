"""A run write whose reply is lost, with another write landing on the run before it is
sent again, still knows that its first try landed (DESIGN.md 7b: past the driver's one
retryable-write retry, the store's own re-send must recognise its first try).

The write reaches the real server; only its reply is lost, on the client side."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import AutoReconnect

from engine_core.testing.builders import begin, done_step, make_run
from pikku_mongo import MongoStore
from tests.conftest import mongo_store


@pytest.mark.parametrize("server", ["nx_uri", "mongoeco_uri"])
async def test_a_landed_write_is_recognised_after_another_landed(
    request: pytest.FixtureRequest, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store: MongoStore = await mongo_store(request.getfixturevalue(server))
    await store.insert_run(make_run("r"))
    token = await begin(store, "r")
    real = store.runs.update_one
    lost = []

    async def reply_lost(filter: Any, update: Any, **kwargs: Any) -> Any:
        result = await real(filter, update, **kwargs)
        if not lost and "journal" in str(update):
            lost.append(filter)
            # Before the store sends it again, another write lands on the run (a stop,
            # with an operation id of its own; the first write's guard fails now).
            assert await store.set_run_status("r", "suspended", expect=["running"])
            raise AutoReconnect("connection reset: the reply was lost")
        return result

    monkeypatch.setattr(store.runs, "update_one", reply_lost)
    landed = await store.record_steps(
        "r", token=token, status="running", outcomes=[done_step("r", "a")]
    )
    assert lost, "the write was not sent"
    assert landed is True
    run = await store.get_run("r")
    assert run is not None and run.status == "suspended"
    assert "a" in run.journal
    await store.close()
