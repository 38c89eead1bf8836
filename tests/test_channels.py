"""IM channels end to end: a fake Telegram Bot API server (tests/fake_telegram.py, the documented wire format)
with python-telegram-bot's own client on the path, the real agent runtime answering through a fake model
provider, and a real memory daemon: recall before, capture after, the channel as the memory's source. Also who
may talk to a bot, one session per chat, ordering and queueing, a dropped connection, long answers split at
Telegram's limit, and `memmy channels` on the command line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from memmy.agent.channels.access import AccessBook
from memmy.agent.channels.base import Attachment, Inbound
from memmy.agent.channels.router import compose_prompt
from memmy.agent.channels.supervisor import ChannelSupervisor, read_status, supervisor_for
from memmy.agent.channels.text import markdown_to_telegram_html, split_message
from memmy.agent.cli import cli
from memmy.agent.config import load_agent_config
from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, write_agent_config
from tests.conftest import Daemon, free_port
from tests.fake_dingtalk import fake_dingtalk
from tests.fake_discord import fake_discord
from tests.fake_feishu import fake_feishu
from tests.fake_imessage import fake_bluebubbles
from tests.fake_telegram import FakeTelegram, fake_telegram, shown_text

OWNER = 42
STRANGER = 99
LONG_ANSWER = ("Step one: run the build.\n\n" + "x" * 90 + "\n") * 30 + "```bash\n" + "make all\n" * 120 + "```\n"


def brain(body: dict[str, Any]) -> Reply:
    """The fake model: echoes the question, answers long when asked, slowly when told to."""
    text = last_user_text(body)
    question = text.rsplit("</memmy_memory_context>", 1)[-1]
    question = question.replace("<current_user_request>", "").replace("</current_user_request>", "").strip()[-300:]
    if "long report" in question:
        return Reply(text=LONG_ANSWER)
    if "slow" in question:
        return Reply(text="done: " + question, delay_s=1.5)
    return Reply(text="echo: " + question)


def write_config(home: Path, stub: ModelStub, daemon: Daemon | None, channels: str) -> None:
    """config.yaml: the fake provider, the daemon (when given) and the ``channels`` section."""
    memory = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n" if daemon else ""
    write_agent_config(home, stub, extra=memory + channels, memory=daemon is not None)


def channel_config(home: Path, stub: ModelStub, fake: FakeTelegram, daemon: Daemon | None, extra: str = "") -> None:
    os.environ["TEST_TG_TOKEN"] = fake.token
    channels = (
        "channels:\n  telegram:\n    token: ${TEST_TG_TOKEN}\n"
        f"    apiBase: '{fake.url}'\n    allowFrom: ['{OWNER}']\n{extra}"
    )
    write_config(home, stub, daemon, channels)


@contextmanager
def supervising() -> Iterator[ChannelSupervisor]:
    """The channels of the current config.yaml, run by a supervisor on an event loop of their own."""
    supervisor = supervisor_for(load_agent_config())
    assert supervisor is not None
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> None:
        supervisor.start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)

    async def stop() -> None:
        await supervisor.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:  # what the SDKs left running (keep-alives, readers)
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await loop.shutdown_asyncgens()

    try:
        yield supervisor
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def user_requests(stub: ModelStub) -> list[str]:
    return [last_user_text(r["body"]) for r in stub.requests]


@pytest.fixture(autouse=True)
def _token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_TG_TOKEN", "")


def test_a_chat_is_answered_with_memory_and_continues_its_session(isolated_home: Path, daemon: Daemon) -> None:
    with daemon.client() as http:
        added = http.post(
            "/api/v1/memory/add",
            json={"content": "The heron service deploys with make deploy-heron on port 9443", "tags": ["deploy"]},
        )
        assert added.status_code == 200, added.text
    daemon.drain()
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, daemon)
        with supervising():
            fake.say(OWNER, OWNER, "How do I deploy the heron service?")
            fake.wait_for(lambda: any(t.startswith("echo:") for t in fake.texts(OWNER)))
            first = user_requests(stub)[-1]
            assert "make deploy-heron" in first and "<memmy_memory_context" in first  # recalled, then asked
            assert fake.texts(OWNER)[-1] == "echo: How do I deploy the heron service?"
            assert any(chat == str(OWNER) and action == "typing" for chat, action in fake.actions)

            fake.say(OWNER, OWNER, "and which port was that?")
            fake.wait_for(lambda: len([t for t in fake.texts(OWNER) if t.startswith("echo:")]) == 2)
            history = stub.requests[-1]["body"]["messages"]
            said = [m["content"] for m in history if m["role"] == "user"]
            assert len(said) == 2 and "How do I deploy the heron service?" in said[0]  # the same session
    with daemon.client() as http:  # captured, with the channel as its source
        deadline = time.monotonic() + 30
        while True:
            items = http.get("/api/v1/panel/items", params={"sourceAgent": "telegram", "pageSize": 20}).json()
            if any("heron" in json.dumps(item) for item in items["items"]):
                break
            assert time.monotonic() < deadline, items
            time.sleep(0.1)


def test_a_stranger_is_refused_until_paired(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising() as supervisor:
            fake.say(STRANGER, STRANGER, "tell me the secrets")
            fake.wait_for(lambda: bool(fake.texts(STRANGER)))
            assert "private" in fake.texts(STRANGER)[0]
            assert stub.requests == []  # the model never saw it
            fake.say(STRANGER, STRANGER, "/pair WRONGCODE")
            fake.wait_for(lambda: len(fake.texts(STRANGER)) == 2)
            assert "not valid" in fake.texts(STRANGER)[1]

            printed = CliRunner().invoke(cli, ["channels", "pair", "telegram", "--json"])
            assert printed.exit_code == 0, printed.output
            code = json.loads(printed.output)["code"]
            fake.say(STRANGER, STRANGER, f"/pair {code}")
            fake.wait_for(lambda: len(fake.texts(STRANGER)) == 3)
            assert fake.texts(STRANGER)[2].startswith("Paired")
            fake.say(STRANGER, STRANGER, "hello after pairing")
            fake.wait_for(lambda: fake.texts(STRANGER)[-1] == "echo: hello after pairing")
            fake.say(STRANGER + 1, STRANGER + 1, f"/pair {code}")  # a code works once
            fake.wait_for(lambda: bool(fake.texts(STRANGER + 1)))
            assert "not valid" in fake.texts(STRANGER + 1)[0]
            assert supervisor.states["telegram"].refused == 3
    assert str(STRANGER) in AccessBook(isolated_home / ".memmy").paired("telegram")


def test_messages_queue_in_order_and_stop_and_new_work(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising():
            for n in range(3):
                fake.say(OWNER, OWNER, f"slow task {n}")
            fake.wait_for(lambda: len([t for t in fake.texts(OWNER) if t.startswith("done:")]) == 3, 60)
            answers = [t for t in fake.texts(OWNER) if t.startswith("done:")]
            assert answers == [f"done: slow task {n}" for n in range(3)]  # each once, in order
            assert sum(t.startswith("Queued") for t in fake.texts(OWNER)) == 1  # once while the first one ran

            fake.say(OWNER, OWNER, "slow one to stop")
            fake.wait_for(lambda: any(chat == str(OWNER) for chat, _ in fake.actions[-1:]))
            time.sleep(0.3)
            fake.say(OWNER, OWNER, "/stop")
            fake.wait_for(lambda: "Stopped." in fake.texts(OWNER))
            fake.say(OWNER, OWNER, "/new")
            fake.wait_for(lambda: any(t.startswith("New session") for t in fake.texts(OWNER)))
            fake.say(OWNER, OWNER, "fresh start")
            fake.wait_for(lambda: fake.texts(OWNER)[-1] == "echo: fresh start")
            said = [m["content"] for m in stub.requests[-1]["body"]["messages"] if m["role"] == "user"]
            assert said == ["fresh start"]  # /new: nothing of the earlier session
            time.sleep(2)  # the stopped turn's slow answer would have arrived by now
            assert "done: slow one to stop" not in fake.texts(OWNER)


def test_a_dropped_connection_reconnects_and_the_reply_is_delivered_once(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising() as supervisor:
            fake.say(OWNER, OWNER, "slow question during an outage")
            fake.wait_for(lambda: len(stub.requests) == 1)
            fake.drop_polls(2)  # the polling connection fails twice while the turn runs
            fake.wait_for(lambda: "done: slow question during an outage" in fake.texts(OWNER), 60)
            fake.wait_for(lambda: supervisor.states["telegram"].restarts >= 1 and fake.fail_polls == 0, 30)
            fake.say(OWNER, OWNER, "after the outage")
            fake.wait_for(lambda: "echo: after the outage" in fake.texts(OWNER), 60)
            texts = fake.texts(OWNER)
            assert texts.count("done: slow question during an outage") == 1
            assert texts.count("echo: after the outage") == 1
            assert supervisor.states["telegram"].state == "connected"


def test_a_long_answer_is_split_at_telegrams_limit(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising():
            fake.say(OWNER, OWNER, "write the long report")
            fake.wait_for(lambda: sum(len(t) for t in fake.texts(OWNER)) > 4000, 60)
            time.sleep(0.5)
            parts = fake.texts(OWNER)
    assert len(parts) >= 2 and all(len(p) <= 4096 for p in parts)
    assert all(p.count("```") == 0 for p in parts)  # fences rendered as code, not shown as backticks
    shown = "".join(parts)
    assert shown.count("make all") == 120 and shown.count("Step one") == 30


def test_a_document_is_read_and_a_written_file_comes_back(isolated_home: Path) -> None:
    def writer(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="wrote it")
        if "notes.md" in last_user_text(body) or "budget" in last_user_text(body):
            return Reply(tool_calls=[("write_file", json.dumps({"path": "summary.txt", "content": "budget ok"}))])
        return Reply(text="?")

    with run_model_stub(writer) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None, extra="    tools: true\n")
        with supervising():
            fake.say(
                OWNER, OWNER, "summarise this", document=("notes.md", b"# Q3\nThe budget is 12k EUR", "text/markdown")
            )
            fake.wait_for(lambda: any(s.method == "sendDocument" for s in fake.sent), 60)
    assert "The budget is 12k EUR" in last_user_text(stub.requests[0]["body"])
    document = next(s for s in fake.sent if s.method == "sendDocument")
    assert document.filename == "summary.txt" and document.data == b"budget ok"


def test_shell_and_file_tools_are_off_in_chats_by_default(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising():
            fake.say(OWNER, OWNER, "hi")
            fake.wait_for(lambda: "echo: hi" in fake.texts(OWNER))
    names = {tool["function"]["name"] for tool in stub.requests[0]["body"].get("tools", [])}
    assert not names & {"exec", "write_file", "edit_file", "read_file"} and "web_fetch" in names


def test_memmy_serve_runs_the_channels_and_status_shows_them(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None, extra="")
        runner = CliRunner()
        before = runner.invoke(cli, ["channels", "status", "--json"])
        assert json.loads(before.output)["channels"][0]["state"] == "not running"
        port = free_port()
        command = [sys.executable, "-c", "from memmy.agent.cli import main; main()", "serve", "--port", str(port)]
        server = subprocess.Popen(command, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None and time.monotonic() < deadline, "memmy serve did not start"
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            fake.say(OWNER, OWNER, "hello from the phone")
            fake.wait_for(lambda: "echo: hello from the phone" in fake.texts(OWNER), 60)
            time.sleep(2.5)  # the status file is rewritten every 2 s
            shown = runner.invoke(cli, ["channels", "status", "--json"])
            assert shown.exit_code == 0, shown.output
            status = json.loads(shown.output)
            assert status["running"] is True
            assert status["channels"][0]["state"] == "connected" and status["channels"][0]["messages_in"] == 1
        finally:
            server.terminate()
            server.wait(30)
    assert read_status(isolated_home / ".memmy")["running"] is False


def test_connect_checks_the_token_with_the_platform(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        write_agent_config(isolated_home, stub, memory=False)
        runner = CliRunner()
        refused = runner.invoke(cli, ["channels", "connect", "telegram", "--token", "1:wrong", "--api-base", fake.url])
        assert refused.exit_code == 1 and "rejected" in refused.output
        assert "1:wrong" not in refused.output  # the SDK's message names the token: it is scrubbed
        assert "channels" not in (isolated_home / ".memmy" / "config.yaml").read_text()
        os.environ["TEST_TG_TOKEN"] = fake.token
        done = runner.invoke(
            cli, ["channels", "connect", "telegram", "--token", "${TEST_TG_TOKEN}", "--api-base", fake.url]
        )
        assert done.exit_code == 0, done.output
        assert "@memmy_test_bot" in done.output and "memmy channels pair telegram" in done.output
        written = (isolated_home / ".memmy" / "config.yaml").read_text()
        assert "${TEST_TG_TOKEN}" in written and fake.token not in written  # the reference is kept
        listed = json.loads(runner.invoke(cli, ["channels", "list", "--json"]).output)["channels"]
        telegram = next(c for c in listed if c["name"] == "telegram")
        assert telegram["enabled"] and telegram["available"]
        imessage = next(c for c in listed if c["name"] == "imessage")
        assert imessage["available"] is (sys.platform == "darwin")
        assert runner.invoke(cli, ["channels", "disconnect", "telegram"]).exit_code == 0
        listed = json.loads(runner.invoke(cli, ["channels", "list", "--json"]).output)["channels"]
        assert not next(c for c in listed if c["name"] == "telegram")["enabled"]


@pytest.mark.parametrize("limit", [64, 500, 4096])
def test_split_keeps_every_character_and_balances_code_fences(limit: int) -> None:
    parts = split_message(LONG_ANSWER, limit)
    assert all(len(p) <= limit for p in parts) and len(parts) >= 2
    assert all(p.count("```") % 2 == 0 for p in parts)
    rebuilt = "".join(p.replace("```bash\n", "").replace("\n```", "").replace("```", "") for p in parts)
    assert rebuilt.replace("\n", "") == LONG_ANSWER.replace("```bash\n", "").replace("```", "").replace("\n", "")


def test_markdown_becomes_telegram_html_that_telegram_parses() -> None:
    text = (
        "# Title\nUse `a < b` and **bold** & <script>x</script> [docs](https://example.com/a?b=1&c=2)\n"
        "```py\nif a<b: pass\n```"
    )
    converted = markdown_to_telegram_html(text)
    shown = shown_text(converted, "HTML")  # the fake's parser raises where Telegram would answer 400
    assert "<script>" in shown and "if a<b: pass" in shown and "**" not in shown
    assert "<b>bold</b>" in converted and "<pre><code" in converted


def test_the_bot_token_never_reaches_a_log_line(isolated_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising():
            fake.say(OWNER, OWNER, "hi")
            fake.wait_for(lambda: "echo: hi" in fake.texts(OWNER))
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "/bot<token>/getUpdates" in logged  # httpx logged the requests …
    assert fake.token.split(":")[1] not in logged  # … without the token


@dataclass(frozen=True)
class Platform:
    """How the shared scenario drives one platform's fake."""

    name: str
    fake: Callable[[], AbstractContextManager[Any]]
    settings: Callable[[Any], str]  # the credential lines of channels.<name> (``${TEST_SECRET}`` for the secret)
    secret: Callable[[Any], str]
    owner: str
    stranger: str
    limit: int
    fences: bool = True  # whether the platform shows code fences (iMessage shows plain text: they are dropped)


PLATFORMS = [
    Platform(
        "dingtalk",
        fake_dingtalk,
        lambda fake: f"clientId: {fake.client_id}\n    clientSecret: ${{TEST_SECRET}}",
        lambda fake: str(fake.client_secret),
        "staff-owner",
        "staff-stranger",
        5000,
    ),
    Platform(
        "discord",
        fake_discord,
        lambda fake: "token: ${TEST_SECRET}",
        lambda fake: str(fake.token),
        "5001",
        "5002",
        2000,
    ),
    Platform(
        "feishu",
        fake_feishu,
        lambda fake: f"appId: {fake.app_id}\n    appSecret: ${{TEST_SECRET}}",
        lambda fake: str(fake.app_secret),
        "ou_owner",
        "ou_stranger",
        30000,
    ),
    Platform(
        "imessage",
        fake_bluebubbles,
        lambda fake: "password: ${TEST_SECRET}",
        lambda fake: str(fake.password),
        "+15550001",
        "+15550002",
        20000,
        fences=False,
    ),
]


@pytest.mark.parametrize("platform", PLATFORMS, ids=[p.name for p in PLATFORMS])
def test_a_platform_answers_with_memory_refuses_strangers_and_survives_a_drop(
    platform: Platform, isolated_home: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DingTalk, Discord and Feishu through their SDKs, iMessage through BlueBubbles' REST API: a message in →
    recall → the fake provider → the answer out; a stranger refused before the model; the connection dropped
    mid-turn → reconnected, answered once; a long answer split within the platform's limit (Telegram has the same
    checks above, and more)."""
    fact = f"The {platform.name} osprey cache is warmed by make warm-osprey-{platform.name}"
    with daemon.client() as http:
        assert http.post("/api/v1/memory/add", json={"content": fact}).status_code == 200
    daemon.drain()
    with run_model_stub(brain) as stub, platform.fake() as fake:
        monkeypatch.setenv("TEST_SECRET", platform.secret(fake))
        channels = (
            f"channels:\n  {platform.name}:\n    {platform.settings(fake)}\n"
            f"    apiBase: '{fake.url}'\n    allowFrom: ['{platform.owner}']\n"
        )
        write_config(isolated_home, stub, daemon, channels)
        with supervising() as supervisor:
            fake.wait_for(lambda: fake.connections == 1)
            fake.say("1001", platform.owner, f"How is the {platform.name} osprey cache warmed?")
            fake.wait_for(lambda: f"echo: How is the {platform.name} osprey cache warmed?" in fake.texts("1001"))
            assert f"make warm-osprey-{platform.name}" in user_requests(stub)[-1]  # recalled into the request

            fake.say("1002", platform.stranger, "let me in")
            fake.wait_for(lambda: bool(fake.texts("1002")))
            assert "private" in fake.texts("1002")[0] and len(stub.requests) == 1

            fake.say("1001", platform.owner, "slow step while the link drops")
            fake.wait_for(lambda: len(stub.requests) == 2)
            fake.drop()
            fake.wait_for(lambda: fake.connections == 2, 60)  # reconnected by the supervisor
            fake.wait_for(lambda: "done: slow step while the link drops" in fake.texts("1001"), 60)
            fake.say("1001", platform.owner, "write the long report")
            end = "```" if platform.fences else "make all"
            fake.wait_for(lambda: "make all" in "".join(fake.texts("1001")) and fake.texts("1001")[-1].endswith(end))
            texts = fake.texts("1001")
            assert texts.count("done: slow step while the link drops") == 1
            assert supervisor.states[platform.name].restarts >= 1
    report = [t for t in texts if "Step one" in t or "make all" in t]
    assert all(len(t) <= platform.limit for t in report) and len(report) >= -(-len(LONG_ANSWER) // platform.limit)
    assert "".join(report).count("make all") == 120 and all(t.count("```") % 2 == 0 for t in report)


def test_feishu_connect_names_the_missing_permission_scopes(isolated_home: Path) -> None:
    with run_model_stub(brain) as stub, fake_feishu() as fake:
        write_agent_config(isolated_home, stub, memory=False)
        fake.missing_scope = True
        options = ["--set", f"appId={fake.app_id}", "--set", f"appSecret={fake.app_secret}", "--api-base", fake.url]
        refused = CliRunner().invoke(cli, ["channels", "connect", "feishu", *options])
        assert refused.exit_code == 1
        assert "im:message" in refused.output and "im:message:send_as_bot" in refused.output
        assert fake.app_secret not in refused.output
        fake.missing_scope = False
        done = CliRunner().invoke(cli, ["channels", "connect", "feishu", *options])
        assert done.exit_code == 0, done.output


def test_a_photo_reaches_the_model_as_an_image_and_a_docx_as_text(isolated_home: Path) -> None:
    import io

    from docx import Document

    document = Document()
    document.add_paragraph("The quarterly budget is 48k EUR")
    docx = io.BytesIO()
    document.save(docx)
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
    )
    with run_model_stub(brain) as stub, fake_telegram() as fake:
        channel_config(isolated_home, stub, fake, None)
        with supervising():
            fake.say(
                OWNER,
                OWNER,
                "what is the budget?",
                document=(
                    "budget.docx",
                    docx.getvalue(),
                    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                ),
            )
            fake.wait_for(lambda: any(t.startswith("echo:") for t in fake.texts(OWNER)))
            fake.say(OWNER, OWNER, "describe it", document=("chart.png", png, "image/png"))
            fake.wait_for(lambda: len([t for t in fake.texts(OWNER) if t.startswith("echo:")]) == 2)
    assert "The quarterly budget is 48k EUR" in last_user_text(stub.requests[0]["body"])
    content = stub.requests[1]["body"]["messages"][-1]["content"]
    assert isinstance(content, list) and any(part.get("type") == "image_url" for part in content)


def test_a_voice_note_is_named_by_its_type_not_its_file_name() -> None:
    voice = Attachment("recording.oga", "audio/ogg", b"OggS fake audio")
    text, parts, notes = compose_prompt(Inbound("telegram", "1", "1", "", attachments=(voice,)))
    assert (text, parts) == ("", []) and "speech-to-text" in notes[0]
    memo = Attachment("voice-memo.md", "text/markdown", b"# voice memo\nship on Friday")
    text, parts, notes = compose_prompt(Inbound("telegram", "1", "1", "notes", attachments=(memo,)))
    assert "ship on Friday" in text and notes == []


WECOM_EXAMPLE_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
WECOM_EXAMPLE = (  # WeCom's documented decryption example ("加解密方案说明"): signature, timestamp, nonce, Encrypt
    "477715d11cdb4164915debcba66cb864d751f3e6",
    "1409659813",
    "1372623149",
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvuJTs3"
    "TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5"
    "gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWr"
    "QUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uy"
    "PIGHBZZIs2pDBS8R07+qN+E7Q==",
)


def test_wecom_decrypts_wecoms_published_example_and_refuses_a_forged_signature() -> None:
    from memmy.agent.channels.wecom import SignatureError, WeComCrypt

    crypt = WeComCrypt("QDG6eK", WECOM_EXAMPLE_KEY, "wx5823bf96d3bd56c7")
    xml = crypt.decrypt(*WECOM_EXAMPLE)
    assert "<Content><![CDATA[hello]]></Content>" in xml and "mycreate" in xml
    with pytest.raises(SignatureError):
        crypt.decrypt("0" * 40, *WECOM_EXAMPLE[1:])
    with pytest.raises(SignatureError):  # the right key, another corp
        WeComCrypt("QDG6eK", WECOM_EXAMPLE_KEY, "ww_other_corp").decrypt(*WECOM_EXAMPLE)
    encrypted, signature = crypt.encrypt("往返 round trip", "n1", "1700000000")
    assert crypt.decrypt(signature, "1700000000", "n1", encrypted) == "往返 round trip"


def test_wecom_answers_with_memory_refuses_strangers_and_sends_files(
    isolated_home: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WeCom (the WeChat substitute) through its documented callback + message API against a fake WeCom: the URL
    check, an encrypted message in -> recall -> the fake provider -> markdown out; a stranger refused; a forged
    callback refused; WeCom's retry of the same MsgId answered once; an expired access token fetched again; a long
    CJK answer split within 2,048 bytes; a file the agent wrote uploaded and sent."""
    from tests.fake_wecom import fake_wecom

    fact = "The wecom kestrel report is rebuilt by make kestrel-report"
    with daemon.client() as http:
        assert http.post("/api/v1/memory/add", json={"content": fact}).status_code == 200
    daemon.drain()

    def model(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="wrote it")
        if "write the file" in last_user_text(body):
            return Reply(tool_calls=[("write_file", json.dumps({"path": "report.md", "content": "# 报告\nok"}))])
        if "长" in last_user_text(body):
            return Reply(text=("中文段落。" * 60 + "\n\n") * 12 + "```\ncode line\n```")
        return brain(body)

    port = free_port()
    with run_model_stub(model) as stub, fake_wecom() as fake:
        fake.callback = f"http://127.0.0.1:{port}/wecom/callback"
        monkeypatch.setenv("TEST_SECRET", fake.secret)
        channels = (
            f"channels:\n  wecom:\n    corpId: {fake.corp_id}\n    agentId: '{fake.agent_id}'\n"
            f"    secret: ${{TEST_SECRET}}\n    token: {fake.token}\n    encodingAESKey: {fake.aes_key}\n"
            f"    listen: '127.0.0.1:{port}'\n    apiBase: '{fake.url}'\n    allowFrom: [zhangsan]\n    tools: true\n"
        )
        write_config(isolated_home, stub, daemon, channels)
        with supervising() as supervisor:
            fake.wait_for(lambda: supervisor.states["wecom"].state == "connected" and fake.tokens_issued == 1)

            def listening() -> bool:
                try:
                    return fake.verify_url("echo-1234").text == "echo-1234"
                except httpx.HTTPError:
                    return False

            fake.wait_for(listening)
            assert fake.say("zhangsan", "How is the kestrel report rebuilt?").status_code == 200
            fake.wait_for(lambda: "echo: How is the kestrel report rebuilt?" in fake.texts("zhangsan"))
            assert "make kestrel-report" in user_requests(stub)[-1]

            assert fake.say("lisi", "let me in").status_code == 200
            fake.wait_for(lambda: bool(fake.texts("lisi")))
            assert "private" in fake.texts("lisi")[0] and len(stub.requests) == 1
            assert fake.say("zhangsan", "forged", forged=True).status_code == 403

            fake.expire_token()
            assert fake.say("zhangsan", "once only").status_code == 200
            assert fake.say("zhangsan", "once only", again=fake.last_msg_id).status_code == 200  # WeCom's retry
            fake.wait_for(lambda: "echo: once only" in fake.texts("zhangsan"))
            assert fake.tokens_issued == 2  # the expired token was fetched again

            fake.say("zhangsan", "写一份长报告")
            fake.wait_for(lambda: any("code line" in t for t in fake.texts("zhangsan")))
            fake.say("zhangsan", "write the file")
            fake.wait_for(lambda: any(m.msgtype == "file" for m in fake.messages))
            texts = fake.texts("zhangsan")
    assert texts.count("echo: once only") == 1
    report = [t for t in texts if "中文段落" in t or "code line" in t]
    assert len(report) >= 3 and all(len(t.encode()) <= 2048 for t in report)
    assert "".join(report).count("中文段落") == 720 and "```" not in "".join(report) and "> code line" in report[-1]
    assert next(iter(fake.files.values())) == ("report.md", "# 报告\nok".encode())


@pytest.mark.parametrize(
    "platform", [p for p in PLATFORMS if p.name in ("feishu", "dingtalk")], ids=["dingtalk", "feishu"]
)
def test_a_file_the_agent_wrote_reaches_feishu_and_dingtalk(
    platform: Platform, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files out through each platform's upload API: Feishu's ``im/v1/files`` + a ``file`` message, DingTalk's
    ``media/upload`` + the robot's ``sampleFile`` message to the person who asked."""

    def writer(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="wrote it")
        return Reply(tool_calls=[("write_file", json.dumps({"path": "plan.pdf", "content": "%PDF-1.4 plan"}))])

    with run_model_stub(writer) as stub, platform.fake() as fake:
        monkeypatch.setenv("TEST_SECRET", platform.secret(fake))
        channels = (
            f"channels:\n  {platform.name}:\n    {platform.settings(fake)}\n    apiBase: '{fake.url}'\n"
            f"    oapiBase: '{fake.url}'\n    allowFrom: ['{platform.owner}']\n    tools: true\n"
        )
        write_config(isolated_home, stub, None, channels)
        with supervising():
            fake.wait_for(lambda: fake.connections == 1)
            fake.say("1001", platform.owner, "write the plan as a file")
            fake.wait_for(lambda: bool(fake.files) and "wrote it" in fake.texts("1001"))
    to = platform.owner if platform.name == "dingtalk" else "1001"  # DingTalk sends a 1:1 file to the person
    assert fake.files == [(to, "plan.pdf", b"%PDF-1.4 plan")]
    assert not any("plan.pdf" in text for text in fake.texts("1001"))  # sent, not just named


def test_wecom_and_imessage_connect_as_the_docs_say(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/channels.md's connect steps on a fresh HOME against the fakes: WeCom's own refusal for a wrong secret
    (the secret never printed), then connected; iMessage unavailable off macOS until a BlueBubbles URL is given,
    a wrong password refused by the server, then connected."""
    from tests.fake_wecom import fake_wecom

    runner = CliRunner()
    with run_model_stub(brain) as stub, fake_wecom() as wecom, fake_bluebubbles() as bubbles:
        write_agent_config(isolated_home, stub, memory=False)
        listed = json.loads(runner.invoke(cli, ["channels", "list", "--json"]).output)["channels"]
        imessage = next(c for c in listed if c["name"] == "imessage")
        if sys.platform != "darwin":
            assert not imessage["available"] and "BlueBubbles" in imessage["unavailableBecause"]
        assert "no lawful bot API" in next(c for c in listed if c["name"] == "wecom")["note"]

        monkeypatch.setenv("WECOM_SECRET", "wrong-secret-value")
        monkeypatch.setenv("WECOM_TOKEN", wecom.token)
        monkeypatch.setenv("WECOM_AES_KEY", wecom.aes_key)
        options = [
            *("--set", f"corpId={wecom.corp_id}", "--set", f"agentId={wecom.agent_id}"),
            *("--set", "secret=${WECOM_SECRET}", "--set", "token=${WECOM_TOKEN}"),
            *("--set", "encodingAESKey=${WECOM_AES_KEY}", "--api-base", wecom.url),
        ]
        refused = runner.invoke(cli, ["channels", "connect", "wecom", *options])
        assert refused.exit_code == 1 and "40001" in refused.output and "wrong-secret-value" not in refused.output
        monkeypatch.setenv("WECOM_SECRET", wecom.secret)
        done = runner.invoke(cli, ["channels", "connect", "wecom", *options])
        assert done.exit_code == 0 and f"corp {wecom.corp_id}" in done.output, done.output

        monkeypatch.setenv("BLUEBUBBLES_PASSWORD", "not-the-password")
        options = ["--set", "password=${BLUEBUBBLES_PASSWORD}", "--api-base", bubbles.url]
        refused = runner.invoke(cli, ["channels", "connect", "imessage", *options])
        assert refused.exit_code == 1 and "401" in refused.output and "not-the-password" not in refused.output
        monkeypatch.setenv("BLUEBUBBLES_PASSWORD", bubbles.password)
        done = runner.invoke(cli, ["channels", "connect", "imessage", *options])
        assert done.exit_code == 0 and "BlueBubbles 1.9.9 on macOS 15.1" in done.output, done.output
    written = (isolated_home / ".memmy" / "config.yaml").read_text()
    assert "${WECOM_SECRET}" in written and wecom.secret not in written and "${BLUEBUBBLES_PASSWORD}" in written
    listed = json.loads(runner.invoke(cli, ["channels", "list", "--json"]).output)["channels"]
    assert all(c["enabled"] and c["available"] for c in listed if c["name"] in ("wecom", "imessage"))
