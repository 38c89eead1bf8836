"""The Memory panel in a real browser: Playwright for Python driving Debian's chromium against a real daemon.

Covers sign-in by the one-time link, search → open → delete → gone, approving a review item and seeing it injected
on the next turn start, a sync of a fixture home with live progress, and export → wipe → import-store giving an
equal export. Saves a screenshot of every page under docs/panel/ (the README shows them).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.embed import Embedder
from memmy.indexing import Indexer
from memmy.jobs.writer import LayerWrite, LayerWriter
from memmy.store.db import Database
from memmy.store.pg import PgDatabase
from memmy.store.unit import Store
from tests.agent_homes import fixture_home
from tests.conftest import SUITE_BACKEND, Daemon, free_port, home_dsn

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install playwright)"),
]
SHOTS = Path(__file__).resolve().parents[1] / "docs" / "panel"
TOKEN = "panel-browser-token"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert sync_playwright is not None
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def panel_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A token-protected daemon whose HOME holds a Codex history, with ``evolution.review: required``."""
    home = fixture_home(tmp_path, "codex")
    config = home / ".memmy" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({"memmyMemory": {"evolution": {"review": "required"}}}))
    proc = Daemon(home=home, port=free_port(), token=TOKEN)
    proc.start()
    yield proc
    if proc.process and proc.process.poll() is None:
        proc.stop()


def cli_run(daemon: Daemon, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--url", daemon.url, "--token", TOKEN, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def sign_in(browser: Browser, daemon: Daemon, **context: Any) -> Page:
    output = cli_run(daemon, "panel", "--no-open")
    link = next(line for line in output.splitlines() if "/panel/login?code=" in line).strip()
    page = browser.new_context(viewport={"width": 1280, "height": 900}, **context).new_page()
    page.goto(link)
    assert page.url.rstrip("/").endswith("/panel")
    assert page.locator("h1").inner_text() in ("Overview", "概览")
    return page


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def add(daemon: Daemon, content: str, source: str = "codex") -> str:
    with daemon.client(**{"x-memmy-source": source}) as client:
        answer = client.post("/api/v1/memory/add", json={"content": content})
        answer.raise_for_status()
        return str(answer.json()["id"])


def pending_policy(daemon: Daemon, embedder: Embedder) -> str:
    """A newly induced L2 written through the evolution writer's review gate (as the worker would)."""
    if SUITE_BACKEND == "postgres":  # the daemon's database
        db: Database = PgDatabase(home_dsn(daemon.home))
    else:
        with daemon.client() as client:
            db = Database(Path(client.get("/api/v1/health").json()["storage"]["path"]))
    try:
        store = Store(db)
        indexer = Indexer(lambda: embedder, store, 32)
        writer = LayerWriter(store, indexer)
        writer.review_required = lambda: True
        memory = writer.upsert(
            LayerWrite(
                layer="L2",
                key="policy:flaky-network-tests",
                title="Retry flaky network tests with pytest --reruns",
                content="When network-bound pytest tests fail intermittently, rerun them with "
                "pytest --reruns 2 before changing code.",
                tags=["policy"],
                properties={"policy": {"trigger": "flaky network tests", "status": "active"}},
            )
        )
        assert memory.status == "resolving"
        return memory.id
    finally:
        db.close()


def turn_start(daemon: Daemon, query: str) -> dict[str, Any]:
    with daemon.client() as client:
        session = client.post("/api/v1/sessions/open", json={}).json()["sessionId"]
        answer = client.post("/api/v1/turns/start", json={"sessionId": session, "query": query})
        answer.raise_for_status()
        return dict(answer.json())


def test_the_panel_in_a_browser(browser: Browser, panel_daemon: Daemon, embedder: Embedder, tmp_path: Path) -> None:
    daemon = panel_daemon
    keep = add(daemon, "Use pnpm, not npm, in the web repository; the lockfile is pnpm-lock.yaml.")
    doomed = add(daemon, "The staging database listens on port 6543 behind the VPN.", source="claude_code")
    add(daemon, "数据库迁移之前一定要先备份生产数据。", source="cursor")
    daemon.drain()

    page = sign_in(browser, daemon)
    shot(page, "overview")

    # Search, open a memory, delete it, see it gone from search.
    page.goto(f"{daemon.url}/panel/memories")
    shot(page, "memories")
    page.keyboard.press("/")
    page.keyboard.type("staging database port")
    page.keyboard.press("Enter")
    page.wait_for_url("**/panel/memories?q=*")
    page.wait_for_selector("#search-results[data-loaded]")  # the results arrive after the page
    page.check("input[name='evidence']")  # the --verbose evidence, on request
    page.locator("form.filters button[type='submit']").click()
    page.wait_for_url("**/panel/memories?*evidence=1*")
    page.wait_for_selector("#search-results[data-loaded]")
    assert "rrf=" in page.locator("#search-results").inner_text()
    shot(page, "search")
    page.locator(f"a[href='/panel/memories/{doomed}']").first.click()
    page.wait_for_url(f"**/panel/memories/{doomed}")
    assert "6543" in page.locator("pre.content").inner_text()
    shot(page, "memory")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"form[action='/panel/memories/{doomed}/delete'] button").click()
    page.wait_for_url("**/panel/memories?msg=*")
    page.goto(f"{daemon.url}/panel/memories?q=staging+database+port")
    page.wait_for_selector("#search-results[data-loaded]")
    assert doomed not in page.content()
    assert keep not in page.content()  # unrelated memory not surfaced either

    # Approve a review item; it is injected on the next turn start.
    policy = pending_policy(daemon, embedder)
    question = "network tests fail intermittently in pytest, what should I do?"
    assert policy not in json.dumps(turn_start(daemon, question))
    page.goto(f"{daemon.url}/panel/review")
    shot(page, "review")
    item = page.locator(f"article[data-id='{policy}']")
    item.locator("button[value='approve']").click()
    page.wait_for_url("**/panel/review?msg=*")
    assert policy not in page.locator("main").inner_html().split("</p>", 1)[-1]
    daemon.drain()
    assert policy in json.dumps(turn_start(daemon, question))

    # Sync the fixture home's Codex history with live progress.
    page.goto(f"{daemon.url}/panel/agents")
    assert "codex" in page.locator("main table").first.inner_text()
    page.locator("#sync-all").click()
    page.wait_for_url("**/panel/agents?job=*")
    page.wait_for_selector("#sync-progress[data-finished]", timeout=60_000)
    assert page.locator("#sync-state").inner_text() == "done"
    assert "turns added" in page.locator("#sync-detail").inner_text()
    shot(page, "agents")

    for name, path in (
        ("tasks", "/panel/tasks"),
        ("experiences", "/panel/experiences"),
        ("world-models", "/panel/world-models"),
        ("skills", "/panel/skills"),
        ("recalls", "/panel/recalls"),
        ("analytics", "/panel/analytics"),
        ("logs", "/panel/logs"),
        ("settings", "/panel/settings"),
    ):
        page.goto(f"{daemon.url}{path}")
        assert page.locator("h1").count() == 1
        shot(page, name)

    # Mark an injected memory wrong from the Recalls page (one form per event, a button per memory).
    page.goto(f"{daemon.url}/panel/recalls")
    page.locator("button[name='memory']").first.click()
    page.wait_for_url("**/panel/recalls?msg=*")
    assert "negative feedback recorded" in page.locator("p.flash.ok").inner_text()

    dark = sign_in(
        browser, daemon, color_scheme="dark", locale="zh-CN", extra_http_headers={"accept-language": "zh-CN"}
    )
    shot(dark, "overview-dark-zh")
    dark.goto(f"{daemon.url}/panel/memories")
    shot(dark, "memories-dark-zh")

    # export -> wipe -> import-store gives a store whose export is equal to the first.
    first, second = tmp_path / "first.zip", tmp_path / "second.zip"
    cli_run(daemon, "export", "--out", str(first))
    assert "Removed" in cli_run(daemon, "wipe", "--yes")
    assert json.loads(cli_run(daemon, "raw", "GET", "/panel/items"))["total"] == 0
    cli_run(daemon, "import-store", str(first))
    cli_run(daemon, "export", "--out", str(second))

    def data_tables(path: Path) -> dict[str, Any]:
        with zipfile.ZipFile(path) as archive:
            tables = json.loads(archive.read("manifest.json"))["tables"]
        return {k: v for k, v in tables.items() if k not in ("audit_logs", "api_logs")}

    assert data_tables(first) == data_tables(second)
    assert data_tables(first)["memories"]["rows"] >= 3

    # The Settings page imports an archive uploaded from the browser (here a dry run: everything is present).
    page.goto(f"{daemon.url}/panel/settings")
    page.set_input_files("input[name='archive']", str(first))
    page.check("input[name='dryRun']")
    page.locator("form[action='/panel/settings/import'] button[type='submit']").click()
    page.wait_for_url("**/panel/settings?msg=*")
    assert "first.zip: would add 0 rows" in page.locator("p.flash.ok").inner_text()
    audit = cli_run(daemon, "logs", "--audit")
    for action in ("store.export", "store.wipe", "store.import", "review.approve", "memory.delete"):
        assert action in audit


def test_the_language_switch_lasts_and_no_page_asks_for_anything_it_may_not_have(
    browser: Browser, panel_daemon: Daemon
) -> None:
    page = sign_in(browser, panel_daemon, locale="en-US")
    refused: list[str] = []
    page.on("response", lambda response: refused.append(response.url) if response.status >= 400 else None)
    page.goto(f"{panel_daemon.url}/panel/memories?layer=L1")
    page.locator(".lang a[lang='zh']").click()
    page.wait_for_url("**/panel/memories?layer=L1&lang=zh")
    assert page.locator("html").get_attribute("lang") == "zh-CN"
    page.locator("nav a[href='/panel/settings']").click()  # a plain nav link, no ?lang
    page.wait_for_url("**/panel/settings")
    assert page.locator("html").get_attribute("lang") == "zh-CN"
    assert page.locator("h1").inner_text() == "设置"
    page.locator("nav a[href='/panel']").click()
    page.wait_for_url("**/panel")
    assert page.locator("h1").inner_text() == "概览"
    icon = page.evaluate("fetch('/favicon.ico').then(r => r.status)")
    assert icon == 200
    assert refused == []  # no 401 for a favicon (or anything else) on any page
