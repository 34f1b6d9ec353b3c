"""``pikku-mongo schedules list|pause|resume|delete NAME``, driven as a subprocess."""

from __future__ import annotations

from typing import Any

from engine_core import Engine
from tests.test_cli import Cli, as_json, cli, cli_uri, engine_on  # noqa: F401 - fixtures


async def test_list_pause_resume_delete(cli: Cli, engine_on: Engine) -> None:  # noqa: F811
    assert cli("schedules", "list").stdout.splitlines()[0].startswith("schedule")
    assert as_json(cli("schedules", "list", "--json")) == []
    await engine_on.create_schedule(
        "nightly", "cli-wf", cron="0 3 * * *", timezone="Europe/Helsinki", input={"k": 1}
    )
    made = await engine_on.create_schedule("every-minute", "cli-wf", every="1m")
    table = cli("schedules", "list").stdout
    lines = table.splitlines()
    assert "every-minute" in lines[2] and "every 60s" in lines[2] and "UTC" in lines[2]
    assert "nightly" in lines[3] and "cron 0 3 * * *" in lines[3]
    assert "Europe/Helsinki" in lines[3] and " no " in lines[3]
    assert f"{made.next_fire_at:%Y-%m-%d %H:%M:%S}Z" in lines[2]
    listed: list[dict[str, Any]] = as_json(cli("schedules", "list", "--json"))
    assert [s["name"] for s in listed] == ["every-minute", "nightly"]
    assert listed[1]["input"] == {"k": 1} and listed[1]["every"] is None

    assert cli("schedules", "pause", "nightly").stdout.strip() == "schedule nightly paused"
    assert {s.name: s.paused for s in await engine_on.list_schedules()} == {
        "every-minute": False,
        "nightly": True,
    }
    assert " yes " in cli("schedules", "list").stdout.splitlines()[3]
    resumed = as_json(cli("schedules", "resume", "nightly", "--json"))
    assert resumed == {"name": "nightly", "paused": False}
    assert not any(s.paused for s in await engine_on.list_schedules())
    assert "deleted" in cli("schedules", "delete", "every-minute").stdout
    assert [s.name for s in await engine_on.list_schedules()] == ["nightly"]


def test_an_unknown_schedule_is_one_line_and_exit_1(cli: Cli) -> None:  # noqa: F811
    for action in ("pause", "resume", "delete"):
        done = cli("schedules", action, "nope", ok=False)
        assert done.returncode == 1
        assert done.stderr.strip() == "pikku-mongo: no schedule is named 'nope'"
    usage = cli("schedules", "pause", ok=False)
    assert usage.returncode == 2
