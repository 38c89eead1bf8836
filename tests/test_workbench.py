"""The workbench's API through a real ``memmy serve`` process and a model stub: sign-in and its guards, tasks
shared with ``memmy agent``, the list's metadata, streaming events, stop / restart / queued messages, slash
commands, the pet's thread, and attachments turned into text the provider receives."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from memmy.agent.attachments import AttachmentError, convert, message_text
from memmy.agent.cli import cli
from memmy.agent.providers import to_anthropic
from memmy.agent.sessions import Session, SessionStore
from memmy.workbench.routes import group
from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, tool_results, write_agent_config
from tests.conftest import Daemon, free_port
from tests.workbench_client import TOKEN, Bench, serve_process, sign_in_link


def brain(body: dict[str, Any]) -> Reply:
    text = last_user_text(body)
    if "slowly" in text:
        return Reply(text="one two three four five six seven eight nine ten", chunk_delay_s=0.3)
    if "wait" in text:
        return Reply(text="waited", delay_s=1.0)
    return Reply(text="echo: " + text[-300:])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ModelStub, Path]]:
    """One ``memmy serve`` process for the module (starting one takes seconds): base URL, model stub, HOME."""
    home = tmp_path_factory.mktemp("workbench-home")
    with run_model_stub(brain) as stub, serve_process(home, stub) as base:
        yield base, stub, home


def test_sign_in_cookie_csrf_and_foreign_origins(served: tuple[str, ModelStub, Path]) -> None:
    base, _, _ = served
    assert httpx.get(base + "/api/state").status_code == 401
    assert httpx.get(base + "/").status_code == 401  # the sign-in hint, not the page
    assert httpx.post(base + "/workbench/link").status_code == 401  # the link needs the serve token
    link = sign_in_link(base)
    client = httpx.Client(base_url=base)
    answer = client.get(link.removeprefix(base))
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/;" in cookie
    assert httpx.get(link).status_code == 401  # used once
    assert client.get("/api/state").status_code == 200
    assert client.post("/api/sessions").status_code == 403  # no CSRF token
    bench = Bench(base)
    assert bench.post("/api/sessions").status_code == 200
    evil = {"x-csrf-token": bench.csrf, "origin": "http://evil.example"}
    assert bench.http.post("/api/sessions", headers=evil).status_code == 403
    assert bench.http.get("/api/state", headers={"host": "evil.example:80"}).status_code == 421
    assert httpx.get(base + "/v1/models", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_a_session_started_by_memmy_agent_continues_in_the_workbench_and_back(
    served: tuple[str, ModelStub, Path], isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, stub, home = served
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MEMMY_HOME", str(home / ".memmy"))
    first = CliRunner().invoke(cli, ["agent", "--session", "cli:shared", "-m", "remember the blue door"])
    assert first.exit_code == 0, first.output
    bench = Bench(base)
    row = next(t for t in bench.state()["sessions"] if t["name"] == "cli:shared")
    assert row["title"] == "remember the blue door" and row["group"] == "today"
    bench.send("what colour was the door?", row["id"])
    events = bench.wait_idle(row["id"])
    assert "".join(e["text"] for e in events if e["kind"] == "text") == "echo: what colour was the door?"
    sent = [m["content"] for m in stub.requests[-1]["body"]["messages"] if m["role"] != "system"]
    assert sent[:2] == ["remember the blue door", "echo: remember the blue door"]
    again = CliRunner().invoke(cli, ["agent", "--session", "cli:shared", "-m", "and now?"])
    assert again.exit_code == 0, again.output
    contents = [m["content"] for m in stub.requests[-1]["body"]["messages"]]
    assert "what colour was the door?" in contents and "echo: what colour was the door?" in contents


def test_list_metadata_groups_and_old_session_files(served: tuple[str, ModelStub, Path]) -> None:
    base, _, home = served
    store = SessionStore(home / ".memmy")
    store.dir.mkdir(parents=True, exist_ok=True)
    old = {"name": "cli:old", "messages": [{"role": "user", "content": "hi"}], "created": 1.0, "updated": 1.0}
    store.path("cli:old").write_text(json.dumps(old))  # written before the metadata fields existed
    bench = Bench(base)
    sid = next(t["id"] for t in bench.state()["sessions"] if t["name"] == "cli:old")
    assert bench.task(sid)["task"]["group"] == "older"
    assert bench.post(f"/api/sessions/{sid}/rename", {"title": "  Old   work "}).json()["title"] == "Old work"
    assert bench.post(f"/api/sessions/{sid}/pin").json()["ok"]
    assert bench.task(sid)["task"] == {**bench.task(sid)["task"], "group": "pinned", "title": "Old work"}
    bench.post(f"/api/sessions/{sid}/archive")
    assert bench.task(sid)["task"]["group"] == "archived"
    bench.post(f"/api/sessions/{sid}/restore")
    bench.post(f"/api/sessions/{sid}/unpin")
    assert bench.task(sid)["task"]["group"] == "older"
    assert store.load("cli:old").updated == 1.0  # metadata edits do not move a task in time
    found = bench.http.get("/api/search", params={"q": "old WORK"}).json()["sessions"]
    assert [t["id"] for t in found] == [sid]
    bench.post(f"/api/sessions/{sid}/delete")
    assert not store.exists("cli:old") and bench.http.get(f"/api/sessions/{sid}").status_code == 404


def test_settings_and_a_diagnostic_report_without_secrets(served: tuple[str, ModelStub, Path]) -> None:
    base, _, home = served
    bench = Bench(base)
    settings = bench.http.get("/api/settings").json()
    assert [(m["name"], m["model"], m["key"]) for m in settings["models"]] == [
        ("default", "stub-model", True),
        ("fast", "stub-fast", True),
    ]
    assert bench.post("/api/settings/test", {"name": "default"}).json()["ok"] is True
    assert bench.post("/api/settings/test", {"name": "nope"}).status_code == 404
    assert bench.post("/api/settings/log-level", {"level": "debug"}).json() == {"logLevel": "DEBUG"}
    assert bench.post("/api/settings/log-level", {"level": "loud"}).status_code == 400
    bench.send("my secret plan is ZEPHYR-7")
    report = bench.http.get("/api/diagnostics")
    assert report.json()["logLevel"] == "DEBUG" and report.json()["sessions"] >= 1
    for secret in ("sk-test-key", TOKEN, "ZEPHYR", bench.csrf):
        assert secret not in report.text
    assert "attachment" in report.headers["content-disposition"]


def test_the_task_list_rereads_only_changed_session_files(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    chat = [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "an answer"}] * 3
    store.save(Session(name="a", messages=chat))
    store.save(Session(name="b", messages=chat[:2]))
    heads = {s.name: (s, turns) for s, turns in store.heads()}
    assert heads["a"][1] == 3 and heads["a"][0].messages == chat[:1] and heads["a"][0].label == "first question"
    cached = heads["b"][0]
    store.save(Session(name="a", messages=chat[:2], title="renamed", created=heads["a"][0].created))
    again = {s.name: (s, turns) for s, turns in store.heads()}
    assert again["a"][0].title == "renamed" and again["a"][1] == 1  # changed file read again
    assert again["b"][0] is cached  # unchanged file not parsed again
    assert [s.name for s, _ in store.heads()] == ["a", "b"]  # most recently used first
    store.delete(again["b"][0])
    assert [s.name for s, _ in store.heads()] == ["a"]


def test_groups_by_local_day() -> None:
    now = time.mktime((2026, 12, 4, 15, 0, 0, 0, 0, -1))
    day = 86400.0
    ages = {"today": 3600, "yesterday": day, "week": 3 * day, "older": 8 * day}
    for expected, age in ages.items():
        assert group(Session(name="x", updated=now - age), False, now) == expected
    assert group(Session(name="x", updated=now - 9 * day, pinned=True), False, now) == "pinned"
    assert group(Session(name="x", updated=now, pinned=True, archived=True), False, now) == "archived"


def test_stop_restart_unread_and_queued_messages(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, _ = served
    bench = Bench(base)
    seq = bench.state()["seq"]
    sid = bench.send("count slowly please")["id"]
    with bench.http.stream("GET", f"/api/events?after={seq}") as stream:
        for line in stream.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["kind"] == "text":
                break  # the answer is streaming
    running = bench.task(sid)
    assert running["task"]["running"] and [e["kind"] for e in running["live"]][0] == "start"
    assert bench.send("then this", sid)["status"] == "queued"
    assert bench.post(f"/api/sessions/{sid}/stop").json() == {"ok": True}
    after = bench.task(sid)
    assert not after["task"]["running"] and after["waiting"] == 0  # stopping drops the queue
    assert after["messages"][0]["content"] == "count slowly please"
    seq = bench.state()["seq"]
    assert bench.post(f"/api/sessions/{sid}/restart").json() == {"ok": True}
    assert bench.post(f"/api/sessions/{sid}/stop").json() == {"ok": True}
    users = [m for m in bench.task(sid)["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["count slowly please"]  # restarted in place, not appended
    sid2 = bench.send("wait for it")["id"]
    assert bench.send("second", sid2)["status"] == "queued"
    events = bench.wait_idle(sid2, seq)
    while sum(e["kind"] == "idle" for e in events) < 2:
        events += bench.wait_idle(sid2, events[-1]["seq"])
    assert [e["text"] for e in events if e["kind"] == "start"] == ["wait for it", "second"]
    row = next(t for t in bench.state()["sessions"] if t["id"] == sid2)
    assert row["unread"] and not row["running"]
    bench.task(sid2)  # opening it reads it
    assert not next(t for t in bench.state()["sessions"] if t["id"] == sid2)["unread"]


def test_slash_commands(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, _ = served
    bench = Bench(base)
    sid = bench.post("/api/sessions").json()["id"]
    asked = len(stub.requests)
    assert "/dream-restore" in bench.send("/help", sid)["text"]
    assert "stub-model" in bench.send("/status", sid)["text"]
    assert bench.send("/goal ship the workbench", sid)["text"] == "goal set: ship the workbench"
    assert bench.task(sid)["goal"]["text"] == "ship the workbench"
    assert "stub-fast" in bench.send("/model fast", sid)["text"]
    assert "memory is off" in bench.send("/dream", sid)["text"]
    assert bench.send("/stop", sid)["text"] == "nothing is running"
    fresh = bench.send("/new", sid)
    assert fresh["id"] != sid and bench.task(fresh["id"])["messages"] == []
    assert bench.send("/nope", sid)["text"].startswith("unknown command /nope")
    before = {t["id"] for t in bench.state()["sessions"]}
    assert bench.send("/help")["id"] == ""  # a command outside any task saves no empty task
    assert {t["id"] for t in bench.state()["sessions"]} == before
    assert len(stub.requests) == asked  # no command reached the model


def test_the_pet_continues_the_running_or_recent_session(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, _ = served
    bench = Bench(base)
    seq = bench.state()["seq"]
    sid = bench.send("hello from the workbench")["id"]
    bench.wait_idle(sid, seq)
    assert bench.state()["pet"] == sid  # finished within five minutes
    seq = bench.state()["seq"]
    assert bench.send("and from the pet", pet=True)["id"] == sid
    bench.wait_idle(sid, seq)
    users = [m["content"] for m in bench.task(sid)["messages"] if m["role"] == "user"]
    assert users == ["hello from the workbench", "and from the pet"]
    assert bench.http.get("/pet").status_code == 200 and 'data-page="pet"' in bench.http.get("/pet").text


def _docx(text: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_attachments_reach_the_provider_as_text_and_images(served: tuple[str, ModelStub, Path]) -> None:
    base, stub, _ = served
    bench = Bench(base)
    seq = bench.state()["seq"]
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
    files = [("plan.docx", _docx("The launch code word is PELICAN.")), ("a.png", png), ("t.csv", b"a,b\n1,2\n")]
    sid = bench.send("summarise", files=files)["id"]
    bench.wait_idle(sid, seq)
    user = [m for m in stub.requests[-1]["body"]["messages"] if m["role"] == "user"][-1]
    text = user["content"][0]["text"]
    assert "PELICAN" in text and "a,b\n1,2" in text and "[image attached: a.png]" in text
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    saved = bench.task(sid)["messages"][0]["content"]
    assert "PELICAN" in saved and "base64" not in saved  # the session keeps text, not the image
    too_many = [("f.txt", b"x")] * 5
    answer = bench.http.post(
        "/api/send",
        data={"text": "x"},
        files=[("files", f) for f in too_many],
        headers={"x-csrf-token": bench.csrf},
    )
    assert answer.status_code == 400 and "at most 4" in answer.text


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF with ``text`` in Helvetica, written by hand (no PDF writer needed)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_office_files_and_refusals() -> None:
    from openpyxl import Workbook
    from pptx import Presentation

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["city", "rain"])
    sheet.append(["Oslo", 12])
    out = io.BytesIO()
    book.save(out)
    assert "Oslo,12" in str(convert("r.xlsx", out.getvalue()).text)
    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    title = slide.shapes.title
    assert title is not None
    title.text = "Quarterly plan"
    out = io.BytesIO()
    deck.save(out)
    assert "Quarterly plan" in str(convert("deck.pptx", out.getvalue()).text)
    assert json.loads(str(convert("x.json", b'{"a": [1, 2]}').text)) == {"a": [1, 2]}
    assert convert("minutes.pdf", minimal_pdf("Budget approved for Q3")).text == "Budget approved for Q3"
    with pytest.raises(AttachmentError, match="larger than 10 MB"):
        convert("big.txt", b"x" * (10 * 1024 * 1024 + 1))
    with pytest.raises(AttachmentError, match="not supported"):
        convert("x.exe", b"MZ")
    with pytest.raises(AttachmentError, match="could not be read"):
        convert("broken.docx", b"not a zip")
    assert (
        message_text("hi", [convert("../../etc/n.md", b"# N")]) == 'hi\n\n<attachment name="n.md">\n# N\n</attachment>'
    )


def test_the_memory_a_turn_was_given_is_shown_with_links_to_the_panel(isolated_home: Path, daemon: Daemon) -> None:
    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"
    with run_model_stub(brain) as stub, serve_process(isolated_home, stub, extra, memory=True) as base:
        bench = Bench(base)
        seq = bench.state()["seq"]
        sid = bench.send("The heron deploy script lives in tools/heron/ship.sh and needs VPN")["id"]
        bench.wait_idle(sid, seq)
        with daemon.client() as http:  # the capture runs after the answer: wait until it is stored
            deadline = time.monotonic() + 30
            while not http.get("/api/v1/panel/tasks", params={"q": "heron deploy script"}).json()["tasks"]:
                assert time.monotonic() < deadline, "the first turn was never captured"
                time.sleep(0.05)
        daemon.drain()
        seq = bench.state()["seq"]
        other = bench.send("where does the heron deploy script live?")["id"]
        memory = next(e for e in bench.wait_idle(other, seq) if e["kind"] == "memory")
        assert "tools/heron/ship.sh" in memory["text"] and memory["data"]["ids"]
        page = bench.http.get("/").text
        assert f'"panel": "{daemon.url}/panel"' in page  # each memory id links to /panel/memories/<id>
        sent = [m for m in stub.requests[-1]["body"]["messages"] if m["role"] == "user"][-1]["content"]
        assert "tools/heron/ship.sh" in sent


def test_memmy_workbench_prints_a_link_and_starts_serve_when_needed(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_model_stub(brain) as stub:
        port = free_port()
        write_agent_config(isolated_home, stub, extra=f"serve: {{port: {port}}}\n", memory=False)
        refused = CliRunner().invoke(cli, ["workbench", "--no-open", "--no-start"])
        assert refused.exit_code == 1 and f"not running at http://127.0.0.1:{port}" in refused.output
        monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1] / "src"))
        started = CliRunner().invoke(cli, ["workbench", "--no-open", "--pet"])
        pid = int(started.output.split("(pid ")[1].split(",")[0])
        try:
            assert started.exit_code == 0, started.output
            link = started.output.strip().splitlines()[-1]
            assert link.startswith(f"http://127.0.0.1:{port}/signin?code=") and link.endswith("&next=/pet")
            assert "token:" in (isolated_home / ".memmy" / "config.yaml").read_text()  # serve.token was created
            client = httpx.Client(follow_redirects=True)
            answer = client.get(link)
            assert answer.status_code == 200 and 'data-page="pet"' in answer.text
            again = CliRunner().invoke(cli, ["workbench", "--no-open"])
            assert again.exit_code == 0 and "started" not in again.output  # the running one is reused
        finally:
            os.kill(pid, signal.SIGTERM)


def shell_brain(body: dict[str, Any]) -> Reply:
    if tool_results(body):
        return Reply(text="result: " + tool_results(body)[-1].replace("\n", " "))
    if "slowly" in last_user_text(body):
        return Reply(text="a b c d e f g h i j k l m n o p", chunk_delay_s=0.3)
    return Reply(tool_calls=[("exec", json.dumps({"command": "echo approved-run"}))])


def test_shell_approval_and_deleting_a_running_task(isolated_home: Path) -> None:
    with run_model_stub(shell_brain) as stub, serve_process(isolated_home, stub, approval="ask") as base:
        bench = Bench(base)
        for allow, expected in ((True, "approved-run"), (False, "did not approve")):
            seq = bench.state()["seq"]
            sid = bench.send("run the command")["id"]
            with bench.http.stream("GET", f"/api/events?after={seq}") as stream:
                ask = next(
                    json.loads(line[6:])
                    for line in stream.iter_lines()
                    if line.startswith("data: ") and json.loads(line[6:])["kind"] == "approval"
                )
            assert ask["text"] == "echo approved-run" and bench.task(sid)["task"]["running"]
            assert bench.post(f"/api/sessions/{sid}/approve", {"id": ask["data"]["id"], "allow": allow}).json()["ok"]
            events = bench.wait_idle(sid, seq)
            result = next(e for e in events if e["kind"] == "tool_result")
            assert expected in result["text"] and result["data"]["ok"] is allow
        assert not bench.post(f"/api/sessions/{sid}/approve", {"id": ask["data"]["id"], "allow": True}).json()["ok"]
        seq = bench.state()["seq"]
        sid = bench.send("answer slowly")["id"]
        with bench.http.stream("GET", f"/api/events?after={seq}") as stream:
            next(line for line in stream.iter_lines() if line.startswith("data: ") and '"kind": "text"' in line)
        assert bench.post(f"/api/sessions/{sid}/delete").json() == {"ok": True}
        assert bench.http.get(f"/api/sessions/{sid}").status_code == 404
        assert sid not in {t["id"] for t in bench.state()["sessions"]}  # the stopped turn did not save it again


def test_images_reach_anthropic_models_as_image_blocks() -> None:
    system, messages = to_anthropic(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
            },
        ]
    )
    assert system == "be brief"
    assert messages[0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]


def mcp_brain(body: dict[str, Any]) -> Reply:
    if tool_results(body):
        return Reply(text="tool said: " + tool_results(body)[-1])
    return Reply(tool_calls=[("mcp_echo_shout", json.dumps({"text": "quiet words"}))])


def test_mcp_servers_give_their_tools_to_workbench_turns(isolated_home: Path) -> None:
    echo = Path(__file__).parent / "mcp_echo_server.py"
    extra = (
        f"  mcpServers:\n    echo: {{type: stdio, command: '{sys.executable}', args: ['{echo}'], toolTimeout: 20}}\n"
    )
    with run_model_stub(mcp_brain) as stub, serve_process(isolated_home, stub, extra) as base:
        bench = Bench(base)
        for _ in range(2):  # the second turn reuses the connection the first one made
            seq = bench.state()["seq"]
            sid = bench.send("shout it")["id"]
            events = bench.wait_idle(sid, seq)
            assert [e["text"] for e in events if e["kind"] == "tool_call"] == ["mcp_echo_shout"]
            assert "".join(e["text"] for e in events if e["kind"] == "text") == "tool said: QUIET WORDS!"
        assert "mcp_echo_shout" in {t["function"]["name"] for t in stub.requests[-1]["body"]["tools"]}
