"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright against ``pikku-mongo ui`` on a live nx-27017 with runs in every status.

It opens the list, follows a run, checks the timeline is drawn, cancels a running run
and sees its status change, watches the list refresh itself, and saves screenshots
(into ``PIKKU_DASHBOARD_SCREENSHOTS`` when that names a folder, as ``docs/`` is made).
It skips only where no Chromium is installed, and never in CI (``CI`` set): ``.ci/run``
installs Debian's ``chromium``, and a CI run without it fails here instead of passing
with no browser test.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright

from engine_core import Engine
from pikku_mongo import MongoStore
from pikku_mongo.dashboard.params import RUN_STATUSES
from tests.conftest import with_database
from tests.dashboard.conftest import ui_server
from tests.support.dashboard_runs import WEIRD_ID, seed_runs


def find_chromium() -> str | None:
    candidates = (os.environ.get("PIKKU_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium")
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


CHROMIUM = find_chromium()
#: The machine has no internet: without these Chromium stalls on connections it tries.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]

IN_CI = bool(os.environ.get("CI"))

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not IN_CI,
    reason="no Chromium installed (looked for $PIKKU_CHROMIUM, chromium on PATH and "
    "/usr/bin/chromium): apt-get install -y chromium",
)


def save(image: bytes, folder: Path, name: str) -> None:
    folders = [folder]
    wanted = os.environ.get("PIKKU_DASHBOARD_SCREENSHOTS")
    if wanted:
        folders.append(Path(wanted))
    for where in folders:
        where.mkdir(parents=True, exist_ok=True)
        (where / name).write_bytes(image)


async def shot(page: Page, folder: Path, name: str, *, full: bool = False) -> None:
    save(await page.screenshot(full_page=full), folder, name)


@pytest.mark.timeout(120)
async def test_the_dashboard_in_chromium(nx_uri: str, tmp_path: Path) -> None:
    assert CHROMIUM is not None, (
        "CI runs the browser test, and no Chromium is installed: .ci/run installs it with "
        "apt-get install -y chromium"
    )
    uri = with_database(nx_uri, f"browser_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri)
    await store.init()
    try:
        engine = Engine(store, lease_ttl="5s")
        ids = await seed_runs(engine)
        with ui_server(uri, "--refresh", "1") as base:
            async with async_playwright() as playwright:
                context = await playwright.chromium.launch_persistent_context(
                    str(tmp_path / "profile"),  # a fresh user data dir
                    executable_path=CHROMIUM,
                    headless=True,
                    args=CHROMIUM_ARGS,
                    viewport={"width": 1280, "height": 900},
                )
                try:
                    await drive(context.pages[0], base, engine, ids, tmp_path)
                finally:
                    await context.close()
    finally:
        await store.close()


def watch(page: Page, *, console: bool = True) -> tuple[list[str], list[str]]:
    """The page's script errors (and console errors) as they come, and the messages of
    the dialogs it opens, each accepted."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    if console:
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    dialogs: list[str] = []

    async def accept(dialog: object) -> None:
        dialogs.append(dialog.message)  # type: ignore[attr-defined]
        await dialog.accept()  # type: ignore[attr-defined]

    page.on("dialog", accept)
    return problems, dialogs


async def drive(page: Page, base: str, engine: Engine, ids: dict[str, str], shots: Path) -> None:
    problems, dialogs = watch(page)

    # The list: every status counted, every run linked.
    await page.goto(f"{base}/runs")
    for status in RUN_STATUSES:
        count = await page.locator(f'[data-count="{status}"]').inner_text()
        assert count == {"running": "2", "completed": "2"}.get(status, "1"), status
    assert await page.locator("table.runs tbody tr").count() == 11
    await shot(page, shots, "dashboard-runs.png", full=True)

    # Follow a run: its timeline is drawn, one bar per attempt and per wait.
    await page.get_by_role("link", name=ids["completed"], exact=True).first.click()
    await page.wait_for_url("**/run?id=order-completed")
    bars = page.locator("svg.timeline rect.bar")
    assert await bars.count() == 6
    failed = page.locator("svg.timeline rect.bar.attempt.failed")
    box = await failed.bounding_box()
    assert box is not None and box["width"] >= 2 and box["height"] >= 10
    wait = await page.locator("svg.timeline rect.bar.wait").first.bounding_box()
    assert wait is not None and wait["width"] > 100  # the 50 ms sleep, to scale
    title = await failed.locator("title").text_content()
    assert title is not None and "ConnectionError: gateway timeout" in title
    await failed.click()  # the attempt's row, with its error
    assert page.url.endswith("#attempt-2")
    row = page.locator("tr#attempt-2")
    assert "gateway timeout" in await row.inner_text()
    await page.get_by_role("link", name=ids["child"]).first.click()
    await page.wait_for_url("**/run?id=order-completed%3Aship")
    await page.go_back()
    await page.evaluate("window.scrollTo(0, 0)")
    await shot(page, shots, "dashboard-run.png", full=True)

    # A run whose input holds markup shows it as text and runs none of it.
    await page.goto(f"{base}/runs?workflow=waits")
    await page.get_by_role("link", name=WEIRD_ID, exact=True).first.click()
    await page.wait_for_selector("#run-status")
    assert "<script>window.pwned = 1</script>" in await page.locator("main").inner_text()
    assert await page.evaluate("typeof window.pwned") == "undefined"

    # Cancel a running run: confirm in place, then see its status change.
    await page.goto(f"{base}/runs?status=running")
    await page.get_by_role("link", name=ids["running"], exact=True).first.click()
    await page.locator('button[data-action="cancel"]').click()
    await page.wait_for_selector("#run-status:text-is('cancelled')", timeout=10_000)
    assert dialogs and dialogs[0].startswith(f"Cancel run {ids['running']}?")
    assert "Cancel requested." in await page.locator(".notice").inner_text()
    assert (await engine.status(ids["running"])).status == "cancelled"
    await shot(page, shots, "dashboard-cancelled.png", full=True)

    # The queues page: the seeded queue, read from the store by the ui's own engine.
    await page.goto(f"{base}/queues")
    assert await page.locator('tr[data-queue="orders"] [data-figure="queued"]').inner_text() == "1"

    # Pause a schedule: confirm in place, the same way as a run action.
    await engine.create_schedule("nightly", "ship", cron="0 3 * * *")
    await page.goto(f"{base}/schedules")
    await page.locator('tr[data-schedule="nightly"] button[data-action="pause"]').click()
    await page.wait_for_selector('tr[data-schedule="nightly"] [data-paused="yes"]', timeout=10_000)
    assert dialogs[-1].startswith("Pause schedule nightly?")
    assert "Schedule nightly paused." in await page.locator(".notice").inner_text()
    assert [s.paused for s in await engine.list_schedules()] == [True]
    await shot(page, shots, "dashboard-schedules.png", full=True)

    # The list refreshes itself: a run suspended elsewhere shows without a reload.
    await page.goto(f"{base}/runs")
    await page.evaluate("window.notReloaded = true")
    assert await page.locator('[data-count="suspended"]').inner_text() == "1"
    await engine.suspend(ids["weird"])
    await page.wait_for_selector('[data-count="suspended"]:text-is("2")', timeout=10_000)
    assert await page.evaluate("window.notReloaded") is True

    assert problems == [], problems  # no script error, no blocked resource


@pytest.mark.timeout(120)
async def test_the_fleet_as_an_operator_sees_it_in_chromium(nx_uri: str, tmp_path: Path) -> None:
    """A pinned worker serves "shop" v2; an older tier started a run with no version,
    and one that waits for an event. In Chromium: the stranded run says why it waits,
    an event is sent in place (asked like every other action, its payload posted), and
    the fork of a compensated run shows what it copies and what runs again first."""
    from engine_core import WorkflowRunFailedError
    from tests.dashboard.test_fleet_pages import register_shop

    uri = with_database(nx_uri, f"browser_{uuid.uuid4().hex[:12]}")
    store = MongoStore.from_uri(uri)
    await store.init()
    worker, old_tier = Engine(store, pin_versions=True), Engine(store)
    register_shop(worker, "v2")
    register_shop(old_tier)
    try:
        async with worker:
            stuck = await old_tier.start("shop", "wait", run_id="stuck")
            waiting = await worker.start("shop", "wait", run_id="waiting")
            refunded = await worker.start("shop", "go", run_id="refunded")
            with pytest.raises(WorkflowRunFailedError):
                await worker.result(refunded, timeout=10)
            with ui_server(uri) as base:
                async with async_playwright() as playwright:
                    browser = await playwright.chromium.launch(
                        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                    )
                    try:
                        page = await browser.new_page(viewport={"width": 1280, "height": 900})
                        await operate(page, base, worker, (stuck, waiting, refunded), tmp_path)
                    finally:
                        await browser.close()
    finally:
        await store.close()


async def operate(
    page: Page, base: str, engine: Engine, runs: tuple[str, str, str], shots: Path
) -> None:
    stuck, waiting, refunded = runs
    problems, dialogs = watch(page, console=False)
    await page.goto(f"{base}/run?id={stuck}")
    reasons = await page.locator("ul.waiting").inner_text()
    assert "No live worker will drive it" in reasons and "pin versions" in reasons

    await page.goto(f"{base}/run?id={waiting}")
    await page.wait_for_selector("form.send-event")
    await page.locator("form.send-event textarea").fill('{"ok": true}')
    await page.locator('button[data-action="send-event"]').click()
    await page.wait_for_selector(".notice", timeout=10_000)
    assert dialogs and dialogs[-1].startswith(f"Send event approval to run {waiting}?")
    assert "Event sent." in await page.locator(".notice").inner_text()
    await shot(page, shots, "dashboard-event-sent.png", full=True)

    await page.goto(f"{base}/run?id={refunded}")
    assert "rename-charge" in await page.locator("dd.patches").inner_text()
    assert "patched:" not in await page.locator("table.steps").inner_text()
    await page.locator('button[data-action="fork"]').click()
    await page.wait_for_url("**/run/confirm?**")
    plan = await page.locator("dl.facts").inner_text()
    assert "Run again" in plan and "charge (its compensation ran)" in plan
    await shot(page, shots, "dashboard-fork-confirm.png", full=True)
    await page.get_by_role("button", name="Yes, fork").click()
    await page.wait_for_selector(".notice", timeout=10_000)
    assert "This run is a fork, just made." in await page.locator(".notice").inner_text()
    assert len(await engine.list_forks(refunded)) == 1
    assert problems == [], problems
