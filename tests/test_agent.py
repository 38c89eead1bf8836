"""The ``memmy`` agent end to end: the production ``openai`` / ``anthropic`` SDK clients against local stub
servers, real tools, a real stdio MCP server, and memory through a real token-protected daemon."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from memmy.agent.config import load_agent_config
from memmy.agent.loop import TurnEvent, TurnResult
from memmy.agent.runtime import open_runtime
from memmy.agent.sessions import SessionStore
from tests.agent_stubs import Reply, last_user_text, run_model_stub, tool_results, write_agent_config
from tests.conftest import Daemon, refused_endpoint

MEMMY = str(Path(sys.executable).parent / "memmy")
MEMMY_MEMORY = str(Path(sys.executable).parent / "memmy-memory")
ECHO_SERVER = str(Path(__file__).parent / "mcp_echo_server.py")


def tool_brain(body: dict[str, Any]) -> Reply:
    """Calls the tool the user names, then reports what it returned."""
    results = tool_results(body)
    if results:
        return Reply(text="tool said: " + results[-1])
    text = last_user_text(body)
    if "<current_user_request>" in text:  # react to the request, not to recalled memory ("Past exchange" holds "hang")
        text = text.split("<current_user_request>")[1]
    if "read notes" in text:
        return Reply(tool_calls=[("read_file", json.dumps({"path": "notes.txt"}))])
    if "shell echo" in text:
        return Reply(tool_calls=[("exec", json.dumps({"command": "echo hello-from-shell"}))])
    if "shout" in text:
        return Reply(tool_calls=[("mcp_echo_shout", json.dumps({"text": "quiet words"}))])
    if "malformed" in text:
        return Reply(tool_calls=[("read_file", '{"path": "notes.txt"')])
    if "hang" in text:
        found = re.search(r"hang (\w+)", text)  # "hang <marker>": this test's own command line, to look for later
        marker = found.group(1) if found else "forever"
        return Reply(tool_calls=[("exec", json.dumps({"command": f"sleep 30; echo never {marker}"}))])
    if "secret" in text:
        return Reply(tool_calls=[("exec", json.dumps({"command": "echo OPENAI_KEY=sk-proj-" + "A1b2C3d4" * 5}))])
    if "marker" in text:
        return Reply(tool_calls=[("exec", json.dumps({"command": "touch marker-file"}))])
    return Reply(text="echo: " + text[-300:])


def one_turn(
    text: str, session: str = "cli:direct", project: str | None = None, **kw: Any
) -> tuple[TurnResult, list[TurnEvent]]:
    events: list[TurnEvent] = []

    async def main() -> TurnResult:
        runtime = await open_runtime(load_agent_config(), session, project, emit=events.append, **kw)
        try:
            assert runtime.hub.problems == []
            return await runtime.agent.run_turn(text)
        finally:
            await runtime.close()

    return asyncio.run(main()), events


def memmy(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    if stdin is None:
        return subprocess.run([MEMMY, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    return subprocess.run([MEMMY, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_single_turn_through_the_cli(isolated_home: Path, kind: str) -> None:
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, kind, memory=False)
        done = memmy("agent", "--message", "what is in this workspace?", "--json")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["answer"] == "echo: what is in this workspace?" and answer["status"] == "succeeded"
        assert answer["usage"] == {"prompt_tokens": 11, "completion_tokens": 7}
        request = stub.requests[-1]
        assert request["path"] == ("/v1/messages" if kind == "anthropic" else "/v1/chat/completions")
        assert request["body"]["model"] == "stub-model" and request["body"]["stream"] is True
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert "sk-test-key" in headers.get("x-api-key", "") + headers.get("authorization", "")
        piped = memmy("agent", stdin="from stdin please\n")  # stdin, plain text output
        assert piped.returncode == 0 and piped.stdout.strip() == "echo: from stdin please"


def test_streaming_delivers_text_in_pieces(isolated_home: Path) -> None:
    with run_model_stub(lambda body: Reply(text="one two three four")) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        result, events = one_turn("stream it")
    pieces = [e.text for e in events if e.kind == "text"]
    assert pieces == ["one ", "two ", "three ", "four"] and result.answer == "one two three four"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_tool_round_trip_file_read_and_shell_echo(isolated_home: Path, tmp_path: Path, kind: str) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "notes.txt").write_text("the parser lives in src/parse.py\n")
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, kind, memory=False)
        read, events = one_turn("please read notes", "cli:p", str(project))
        shell, _ = one_turn("run shell echo", "cli:p", str(project))
    assert read.answer == "tool said: the parser lives in src/parse.py\n"
    assert [e.kind for e in events if e.kind.startswith("tool")] == ["tool_call", "tool_result"]
    assert shell.answer == "tool said: exit code 0\nhello-from-shell\n"
    assert shell.tool_calls[0]["name"] == "exec" and shell.tool_calls[0]["success"] is True
    # the second request of the shell turn carried the tool result back in the provider's own shape
    last = stub.requests[-1]["body"]["messages"]
    if kind == "anthropic":
        assert last[-1]["content"][0]["type"] == "tool_result"
    else:
        assert last[-1]["role"] == "tool" and "hello-from-shell" in last[-1]["content"]


def test_mcp_server_over_stdio(isolated_home: Path) -> None:
    extra = (
        "  mcpServers:\n"
        f"    echo: {{type: stdio, command: '{sys.executable}', args: ['{ECHO_SERVER}'], toolTimeout: 20,"
        " enabledTools: [shout]}\n"
    )
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, extra=extra, memory=False)
        result, _ = one_turn("shout it")
        offered = {t["function"]["name"] for t in stub.requests[0]["body"]["tools"]}
    assert result.answer == "tool said: QUIET WORDS!"
    assert "mcp_echo_shout" in offered and "mcp_echo_hidden" not in offered


def test_memory_injected_in_a_later_session_and_captured_turns_searchable(isolated_home: Path, daemon: Daemon) -> None:
    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, extra=extra)
        first, _ = one_turn("The zeppelin deploy script uses blue-green releases behind port 8443", "cli:one")
        assert first.recall is not None, "memory should be up (token sent from config)"
        daemon.drain()
        second, events = one_turn("how does the zeppelin deploy work?", "cli:two")
        sent = stub.requests[-1]["body"]["messages"][-1]["content"]
    assert "<memmy_memory_context" in sent and "blue-green" in sent and "<current_user_request>" in sent
    assert second.recall is not None and second.recall.memory_ids
    assert any(e.kind == "memory" and "blue-green" in e.text for e in events)
    stored = [m["content"] for m in SessionStore(isolated_home / ".memmy").load("cli:two").messages]
    assert stored[0] == "how does the zeppelin deploy work?"  # the session keeps the plain request
    env = {**os.environ, "MEMMY_MEMORY_URL": daemon.url, "MEMMY_MEMORY_TOKEN": str(daemon.token)}
    found = subprocess.run(
        [MEMMY_MEMORY, "search", "zeppelin blue-green", "--scope", "pooled"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert found.returncode == 0 and "blue-green" in found.stdout and "8443" in found.stdout


def test_memory_tools_add_search_and_get(isolated_home: Path, daemon: Daemon) -> None:
    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"

    def brain(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        text = last_user_text(body)
        if "<current_user_request>" in text:  # look at the request, not at what memory recalled around it
            text = text.split("<current_user_request>")[1]
        if results:
            return Reply(text="memory said: " + results[-1])
        if "store this fact" in text:
            return Reply(tool_calls=[("memmy_memory_add", json.dumps({"content": "The kiwi cluster runs on arm64"}))])
        if "find the kiwi" in text:
            return Reply(tool_calls=[("memmy_memory_search", json.dumps({"query": "kiwi cluster architecture"}))])
        memory_id = re.search(r"get (\w+)", text)
        return Reply(tool_calls=[("memmy_memory_get", json.dumps({"id": memory_id.group(1) if memory_id else ""}))])

    with run_model_stub(brain) as stub:
        write_agent_config(isolated_home, stub, extra=extra)
        added, _ = one_turn("store this fact", "cli:tools")
        memory_id = added.answer.removeprefix("memory said: stored memory ")
        daemon.drain()
        found, _ = one_turn("find the kiwi fact", "cli:tools-2")
        got, _ = one_turn(f"get {memory_id}", "cli:tools-3")
    assert memory_id and "arm64" in found.answer and "arm64" in got.answer


def test_secrets_in_tool_output_are_redacted_before_capture(isolated_home: Path, daemon: Daemon) -> None:
    extra = f"memmyMemory:\n  storage: {{endpoint: '{daemon.url}', token: '{daemon.token}'}}\n"
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, extra=extra)
        result, _ = one_turn("print the secret key file", "cli:secret")
    assert "sk-proj-A1b2" in result.tool_calls[0]["output"]  # the model saw it, memory must not
    with daemon.client() as client:
        tasks = client.get("/api/v1/panel/tasks", params={"q": "secret key file"}).json()["tasks"]
    dumped = json.dumps(tasks)
    assert tasks and "sk-proj-A1b2" not in dumped and "REDACTED" in dumped


def test_memory_down_fails_open_and_says_so_once(isolated_home: Path) -> None:
    extra = f"memmyMemory:\n  storage: {{endpoint: '{refused_endpoint()}'}}\n"
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, extra=extra)
        done = memmy("agent", "--message", "still works without memory")
    assert done.returncode == 0 and done.stdout.strip() == "echo: still works without memory"
    assert done.stderr.count("memory unavailable") == 1


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(status=429), "rate limiting"),
        (Reply(status=500), "HTTP 500"),
        (Reply(text="late", delay_s=3), "did not answer within 1 s"),
    ],
)
def test_provider_failures_give_a_clear_message_and_keep_the_session(
    isolated_home: Path, reply: Reply, expected: str
) -> None:
    with run_model_stub(lambda body: reply) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        config = isolated_home / ".memmy" / "config.yaml"
        config.write_text(config.read_text().replace("timeoutS: 20", "timeoutS: 1"))
        done = memmy("agent", "--message", "keep me")
    assert done.returncode == 1 and expected in done.stderr, done.stderr
    assert SessionStore(isolated_home / ".memmy").load().messages[0]["content"] == "keep me"


def test_provider_down(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, memory=False)
    done = memmy("agent", "--message", "anyone there?")  # the stub is gone: connection refused
    assert done.returncode == 1 and "cannot reach openai" in done.stderr
    assert memmy("agent", stdin="").returncode == 2  # no message at all


def test_malformed_tool_call_is_answered_and_the_turn_goes_on(isolated_home: Path, tmp_path: Path) -> None:
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        result, _ = one_turn("malformed call please", "cli:m", str(tmp_path))
    assert result.status == "succeeded" and "not valid JSON" in result.answer


def test_hung_tool_is_killed_at_its_timeout(isolated_home: Path, tmp_path: Path) -> None:
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)  # tools.exec.timeout: 5
        marker = uuid.uuid4().hex  # another run of the suite on the machine hangs its own command
        result, _ = one_turn(f"hang {marker}", "cli:h", str(tmp_path))
    assert result.status == "succeeded" and "killed after 5 s" in result.answer
    ps = subprocess.run(["pgrep", "-f", f"sleep 30; echo never {marker}"], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


@pytest.mark.parametrize("policy", ["ask", "deny"])
def test_shell_never_runs_without_approval(isolated_home: Path, tmp_path: Path, policy: str) -> None:
    with run_model_stub(tool_brain) as stub:
        write_agent_config(isolated_home, stub, approval=policy, memory=False)
        result, _ = one_turn("make the marker", "cli:a", str(tmp_path))  # nobody can approve here
    assert not (tmp_path / "marker-file").exists()
    assert ("needs approval" if policy == "ask" else "tools.exec.approval: deny") in result.answer


def test_ctrl_c_stops_the_turn_and_keeps_the_session(isolated_home: Path) -> None:
    with run_model_stub(lambda body: Reply(text="slow", delay_s=10)) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        proc = subprocess.Popen(
            [MEMMY, "agent", "--message", "interrupt me"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 90  # a cold start on a loaded machine takes a while
        while not stub.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub.requests, "the agent never called the provider"  # else the signal would not hit the turn
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "session is kept" in err
    assert SessionStore(isolated_home / ".memmy").load().messages[0]["content"] == "interrupt me"


def test_compaction_summarises_when_the_window_fills(isolated_home: Path) -> None:
    def brain(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"].startswith("Summarise the conversation"):
            return Reply(text="SUMMARY: user talked about turns 1-3")
        return Reply(text="ok " + "x" * 400)

    with run_model_stub(brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        config = isolated_home / ".memmy" / "config.yaml"
        config.write_text(config.read_text().replace("maxRetries: 0", "maxRetries: 0, contextWindow: 800"))
        for n in range(6):
            one_turn(f"turn {n} " + "y" * 300)
    session = SessionStore(isolated_home / ".memmy").load()
    assert session.compactions and session.compactions[-1]["summary"] == "SUMMARY: user talked about turns 1-3"
    assert session.messages[0]["content"].startswith("[Summary of the earlier conversation]")


def test_onboard_defaults_status_and_sessions_list(isolated_home: Path) -> None:
    assert memmy("onboard", "--defaults").returncode == 0
    config = load_agent_config()
    assert config.default is not None and config.default.model == "gpt-4o" and config.serve_token
    assert config.workspace.is_dir()
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, memory=False)
        status = memmy("status", "--json")
        assert status.returncode == 0, status.stdout
        report = json.loads(status.stdout)
        assert report["provider"].startswith("reachable") and "not reachable" in report["memory"]
        memmy("agent", "--message", "hello", "--session", "cli:work")
    listed = memmy("sessions", "list")
    assert "cli:work" in listed.stdout and "1 turns" in listed.stdout
    assert memmy("--session", "a", "--standalone").returncode == 2  # mutually exclusive


def test_onboard_menu_tests_the_connection_before_saving(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        answers = f"1\nstub-model\n{stub.openai_url}\nsk-typed-key\nallow\n" + "\n" * 4  # steps 2, 3: defaults
        done = memmy("onboard", stdin=answers)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "ok: 1 models listed" in done.stdout
    config = load_agent_config()
    assert config.default is not None and config.default.api_base == stub.openai_url
    assert config.default.api_key == "sk-typed-key" and config.tools.exec_approval == "allow"
    refused = memmy("onboard", stdin=f"1\nstub-model\n{stub.openai_url}\nsk\nask\nn\n")  # stub gone: not saved
    assert refused.returncode == 1 and "failed: cannot reach openai" in refused.stdout


@pytest.mark.parametrize(
    ("transport", "kind", "path"), [("sse", "sse", "/sse"), ("streamable-http", "streamableHttp", "/mcp")]
)
def test_mcp_server_over_http(isolated_home: Path, transport: str, kind: str, path: str) -> None:
    from tests.conftest import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, ECHO_SERVER, transport, str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket_ok = __import__("socket").create_connection(("127.0.0.1", port), timeout=0.5)
                socket_ok.close()
                break
            except OSError:
                time.sleep(0.1)
        extra = f"  mcpServers:\n    echo: {{type: {kind}, url: 'http://127.0.0.1:{port}{path}', toolTimeout: 20}}\n"
        with run_model_stub(tool_brain) as stub:
            write_agent_config(isolated_home, stub, extra=extra, memory=False)
            result, _ = one_turn("shout it")
    finally:
        server.terminate()
        server.wait(10)
    assert result.answer == "tool said: QUIET WORDS!"
