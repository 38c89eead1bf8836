"""The workbench's Channels page in a real browser against a real ``memmy serve``: a wrong Telegram token refused
with Telegram's own message, the right one connected (the channel starts at once, no restart), the state refreshed
every 5 s, a pairing code shown and redeemed from the chat, and the owner answered through the agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.agent_stubs import ModelStub, run_model_stub
from tests.fake_telegram import FakeTelegram, fake_telegram
from tests.test_channels import brain
from tests.test_panel_browser import browser, pytestmark  # noqa: F401 - the panel's chromium fixture and marks
from tests.workbench_client import Bench, serve_process, sign_in_link

SHOTS = Path(__file__).resolve().parents[1] / "docs" / "workbench"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, ModelStub, FakeTelegram]]:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        extra = f"channels:\n  telegram:\n    enabled: false\n    apiBase: '{fake.url}'\n"
        with serve_process(tmp_path / "home", stub, extra=extra) as base:
            yield base, stub, fake


def test_connect_pair_and_talk_from_the_channels_page(
    browser: Browser,  # noqa: F811 - the fixture imported above
    served: tuple[str, ModelStub, FakeTelegram],
) -> None:
    base, stub, fake = served
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(sign_in_link(base))
    page.goto(base + "/channels")
    card = page.locator('.channel[data-name="telegram"]')
    expect(card.locator("h2 .state")).to_have_text("disabled")
    card.locator('input[name="token"]').fill("1:wrong")
    card.locator('button[type="submit"]').click()
    expect(card.locator(".result")).to_contain_text("rejected")
    expect(card.locator(".result")).not_to_contain_text("1:wrong")  # the SDK's message quotes it: scrubbed

    card.locator('input[name="token"]').fill(fake.token)
    card.locator('input[name="allowFrom"]').fill("42")
    card.locator('button[type="submit"]').click()
    expect(card.locator(".result")).to_contain_text("@memmy_test_bot")
    page.locator("body").click()  # focus leaves the form, so the 5-second refresh redraws the card
    expect(card.locator("h2 .state")).to_have_text("connected", timeout=15_000)

    fake.say(42, 42, "hello from the phone")
    fake.wait_for(lambda: "echo: hello from the phone" in fake.texts(42), 60)  # no restart was needed

    card.locator("button", has_text="Pairing code").click()
    expect(card.locator(".result")).to_contain_text("/pair ")
    code = card.locator(".result").inner_text().split("/pair ")[1].strip()
    fake.say(77, 77, f"/pair {code}")
    fake.wait_for(lambda: bool(fake.texts(77)) and fake.texts(77)[-1].startswith("Paired"))
    page.locator("body").click()
    expect(card.locator(".counts")).to_contain_text("77", timeout=15_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "channels.png"), full_page=True)  # all six platforms

    card.locator("button", has_text="Disconnect").click()
    expect(card.locator("h2 .state")).to_have_text("disabled", timeout=15_000)
    page.context.close()


def test_the_channels_api_needs_the_sign_in_and_the_csrf_token(served: tuple[str, ModelStub, FakeTelegram]) -> None:
    base, _, fake = served
    bench = Bench(base)
    listed = bench.http.get("/api/channels").json()["channels"]
    assert {c["name"] for c in listed} >= {"telegram", "discord", "feishu", "dingtalk"}
    telegram = next(c for c in listed if c["name"] == "telegram")
    assert telegram["public"] == {"apiBase": fake.url} and telegram["state"] == "disabled"
    refused = bench.http.post("/api/channels/pair", json={"name": "telegram"})  # no CSRF token
    assert refused.status_code == 403
    with httpx.Client(base_url=base) as stranger:  # no sign-in cookie
        assert stranger.get("/api/channels").status_code == 401
    assert bench.post("/api/channels/pair", {"name": "telegram"}).json()["code"]
