"""A queue's state written by an earlier version (every admitted run listed in
``holders``, one time per admission in ``recent``) is read as it was meant: its runs
count against the limits until they end, its admission times against the rate, and
the next save leaves the bounded shape only."""

from __future__ import annotations

from datetime import timedelta

from engine_core.common.clock import utcnow
from engine_core.flow.admission import Admitter
from engine_core.flow.queues import declare
from engine_core.testing.builders import begin
from engine_core.testing.flow_cases import queued
from pikku_mongo.wire.encoding import to_us
from tests.conftest import mongo_store
from tests.test_admission import Kicks


async def test_a_state_of_the_earlier_shape_keeps_its_runs_counted(nx_uri: str) -> None:
    store = await mongo_store(nx_uri)
    try:
        # "old" was admitted by the earlier version: running, with no ``qheld``.
        await store.insert_run(queued("old", queue_key="k"))
        await store.runs.update_one(
            {"_id": "old"}, {"$set": {"status": "running"}, "$unset": {"line": ""}}
        )
        now = utcnow()
        await store.queues.insert_one(
            {
                "_id": "q",
                "version": 3,
                "holders": [["old", "k"]],
                "recent": [to_us(now - timedelta(seconds=1))],
                "minutes": [],
            }
        )
        await store.insert_run(queued("new", queue_key="k"))
        admitter = Admitter(store, Kicks(), declare("q", concurrency=1))  # type: ignore[arg-type]
        assert not await admitter.admit_round()
        assert (await store.get_run("new")).status == "queued"  # type: ignore[union-attr]
        rated = Admitter(store, Kicks(), declare("q", rate="1/1h"))  # type: ignore[arg-type]
        assert not await rated.admit_round()  # the old admission time still counts
        token = await begin(store, "old")
        await store.settle_run("old", token=token, expect=("running",), status="completed")
        await admitter.admit_round()
        assert (await store.get_run("new")).status == "running"  # type: ignore[union-attr]
        raw = await store.queues.find_one({"_id": "q"})
        assert raw is not None and "holders" not in raw and "recent" not in raw
        assert raw["reserved"] == ["new"] and raw["held"] == 1
        assert len(raw["window"]) == 0  # concurrency only: no rate kept
    finally:
        await store.close()
