"""The workbench in a real browser: Playwright driving Debian's chromium against a real ``memmy serve`` process
and a local model stub. Sign-in by the one-time link, a streamed Markdown answer (raw HTML shown as text), a tool
call, stop while streaming, a ``.docx`` whose text reaches the provider, the command panel and a slash command, the
task list's pin / rename / search, the IME case (Enter while composing never sends) and the pet continuing a
session. Saves a screenshot of every page under docs/workbench/ (the README shows them)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memmy.agent.schedule import ScheduleStore
from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, tool_results
from tests.test_panel_browser import browser, pytestmark  # the panel's chromium fixture and skip marks
from tests.workbench_client import serve_process, sign_in_link

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import Browser, Page, expect  # noqa: E402 - after the skip when playwright is missing

__all__ = ["browser", "pytestmark"]
SHOTS = Path(__file__).resolve().parents[1] / "docs" / "workbench"
MARKDOWN = (
    "Here is **the plan**:\n\n- read the file\n- fix the bug\n\n```python\nprint('hi')\n```\n\n"
    "Raw HTML stays text: <img src=x onerror=alert(1)> <script>alert(2)</script>"
)


def brain(body: dict[str, Any]) -> Reply:
    text = last_user_text(body)
    if "slowly" in text:
        return Reply(text=" ".join(f"word{i}" for i in range(60)), chunk_delay_s=0.25)
    if "gently" in text:
        return Reply(text=" ".join(f"step{i}" for i in range(40)), chunk_delay_s=0.1)
    if "run a tool" in text and not tool_results(body):
        return Reply(tool_calls=[("exec", json.dumps({"command": "echo tool-output-42"}))])
    if "run a tool" in text:
        return Reply(text="The command printed " + tool_results(body)[0].split()[-1])
    if "write the plan" in text and not tool_results(body):
        plan = {"path": "notes/plan.md", "content": "# Plan\n<b>not bold</b>\n- ship it"}
        return Reply(tool_calls=[("write_file", json.dumps(plan))])
    if "write the plan" in text:
        return Reply(text="Wrote notes/plan.md")
    if "markdown" in text:
        return Reply(text=MARKDOWN)
    return Reply(text="echo: " + text[-300:])


HOMES: dict[str, Path] = {}  # base URL -> the HOME of that memmy serve


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ModelStub]]:
    home = tmp_path_factory.mktemp("workbench-browser")
    with run_model_stub(brain) as stub, serve_process(home, stub) as base:
        HOMES[base] = home
        yield base, stub


def sign_in(browser: Browser, base: str, pet: bool = False) -> Page:
    page = browser.new_context(
        viewport={"width": 420, "height": 640} if pet else {"width": 1280, "height": 820}
    ).new_page()
    page.goto(sign_in_link(base) + ("&next=/pet" if pet else ""))
    expect(page.locator("#composer")).to_be_visible()
    return page


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def seen_by_the_page(page: Page, base: str) -> None:
    """Wait until the page has marked its open task read (the POST follows the turn's end), so that closing the page
    does not leave it unread for the tests after (the pet's list puts unread tasks first)."""
    sid = page.url.split("s=")[1]
    deadline = time.monotonic() + 30
    while any(t["unread"] for t in page.context.request.get(base + "/api/state").json()["sessions"] if t["id"] == sid):
        assert time.monotonic() < deadline, "the page never marked its task read"
        time.sleep(0.05)


def say(page: Page, text: str) -> None:
    page.locator("#input").fill(text)
    page.locator("#input").press("Enter")


def test_signin_page_without_a_link(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, _ = served
    page = browser.new_page()
    page.goto(base + "/")
    expect(page.locator("h1")).to_contain_text("Memmy workbench")
    expect(page.locator("body")).to_contain_text("memmy workbench")
    shot(page, "signin")
    page.goto(sign_in_link(base).replace("code=", "code=x"))
    expect(page.locator("body")).to_contain_text("already used or has expired")
    page.context.close()


def test_send_stream_markdown_tool_call_and_the_task_list(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    page = sign_in(browser, base)
    shot(page, "new-task")
    say(page, "show me markdown")
    answer = page.locator(".msg.assistant .md").last
    expect(answer.locator("strong")).to_have_text("the plan")
    expect(answer.locator("pre.code code")).to_have_text("print('hi')")
    expect(answer).to_contain_text("<script>alert(2)</script>")  # shown as text, never run
    assert answer.locator("script, img").count() == 0
    say(page, "please run a tool")
    tool = page.locator("details.tool").last
    expect(tool.locator(".tool-name")).to_have_text("⚙ exec")
    expect(page.locator(".msg.assistant .md").last).to_have_text("The command printed tool-output-42")
    tool.locator("summary").click()
    expect(tool.locator(".tool-out")).to_contain_text("tool-output-42")
    current = page.locator(".task.current")
    expect(current.locator(".task-title")).to_have_text("show me markdown")
    expect(page.locator('[data-group="today"] .task.current')).to_have_count(1)
    shot(page, "workbench")
    page.once("dialog", lambda dialog: dialog.accept("Markdown demo"))
    current.locator('[data-act="rename"]').click()
    expect(page.locator(".task.current .task-title")).to_have_text("Markdown demo")
    page.locator('.task.current [data-act="pin"]').click()
    expect(page.locator('[data-group="pinned"] .task-title')).to_have_text("Markdown demo")
    page.keyboard.press("Control+k")
    expect(page.locator("#search")).to_be_visible()
    page.locator("#search-input").fill("tool-output")
    expect(page.locator("#search-results li")).to_have_text(["Markdown demo"])
    shot(page, "search")
    page.keyboard.press("Escape")
    assert any("tool-output-42" in str(m.get("content")) for m in stub.requests[-1]["body"]["messages"])
    page.context.close()


def test_a_file_the_agent_writes_is_previewed(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, _ = served
    page = sign_in(browser, base)
    say(page, "write the plan please")
    expect(page.locator(".msg.assistant .md").last).to_have_text("Wrote notes/plan.md")
    artifact = page.locator(".artifact").last
    expect(artifact.locator(".code-head")).to_have_text("▤ notes/plan.md")
    expect(artifact.locator("code")).to_have_text("# Plan\n<b>not bold</b>\n- ship it")
    assert artifact.locator("b").count() == 0
    page.reload()  # the preview comes back from the saved session too
    expect(page.locator(".artifact .code-head")).to_have_text("▤ notes/plan.md")
    page.context.close()


def test_stop_while_streaming(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, _ = served
    page = sign_in(browser, base)
    say(page, "count slowly")
    expect(page.locator(".msg.assistant .md").last).to_contain_text("word1")
    expect(page.locator(".task.current .spinner")).to_be_visible()
    shot(page, "streaming")
    page.locator("#stop").click()
    expect(page.locator(".note").last).to_contain_text("stopped")
    expect(page.locator(".task.current .spinner")).to_have_count(0)
    expect(page.locator("#stop")).to_be_hidden()
    assert "word59" not in page.locator(".msg.assistant .md").last.inner_text()
    page.context.close()


def test_a_turn_keeps_running_when_the_window_closes(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, _ = served
    page = sign_in(browser, base)
    say(page, "count gently")
    expect(page.locator(".msg.assistant .md").last).to_contain_text("step1")
    sid = page.url.split("s=")[1]
    page.context.close()  # the turn runs in memmy serve, not in the page
    again = sign_in(browser, base)
    again.goto(f"{base}/?s={sid}")
    answer = again.locator(".msg.assistant .md").last
    expect(answer).to_contain_text("step0 step1")  # what streamed before the window opened, replayed
    expect(answer).to_have_text(" ".join(f"step{i}" for i in range(40)), timeout=30_000)
    expect(again.locator(".task.current .spinner")).to_have_count(0)
    expect(again.locator(".msg.assistant")).to_have_count(1)
    again.context.close()


def test_a_docx_attachment_reaches_the_provider(
    browser: Browser, served: tuple[str, ModelStub], tmp_path: Path
) -> None:
    import docx

    base, stub = served
    document = docx.Document()
    document.add_paragraph("The meeting moved to Thursday in room ORCHID.")
    path = tmp_path / "notes.docx"
    buffer = io.BytesIO()
    document.save(buffer)
    path.write_bytes(buffer.getvalue())
    page = sign_in(browser, base)
    page.locator("#files").set_input_files(str(path))
    expect(page.locator(".chip")).to_contain_text("notes.docx")
    say(page, "where is the meeting?")
    expect(page.locator(".msg.assistant .md").last).to_contain_text("echo:")
    sent = [m for m in stub.requests[-1]["body"]["messages"] if m["role"] == "user"][-1]["content"]
    assert "room ORCHID" in sent and "where is the meeting?" in sent
    seen_by_the_page(page, base)  # its answer (the document echoed back) may still stream: unread, it went first
    page.context.close()


def test_command_panel_and_a_slash_command(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    page = sign_in(browser, base)
    asked = len(stub.requests)
    page.locator("#input").fill("/")
    page.locator("#input").dispatch_event("input")
    expect(page.locator("#commands .cmd")).to_have_count(13)
    shot(page, "commands")
    page.locator("#input").fill("/sta")
    page.locator("#input").dispatch_event("input")
    expect(page.locator("#commands .cmd")).to_have_count(1)
    page.locator("#input").press("Tab")
    expect(page.locator("#input")).to_have_value("/status ")
    page.locator("#input").press("Enter")
    expect(page.locator(".note.command")).to_contain_text("model stub-model")
    assert len(stub.requests) == asked
    page.context.close()


def test_enter_while_an_ime_composes_never_sends(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    page = sign_in(browser, base)
    asked = len(stub.requests)
    box = page.locator("#input")
    box.fill("你好")
    # The keydown an IME sends when Enter picks a candidate: isComposing (keyCode 229 in Chrome).
    ime_enter = "{key: 'Enter', isComposing: true, bubbles: true, cancelable: true}"
    box.evaluate(f"el => el.dispatchEvent(new KeyboardEvent('keydown', {ime_enter}))")
    # Safari's order: compositionend comes after the Enter keydown, which itself says nothing about composing.
    box.dispatch_event("compositionstart")
    box.press("Enter")
    assert box.input_value().startswith("你好")  # not sent: the text is still there
    assert page.locator(".msg.user").count() == 0
    box.dispatch_event("compositionend")
    box.fill("你好")
    box.press("Enter")
    expect(page.locator(".msg.user").last).to_have_text("你好")
    expect(page.locator(".msg.assistant .md").last).to_have_text("echo: 你好")
    assert len(stub.requests) == asked + 1
    seen_by_the_page(page, base)
    page.context.close()


def test_the_pet_continues_a_session_and_opens_the_workbench(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    page = sign_in(browser, base)
    say(page, "start in the workbench")
    expect(page.locator(".msg.assistant .md").last).to_have_text("echo: start in the workbench")
    sid = page.url.split("s=")[1]
    pet = sign_in(browser, base, pet=True)
    expect(pet.locator("#mini li").first).to_have_attribute("data-id", sid)
    say(pet, "continue from the pet")
    expect(pet.locator("#preview")).to_have_text("echo: continue from the pet")
    history = [m for m in stub.requests[-1]["body"]["messages"] if m["role"] == "user"]
    assert [m["content"] for m in history][-2:] == ["start in the workbench", "continue from the pet"]
    expect(page.locator(".msg.user").last).to_have_text("continue from the pet")  # the open workbench follows
    shot(pet, "pet")
    with pet.context.expect_page() as opened:
        pet.locator("#preview").dblclick()
    full = opened.value
    expect(full.locator(".msg.user").last).to_have_text("continue from the pet")
    assert full.url.endswith(f"/?s={sid}")
    page.context.close()
    pet.context.close()


def test_settings_connection_test_language_and_log_level(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, _ = served
    page = sign_in(browser, base)
    page.goto(base + "/settings")
    expect(page.locator("#slots tbody tr")).to_have_count(6)
    expect(page.locator("#usage tbody tr")).to_have_count(6)
    expect(page.locator('#usage tr[data-slot="primary"] td').nth(1)).not_to_have_text("0")  # turns ran before
    rows = page.locator("#models tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first.locator("td").nth(2)).to_have_text("stub-model")
    expect(rows.first.locator("td").nth(4)).to_have_text("set")
    rows.first.locator("button").click()
    expect(rows.first.locator(".test-status")).to_contain_text("✓")
    page.locator("#log-level").select_option("DEBUG")
    shot(page, "settings")
    page.locator("#language").select_option("zh")
    expect(page.locator(".card h2").first).to_have_text("模型")
    page.goto(base + "/")
    expect(page.locator("#title")).to_have_text("新任务")
    say(page, "你好，记住我喜欢用 pytest")
    expect(page.locator(".msg.assistant .md").last).to_have_text("echo: 你好，记住我喜欢用 pytest")
    expect(page.locator('[data-group="today"] h2')).to_have_text("今天")
    shot(page, "workbench-zh")
    page.goto(base + "/settings")
    page.locator("#language").select_option("en")  # kept in the config: the other tests read English
    expect(page.locator(".card h2").first).to_have_text("Models")
    page.context.close()


def test_a_slot_set_in_settings_and_the_microphone(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    page = sign_in(browser, base)
    expect(page.locator("#mic")).to_be_hidden()  # no ASR slot yet: no microphone
    page.goto(base + "/settings")
    row = page.locator('#slots tr[data-slot="asr"]')
    row.locator('select[name="provider"]').select_option("openai")
    row.locator('input[name="model"]').fill("whisper-1")
    row.locator('input[name="apiBase"]').fill(stub.openai_url)
    row.locator('input[name="apiKey"]').fill("${WORKBENCH_ASR_KEY}")
    row.locator("button.save").click()
    expect(row.locator(".test-status")).to_have_text("✓ saved")
    expect(row.locator('input[name="apiKey"]')).to_have_attribute("placeholder", "${WORKBENCH_ASR_KEY}")
    row.locator("button.test").click()
    expect(row.locator(".test-status")).to_contain_text("✓ transcribed")
    shot(page, "settings-slots")
    # The microphone: a recorder that "records" a file (the fake endpoint hears the text after SAY:)
    page.context.add_init_script(
        "navigator.mediaDevices.getUserMedia = async () => ({ getTracks: () => [{ stop() {} }] });"
        "window.MediaRecorder = class { constructor() { this.mimeType = 'audio/webm'; this.on = {}; }"
        " addEventListener(k, f) { this.on[k] = f; }"
        " start() {} stop() { this.on.dataavailable({ data: new Blob(['RIFF....SAY:what is on my calendar'],"
        " { type: 'audio/webm' }) }); this.on.stop(); } };"
    )
    page.goto(base + "/")
    mic = page.locator("#mic")
    expect(mic).to_be_visible()
    mic.click()
    expect(mic).to_have_class("btn mic recording")
    mic.click()
    expect(page.locator("#input")).to_have_value("what is on my calendar")
    heard = [r for r in stub.requests if r["path"].endswith("/audio/transcriptions")][-1]
    assert heard["body"]["file"][:2] == ("voice.webm", "audio/webm")
    page.locator("#input").press("Enter")
    expect(page.locator(".msg.assistant .md").last).to_have_text("echo: what is on my calendar")
    page.context.close()


def test_slash_image_shows_the_picture(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    page = sign_in(browser, base)
    csrf = page.evaluate("JSON.parse(document.getElementById('boot').textContent).csrf")
    slot = {"slot": "image", "provider": "openai", "model": "img-1", "apiBase": stub.openai_url}
    assert page.context.request.post(f"{base}/api/settings/slot", data=slot, headers={"x-csrf-token": csrf}).ok
    say(page, "/image a boat on a lake")
    picture = page.locator(".artifact.image img")
    expect(picture).to_be_visible()
    page.wait_for_function("() => document.querySelector('.artifact.image img').naturalWidth === 1")
    expect(page.locator(".note").last).to_contain_text("saved images/")
    page.reload()  # the task reopened: the picture is in its history
    expect(page.locator(".artifact.image img")).to_be_visible()
    page.wait_for_function("() => document.querySelector('.artifact.image img').naturalWidth === 1")
    page.context.close()


def test_a_schedule_shows_in_the_task_list_and_fires(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, stub = served
    store = ScheduleStore(HOMES[base] / ".memmy")
    later = store.add("water the plants every morning", cron="0 7 * * *")
    page = sign_in(browser, base)
    expect(page.locator(f'[data-group="scheduled"] [data-schedule="{later.id}"]')).to_contain_text("water the plants")
    soon = store.add("tell me a scheduled joke", at=time.time() + 2)
    page.reload()
    expect(page.locator(f'[data-schedule="{soon.id}"]')).to_be_visible()
    fired = page.locator("a.task", has_text="tell me a scheduled joke").filter(has=page.locator(".clock"))
    expect(fired.locator(".dot")).to_have_count(1, timeout=60_000)  # fired, finished, unread
    expect(page.locator(f'[data-schedule="{soon.id}"]')).to_have_count(0)  # no longer upcoming
    shot(page, "schedule")
    fired.click()
    expect(page.locator(".msg.assistant .md").last).to_have_text("echo: tell me a scheduled joke")
    page.on("dialog", lambda dialog: dialog.accept())
    row = page.locator(f'[data-schedule="{later.id}"]')
    row.hover()
    row.locator('[data-act="unschedule"]').click()
    expect(row).to_have_count(0)
    assert store.get(later.id) is None
    page.context.close()


def test_a_notification_when_a_task_finishes_out_of_sight(browser: Browser, served: tuple[str, ModelStub]) -> None:
    base, _ = served
    page = sign_in(browser, base)
    page.context.grant_permissions(["notifications"])
    page.goto(base + "/settings")
    page.locator("#notify").check()
    page.context.add_init_script(
        "window.__shown = []; window.Notification = class { static permission = 'granted';"
        " constructor(title, options) { window.__shown.push(options.body); } };"
    )
    page.goto(base + "/")
    say(page, "first task to watch")
    expect(page.locator(".msg.assistant .md").last).to_have_text("echo: first task to watch")
    sid = page.url.split("s=")[1]
    say(page, "/new")
    expect(page.locator("#title")).to_have_text("New task")
    assert page.evaluate("window.__shown") == []  # it finished while it was on screen
    bench = page.context.request
    csrf = page.evaluate("JSON.parse(document.getElementById('boot').textContent).csrf")
    bench.post(f"{base}/api/send", multipart={"text": "second round", "session": sid}, headers={"x-csrf-token": csrf})
    page.wait_for_function("() => window.__shown.length === 1")
    assert page.evaluate("window.__shown") == ["first task to watch — finished"]
    expect(page.locator(f'.task[data-id="{sid}"] .dot')).to_have_count(1)  # unread, in the list
    page.context.close()
