"""``pikku-mongo queues list`` and the queue figures of ``runs list``, as a subprocess."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_core import Engine
from tests.test_cli import Cli, as_json, cli, cli_uri, engine_on  # noqa: F401 - fixtures


async def test_queues_list_and_queued_runs(cli: Cli, engine_on: Engine) -> None:  # noqa: F811
    assert cli("queues", "list").stdout.splitlines()[0].startswith("queue")
    assert as_json(cli("queues", "list", "--json")) == []
    engine = engine_on
    engine.queue("mail", concurrency=1)
    await engine.start("cli-wf", "wait", run_id="q-a", queue="mail", key="k1", priority=2)
    await engine.start("cli-wf", "ok", run_id="plain")
    async with engine:
        for _ in range(500):  # q-a is admitted and waits for its event
            if (await engine.status("q-a")).steps.get("go") is not None:
                break
            await asyncio.sleep(0.01)
        await engine.start("cli-wf", "wait", run_id="q-b", queue="mail")  # no slot left
        await engine.result("plain", timeout=10)
    assert (await engine.status("q-b")).status == "queued"

    table = cli("runs", "list").stdout.splitlines()
    assert table[0].split()[:4] == ["run", "workflow", "status", "queue"]
    rows = {line.split()[0]: line for line in table[2:]}
    assert "running" in rows["q-a"] and "mail key=k1 priority=2" in rows["q-a"]
    assert "queued" in rows["q-b"] and "mail" in rows["q-b"]
    assert rows["plain"].split()[3] == "-"
    queued = as_json(cli("runs", "list", "--status", "queued", "--json"))
    assert [r["run_id"] for r in queued] == ["q-b"] and queued[0]["queue"] == "mail"
    # No listed run has a queue: no queue column.
    assert "queue" not in cli("runs", "list", "--status", "completed").stdout.splitlines()[0]
    bad = cli("runs", "list", "--status", "bogus", ok=False)
    assert bad.returncode == 2 and "queued" in bad.stderr
    assert "queue     mail key=k1 priority=2" in cli("runs", "show", "q-a").stdout

    lines = cli("queues", "list").stdout.splitlines()
    assert lines[2].split()[:3] == ["mail", "1", "1"]  # queued 1, active 1
    listed: list[dict[str, Any]] = as_json(cli("queues", "list", "--json"))
    assert len(listed) == 1
    mail = listed[0]
    assert (mail["name"], mail["queued"], mail["active"]) == ("mail", 1, 1)
    assert mail["admitted_this_minute"] + mail["admitted_last_minute"] == 1
    # The tool declares no queue: it shows the limits the serving engine stored.
    assert mail["concurrency"] is not None


async def test_queues_list_shows_key_rate_fairness_and_the_keys_waiting(
    cli: Cli,  # noqa: F811
    engine_on: Engine,  # noqa: F811
) -> None:
    engine = engine_on
    engine.queue("fair", key_rate="5/1m", fairness="key")
    async with engine:  # a serving process stores the limits it declared
        pass
    for _ in range(3):
        await engine.start("cli-wf", "ok", queue="fair", key="busy")
    await engine.start("cli-wf", "ok", queue="fair", key="b")
    await engine.start("cli-wf", "ok", queue="fair")
    lines = cli("queues", "list").stdout.splitlines()
    assert lines[0].split()[-6:] == ["rate", "key", "rate", "fairness", "keys", "waiting"]
    assert lines[2].split()[0] == "fair" and lines[2].endswith(
        "5/60s     key       3 (busy: 3, -: 1, b: 1)"
    )
    [fair] = as_json(cli("queues", "list", "--json"))
    assert (fair["key_rate"], fair["fairness"], fair["keys_waiting"]) == ("5/60s", "key", 3)
    assert fair["top_waiting_keys"] == [["busy", 3], [None, 1], ["b", 1]]
