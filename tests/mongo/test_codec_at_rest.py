"""``Engine(codec=...)`` on MongoDB, as an operator meets it: every collection of the
database, read raw after a full run (steps, a failure, a dispatched job, an event, a
child, streams, a heartbeat), holds no user value in clear; the CLI and the dashboard,
which hold no key, show those values as "encrypted" (docs/guides/data-at-rest.md)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import bson
import pytest

from engine_core import Engine
from pikku_mongo import MongoStore
from pikku_mongo.dashboard import dashboard_app
from tests.conftest import with_database
from tests.dashboard.conftest import client_for
from tests.support.stored_documents import stored_documents
from tests.test_codecs import MARK, codec, run_sealed


@pytest.mark.parametrize("server", ["nx", "mongoeco"])
async def test_no_collection_holds_a_value_in_clear_and_keyless_readers_show_encrypted(
    server: str, request: pytest.FixtureRequest
) -> None:
    base = request.getfixturevalue(f"{server}_uri")
    uri = with_database(base, f"sealed_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri)
    await store.init()
    run_id = await run_sealed(Engine(store, codec=codec(), lease_ttl="5s"))
    scanned: dict[str, int] = {}
    async for collection, doc in stored_documents(store):
        scanned[collection] = scanned.get(collection, 0) + 1
        assert MARK.encode() not in bson.encode(doc), (collection, doc)
    for owned in ("runs", "steps", "streams", "heartbeats"):
        assert scanned.get(f"pikku_{owned}"), (owned, scanned)  # the scan saw them

    # The CLI holds no key: it shows the values, each as "encrypted".
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "pikku_mongo.cli", "runs", "show", run_id, "--json"],
        env={**os.environ, "MONGODB_URI": uri},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    assert shown["input"] == "encrypted" and shown["output"] == "encrypted"
    assert MARK not in done.stdout

    # Nor does the dashboard: its run page shows the run, its values "encrypted".
    async with client_for(dashboard_app(Engine(store))) as client:
        page = await client.get("/run", params={"id": run_id})
        assert page.status_code == 200, page.text
        assert "encrypted" in page.text and MARK not in page.text
        listed = await client.get("/runs")
        assert listed.status_code == 200 and run_id in listed.text
    await store.close()
