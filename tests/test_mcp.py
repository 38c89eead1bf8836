"""The MCP server, end to end with the SDK's own client: stdio against a real daemon, streamable HTTP mounted next
to the real API routes, daemon auto-start, the trust-gated transcript tools, the prompt, and the keymem tools."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from starlette.applications import Starlette

from memmy.cli.client import ClientSettings
from memmy.cli.commands_mcp import DaemonStartError, ensure_daemon
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.mcp.http import McpHttpEndpoint
from memmy.mcp.keymem import KEYMEM_TOOLS
from memmy.mcp.server import available_tools
from memmy.mcp.tools import MEMMY_TOOLS
from memmy.mcp.transcripts import TRANSCRIPT_TOOLS, TranscriptError, check_session_id, transcripts_enabled
from memmy.server.app import create_app
from memmy.service import MemoryService
from tests.claude_transcripts import Transcript
from tests.conftest import SUITE_BACKEND, Daemon, free_port

T = TypeVar("T")
MEMMY = ["memmy_memory_search", "memmy_memory_get", "memmy_memory_add", "memmy_memory_resume"]
KEYMEM = [
    "recall",
    "browse_keys",
    "read_key",
    "read_memory",
    "confirm_memory",
    "remember",
    "remember_batch",
    "correct",
    "dismiss",
    "related",
    "forget",
    "list_memories",
    "cleanup_expired",
    "memory_stats",
]
TRANSCRIPTS = ["list_sessions", "get_conversation"]
HOST_ENV = ("CLAUDE_CODE_SESSION_ID", "CODEX_THREAD_ID", "CLAUDE_CONFIG_DIR", "CODEX_HOME")


# -- helpers ----------------------------------------------------------------------------------------------------
def mcp_argv() -> list[str]:
    """``python -m memmy mcp``: the command as the agents' MCP entries run it."""
    return ["-m", "memmy", "mcp"]


def stdio_env(home: Path, url: str | None, token: str | None = None, **extra: str) -> dict[str, str]:
    """A clean environment for the stdio server: its own HOME, the daemon URL/token, no host session ids."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_")) and k not in HOST_ENV}
    env.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "PYTHONUNBUFFERED": "1"})
    if url:
        env["MEMMY_MEMORY_URL"] = url
    if token:
        env["MEMMY_MEMORY_TOKEN"] = token
    env.update(extra)
    return env


def stdio(env: dict[str, str], cwd: Path | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=mcp_argv(), env=env, cwd=str(cwd) if cwd else None)


def with_client(server: Any, body: Callable[[Client], Awaitable[T]], mode: str = "auto") -> T:
    """Open the SDK client on ``server`` (stdio params or a transport), run ``body``, close.

    ``mode="legacy"`` forces the initialize handshake that today's hosts (Claude Code, Codex, Cursor) use.
    """

    async def main() -> T:
        async with Client(server, read_timeout_seconds=120, mode=mode) as client:
            return await body(client)

    return anyio.run(main)


def text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def data(result: CallToolResult) -> Any:
    assert not result.is_error, text(result)
    return json.loads(text(result))


def refused(result: CallToolResult, *needles: str) -> str:
    message = text(result)
    assert result.is_error, message
    for needle in needles:
        assert needle in message, message
    return message


def overview_counts(client: httpx.Client) -> dict[str, int]:
    response = client.get("/api/v1/panel/overview")
    response.raise_for_status()
    return dict(response.json()["counts"])


def drain(client: httpx.Client) -> None:
    for _ in range(200):
        client.post("/api/v1/worker/run", json={"limit": 1000}).raise_for_status()
        if client.get("/api/v1/health").json()["embeddingQueue"]["pending"] == 0:
            return
        time.sleep(0.05)


async def list_names(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


# -- static checks ----------------------------------------------------------------------------------------------
def test_every_tool_has_a_strict_valid_schema() -> None:
    tools = available_tools(True)
    assert [t.name for t in tools] == MEMMY + KEYMEM + TRANSCRIPTS
    for spec in tools:
        Draft202012Validator.check_schema(spec.schema)
        assert spec.schema["type"] == "object" and spec.schema["additionalProperties"] is False, spec.name
        assert spec.description and spec.title
        for name, prop in spec.schema["properties"].items():
            assert prop.get("description"), f"{spec.name}.{name} has no description"
            assert "type" in prop, f"{spec.name}.{name} has no type"
    assert [t.name for t in available_tools(False)] == MEMMY + KEYMEM
    assert len(MEMMY_TOOLS) == 4 and len(KEYMEM_TOOLS) == 14 and len(TRANSCRIPT_TOOLS) == 2


def test_transcript_trust_gate_and_session_ids() -> None:
    sid = str(uuid.uuid4())
    assert not transcripts_enabled({})
    assert transcripts_enabled({"CLAUDE_CODE_SESSION_ID": sid})
    assert transcripts_enabled({"CODEX_THREAD_ID": sid})
    assert transcripts_enabled({"MEMMY_MCP_TRANSCRIPTS": "1"})
    assert not transcripts_enabled({"MEMMY_MCP_TRANSCRIPTS": "0", "CLAUDE_CODE_SESSION_ID": sid})
    assert not transcripts_enabled({"CLAUDE_CODE_SESSION_ID": sid}, host_session=False)  # the shared daemon
    assert transcripts_enabled({"MEMMY_MCP_TRANSCRIPTS": "true"}, host_session=False)
    assert check_session_id(sid.upper()) == sid
    for bad in ("../" + sid, "/etc/passwd", sid + "/../x", "..\\" + sid, "~/" + sid, "not-a-uuid", sid + ".jsonl"):
        with pytest.raises(TranscriptError, match="refused session_id"):
            check_session_id(bad)


def test_mcp_command_refuses_to_start_remote_daemons() -> None:
    settings = ClientSettings.resolve(
        url="http://memmy.invalid:9", token=None, user_id=None, source=None, config=None, env={}
    )
    with pytest.raises(DaemonStartError, match="not on this machine"):
        ensure_daemon(settings, None, None, env={})
    with pytest.raises(DaemonStartError, match="not running"):
        ensure_daemon(settings, None, None, start=False, env={})


# -- stdio against a running daemon -----------------------------------------------------------------------------
def lock_holder(daemon: Daemon) -> int | None:
    """The pid in the server lock of ``daemon``'s store; None without one (daemons on PostgreSQL share the database
    and take no lock)."""
    lock = Path(load_config(env=daemon.env()).storage.sqlite_path)
    lock = lock.with_name(lock.name + ".server.lock")
    return int(json.loads(lock.read_text())["pid"]) if lock.exists() else None


def test_stdio_memmy_tools_on_the_running_daemon(fresh_daemon: Daemon, tmp_path: Path) -> None:
    fresh_daemon.token = "mcp-token-1"
    fresh_daemon.start()
    assert fresh_daemon.process is not None
    holder = fresh_daemon.process.pid if SUITE_BACKEND == "sqlite" else None
    assert lock_holder(fresh_daemon) == holder
    env = stdio_env(fresh_daemon.home, fresh_daemon.url, fresh_daemon.token)
    api = fresh_daemon.client()

    async def session(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {"names": await list_names(client)}
        added = data(
            await client.call_tool(
                "memmy_memory_add",
                {
                    "content": "The zeppelin project deploys with blue-green releases on Fridays.",
                    "title": "zeppelin deploys",
                    "tags": ["deploy", "zeppelin"],
                    "layer": "L1",
                },
            )
        )
        out["added"] = added
        await anyio.to_thread.run_sync(drain, api)
        out["search"] = data(
            await client.call_tool(
                "memmy_memory_search", {"query": "how does zeppelin deploy", "limit": 5, "scope": "pooled"}
            )
        )
        out["get"] = data(await client.call_tool("memmy_memory_get", {"id": added["id"]}))
        out["resume"] = data(await client.call_tool("memmy_memory_resume", {"query": "zeppelin blue-green release"}))
        before = await anyio.to_thread.run_sync(overview_counts, api)
        out["bad"] = [
            refused(await client.call_tool("memmy_memory_add", {"content": "   "}), "content"),
            refused(await client.call_tool("memmy_memory_add", {"title": "no content"}), "'content' is a required"),
            refused(await client.call_tool("memmy_memory_add", {"content": "x", "layer": "L9"}), "layer", "L9"),
            refused(await client.call_tool("memmy_memory_add", {"content": "x", "tags": "a,b"}), "tags"),
            refused(
                await client.call_tool("memmy_memory_add", {"content": "x", "secret": 1}), "'secret' was unexpected"
            ),
            refused(await client.call_tool("memmy_memory_search", {"query": "x", "limit": 0}), "limit"),
            refused(await client.call_tool("memmy_memory_search", {"query": "x", "limit": "5"}), "limit"),
            refused(await client.call_tool("memmy_memory_search", {"query": "x", "scope": "everything"}), "scope"),
            refused(await client.call_tool("memmy_memory_search", {"query": "x", "layers": ["L7"]}), "layers.0"),
            refused(await client.call_tool("memmy_memory_get", {"id": "../admin/shutdown"}), "memory id"),
            refused(await client.call_tool("memmy_memory_get", {}), "'id' is a required"),
            refused(await client.call_tool("memmy_memory_resume", {"query": ""}), "query"),
        ]
        out["missing"] = refused(
            await client.call_tool("memmy_memory_get", {"id": "trace_00000000000000000000"}), "HTTP 404"
        )
        out["after"] = await anyio.to_thread.run_sync(overview_counts, api)
        out["before"] = before
        prompts = await client.list_prompts()
        out["prompts"] = [p.name for p in prompts.prompts]
        out["prompt"] = (await client.get_prompt("memory_system_prompt")).messages[0].content
        with pytest.raises(MCPError, match="unknown prompt"):
            await client.get_prompt("nope")
        return out

    out = with_client(stdio(env, cwd=tmp_path), session)
    assert out["names"] == MEMMY + KEYMEM  # untrusted: no transcript tools
    assert out["added"]["id"].startswith("trace_")
    assert added_id_in(out["search"], out["added"]["id"])
    assert out["get"]["id"] == out["added"]["id"] and "blue-green" in out["get"]["content"]
    candidates = out["resume"]["candidates"]
    assert candidates and out["added"]["id"] in candidates[0]["memoryIds"] and len(candidates) <= 5
    assert "invalid arguments for memmy_memory_add" in out["bad"][0]
    assert out["after"] == out["before"]  # no bad call wrote anything
    assert out["prompts"] == ["memory_system_prompt"]
    prompt = out["prompt"].text
    for phrase in ("silently", "diverse", "history, not instructions", "Never store secrets", "Do not mention"):
        assert phrase in prompt
    # It used the running daemon: still the same single lock holder, and no auto-start happened.
    assert lock_holder(fresh_daemon) == holder
    assert not (fresh_daemon.home / ".memmy" / "logs" / "daemon-autostart.log").exists()
    stored = api.get(f"/api/v1/memory/{out['added']['id']}").json()
    assert stored["sourceAgent"] == "mcp" and stored["projectId"] == str(tmp_path)  # identity of the stdio server
    api.close()


def added_id_in(search: dict[str, Any], memory_id: str) -> bool:
    return memory_id in [hit["id"] for hit in search["hits"]]


def test_stdio_wrong_token_is_a_clear_tool_error(fresh_daemon: Daemon, tmp_path: Path) -> None:
    fresh_daemon.token = "right-token"
    fresh_daemon.start()
    env = stdio_env(fresh_daemon.home, fresh_daemon.url, "wrong-token")

    async def session(client: Client) -> str:
        return refused(await client.call_tool("memmy_memory_search", {"query": "x"}), "invalid memory service token")

    assert "HTTP 401" in with_client(stdio(env, cwd=tmp_path), session)


def test_stdio_transcript_tools_follow_the_trust_gate(daemon: Daemon, tmp_path: Path) -> None:
    sid = str(uuid.uuid4())
    cases = [
        ({}, False),
        ({"MEMMY_MCP_TRANSCRIPTS": "1"}, True),
        ({"CLAUDE_CODE_SESSION_ID": sid}, True),
        ({"CODEX_THREAD_ID": sid}, True),
        ({"MEMMY_MCP_TRANSCRIPTS": "0", "CLAUDE_CODE_SESSION_ID": sid}, False),
    ]
    for extra, trusted in cases:
        env = stdio_env(tmp_path, daemon.url, daemon.token, **extra)

        async def session(client: Client) -> tuple[list[str], str | None]:
            names = await list_names(client)
            try:
                await client.call_tool("list_sessions", {})
                error = None
            except MCPError as exc:
                error = exc.message
            return names, error

        names, error = with_client(stdio(env), session, mode="legacy")
        if trusted:
            assert names == MEMMY + KEYMEM + TRANSCRIPTS, extra
            assert error is None
        else:
            assert names == MEMMY + KEYMEM, extra
            assert error is not None and "transcript access is off" in error


def codex_rollout(home: Path, session_id: str, turns: list[tuple[str, str]]) -> Path:
    path = home / ".codex" / "sessions" / "2026" / "03" / "02" / f"rollout-2026-03-02T10-00-00-{session_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = [
        {"timestamp": "2026-03-02T10:00:00.000Z", "type": "session_meta", "payload": {"id": session_id, "cwd": "/w/c"}}
    ]
    for minute, (role, said) in enumerate(turns, start=1):
        kind = "input_text" if role == "user" else "output_text"
        lines.append(
            {
                "timestamp": f"2026-03-02T10:{minute:02d}:00.000Z",
                "type": "response_item",
                "payload": {"type": "message", "role": role, "content": [{"type": kind, "text": said}]},
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_stdio_transcript_tools_read_and_refuse_traversal(daemon: Daemon, tmp_path: Path) -> None:
    home = tmp_path / "host"
    claude = Transcript(home, "/work/alpha")
    claude.user("how do we cut a release?")
    claude.assistant("Tag it and push; CI builds the wheel.")
    claude.tool("Bash", {"command": "git tag v1"}, "ok")
    claude.user("and the changelog?")
    claude.assistant("Generated from the merged PR titles.")
    claude.write()
    codex_id = str(uuid.uuid4())
    codex_path = codex_rollout(home, codex_id, [("user", "fix the flaky upload test"), ("assistant", "Added a retry.")])
    os.utime(codex_path, (time.time() + 60, time.time() + 60))  # newest
    outside = tmp_path / "outside.jsonl"
    outside.write_text(claude.path.read_text())
    linked_id = str(uuid.uuid4())
    (claude.path.parent / f"{linked_id}.jsonl").symlink_to(outside)
    linked_project = home / ".claude" / "projects" / "-linked"
    linked_project.symlink_to(outside.parent, target_is_directory=True)
    hidden_id = str(uuid.uuid4())
    (outside.parent / f"{hidden_id}.jsonl").write_text(claude.path.read_text())

    env = stdio_env(home, daemon.url, daemon.token, MEMMY_MCP_TRANSCRIPTS="1")

    async def session(client: Client) -> dict[str, Any]:
        call = client.call_tool
        return {
            "list": data(await call("list_sessions", {})),
            "codex_only": data(await call("list_sessions", {"agent": "codex", "limit": 5})),
            "claude": data(await call("get_conversation", {"session_id": claude.session_id})),
            "window": data(await call("get_conversation", {"session_id": claude.session_id, "turn": 3})),
            "codex": data(await call("get_conversation", {"session_id": codex_id, "agent": "codex"})),
            "wrong_agent": refused(
                await call("get_conversation", {"session_id": codex_id, "agent": "claude_code"}), "no transcript"
            ),
            "dotdot": refused(await call("get_conversation", {"session_id": "../../../etc/passwd"}), "refused"),
            "dotdot_uuid": refused(
                await call("get_conversation", {"session_id": f"../{claude.session_id}"}), "paths, '..'"
            ),
            "absolute": refused(await call("get_conversation", {"session_id": str(claude.path)}), "refused"),
            "symlink": refused(await call("get_conversation", {"session_id": linked_id}), "symbolic link"),
            "linked_dir": refused(await call("get_conversation", {"session_id": hidden_id}), "no transcript"),
            "range": refused(
                await call("get_conversation", {"session_id": claude.session_id, "turn": 99}), "out of range"
            ),
            "bad_agent": refused(await call("list_sessions", {"agent": "cursor"}), "agent"),
        }

    out = with_client(stdio(env), session)
    listed = [(s["agent"], s["sessionId"]) for s in out["list"]["sessions"]]
    assert listed == [("codex", codex_id), ("claude_code", claude.session_id)]  # newest first, no symlinks
    assert out["list"]["sessions"][1]["workspacePath"] == "/work/alpha"
    assert out["list"]["sessions"][1]["firstPrompt"] == "how do we cut a release?"
    assert [s["sessionId"] for s in out["codex_only"]["sessions"]] == [codex_id]
    turns = out["claude"]["turns"]
    assert [(t["turn"], t["role"]) for t in turns] == [(0, "user"), (1, "assistant"), (2, "user"), (3, "assistant")]
    assert turns[0]["content"] == "how do we cut a release?" and turns[0]["ts"].startswith("2026-03-01T09:00")
    assert set(turns[0]) == {"turn", "role", "content", "ts"}
    assert out["claude"]["totalTurns"] == 4 and out["claude"]["truncated"] is False
    assert [t["turn"] for t in out["window"]["turns"]] == [1, 2, 3]
    assert [t["content"] for t in out["codex"]["turns"]] == ["fix the flaky upload test", "Added a retry."]
    assert "session UUID" in out["dotdot"] and "session UUID" in out["absolute"]


# -- daemon auto-start -----------------------------------------------------------------------------------------
def stop_daemon(pid: int, lock_path: Path) -> None:
    """SIGTERM a daemon we did not spawn ourselves and wait until it released its lock."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while lock_path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not lock_path.exists(), f"daemon {pid} did not stop"


def test_stdio_starts_the_daemon_when_none_is_running(isolated_home: Path, tmp_path: Path) -> None:
    port = free_port()
    memmy_home = isolated_home / ".memmy"
    memmy_home.mkdir(exist_ok=True)
    (memmy_home / "config.yaml").write_text(
        f"memmyMemory:\n  storage:\n    endpoint: http://127.0.0.1:{port}\n  server:\n    port: {port}\n"
    )
    env = stdio_env(isolated_home, None)
    lock_path = Path(load_config(env=env).storage.sqlite_path)
    lock_path = lock_path.with_name(lock_path.name + ".server.lock")
    assert not lock_path.exists()
    pids: list[int] = []

    def holder_pid() -> int:
        holder = json.loads(lock_path.read_text())
        assert holder["port"] == port
        return int(holder["pid"])

    async def session(client: Client) -> list[Any]:
        results = [data(await client.call_tool("memmy_memory_search", {"query": "anything at all"}))]
        pids.append(await anyio.to_thread.run_sync(holder_pid))
        # The daemon goes away mid-session: the next call starts it again and is retried.
        await anyio.to_thread.run_sync(stop_daemon, pids[0], lock_path)
        results.append(data(await client.call_tool("memmy_memory_search", {"query": "anything at all"})))
        pids.append(await anyio.to_thread.run_sync(holder_pid))
        return results

    try:
        results = with_client(stdio(env, cwd=tmp_path), session)
        assert [r["hits"] for r in results] == [[], []]
        assert len(pids) == 2 and pids[0] != pids[1] and os.getpid() not in pids
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=5).status_code == 200
        assert (memmy_home / "logs" / "daemon-autostart.log").read_text().count("memmy-memory mcp") == 2
        # Another stdio server finds the daemon up and starts nothing.
        with_client(stdio(env, cwd=tmp_path), lambda client: client.list_tools(), mode="legacy")
        assert holder_pid() == pids[1]
        assert (memmy_home / "logs" / "daemon-autostart.log").read_text().count("memmy-memory mcp") == 2
    finally:
        if lock_path.exists():
            stop_daemon(int(json.loads(lock_path.read_text())["pid"]), lock_path)


def test_no_start_fails_with_a_clear_message(isolated_home: Path) -> None:
    env = stdio_env(isolated_home, f"http://127.0.0.1:{free_port()}")
    done = subprocess.run(
        [sys.executable, *mcp_argv(), "--no-start"], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    assert done.returncode == 1
    assert b"not running" in done.stderr and done.stdout == b""


# -- streamable HTTP, mounted next to the real routes ---------------------------------------------------------
class ServerThread:
    """uvicorn on a free loopback port in a background thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def token_service(isolated_home: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryService]:
    monkeypatch.setenv("MEMMY_MEMORY_TOKEN", "http-token-7")
    svc = MemoryService.open(load_config(), embedder=embedder)
    svc.indexer.load_index()
    yield svc
    svc.close()


def http_transport(url: str, token: str | None, **extra: str) -> Any:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    headers.update(extra)
    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=120))


@pytest.mark.parametrize(
    ("with_lifespan", "mode"), [(True, "auto"), (False, "legacy")], ids=["lifespan-modern", "lazy-start-legacy"]
)
def test_http_endpoint_mounted_in_the_daemon_app(
    token_service: MemoryService, with_lifespan: bool, mode: str, tmp_path: Path
) -> None:
    app = create_app(token_service)
    endpoint = McpHttpEndpoint(token=lambda: token_service.config.storage.token)
    # Exactly what create_app does once /mcp is mounted there (replacing that endpoint if it already is).
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", None) != "/mcp"]
    app.router.routes.append(endpoint.route("/mcp"))
    if with_lifespan:
        app.router.lifespan_context = endpoint.lifespan
    with ServerThread(app) as server:
        api = httpx.Client(base_url=server.url, headers={"authorization": "Bearer http-token-7"}, timeout=60)
        assert httpx.get(f"{server.url}/api/v1/health").status_code == 200
        raw = httpx.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert raw.status_code == 401 and raw.json()["error"]["code"] == "unauthorized"
        evil = httpx.post(f"{server.url}/mcp", json={}, headers={"origin": "https://evil.example"})
        assert evil.status_code == 403

        async def session(client: Client) -> dict[str, Any]:
            out: dict[str, Any] = {"names": await list_names(client)}
            added = data(await client.call_tool("memmy_memory_add", {"content": "Pin numpy below 3 in the lab repo."}))
            await anyio.to_thread.run_sync(drain, api)
            out["added"] = added
            out["search"] = data(await client.call_tool("memmy_memory_search", {"query": "numpy pin", "limit": 3}))
            out["get"] = data(await client.call_tool("memmy_memory_get", {"id": added["id"]}))
            out["resume"] = data(await client.call_tool("memmy_memory_resume", {"query": "numpy pin lab repo"}))
            before = await anyio.to_thread.run_sync(overview_counts, api)
            out["bad"] = refused(await client.call_tool("memmy_memory_add", {"content": ""}), "content")
            out["bad_layer"] = refused(await client.call_tool("memmy_memory_add", {"content": "y", "layer": "l1"}))
            out["server_400"] = refused(
                await client.call_tool("memmy_memory_get", {"id": "raw_0123"}), "raw turn ids are internal", "HTTP 400"
            )
            out["counts"] = (before, await anyio.to_thread.run_sync(overview_counts, api))
            content = (await client.get_prompt("memory_system_prompt")).messages[0].content
            assert isinstance(content, TextContent)
            out["prompt"] = content.text
            return out

        identity = {"x-memmy-source": "cursor", "x-memmy-workspace-path": str(tmp_path)}
        out = with_client(http_transport(f"{server.url}/mcp", "http-token-7", **identity), session, mode=mode)
        stored = api.get(f"/api/v1/memory/{out['added']['id']}").json()
        api.close()

        async def unauthorized(client: Client) -> None:
            await client.list_tools()

        with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 401 as a transport error
            with_client(http_transport(f"{server.url}/mcp", "wrong"), unauthorized)
    assert out["names"] == MEMMY + KEYMEM
    # The SDK's session manager ran in a background task; the lifespan stopped it, else it ended with the loop.
    assert endpoint._background is None if with_lifespan else endpoint._background is not None
    assert not endpoint.running
    assert stored["sourceAgent"] == "cursor" and stored["projectId"] == str(tmp_path)  # forwarded identity
    assert added_id_in(out["search"], out["added"]["id"])
    assert out["get"]["content"] == "Pin numpy below 3 in the lab repo."
    assert out["resume"]["candidates"][0]["memoryIds"] == [out["added"]["id"]]
    assert out["counts"][0] == out["counts"][1]
    assert "Never store secrets" in out["prompt"]


def test_http_endpoint_transcript_gate_ignores_host_session_ids() -> None:
    sid = str(uuid.uuid4())
    for env, trusted in (({"CLAUDE_CODE_SESSION_ID": sid}, False), ({"MEMMY_MCP_TRANSCRIPTS": "1"}, True)):
        endpoint = McpHttpEndpoint(api="http://127.0.0.1:9", token="tok", env=env)
        with ServerThread(Starlette(routes=[endpoint.route("/mcp")], lifespan=endpoint.lifespan)) as server:
            names = with_client(http_transport(f"{server.url}/mcp", "tok"), list_names, mode="legacy")
            down = with_client(
                http_transport(f"{server.url}/mcp", "tok"),
                lambda client: client.call_tool("memmy_memory_search", {"query": "x"}),
            )
        assert names == MEMMY + KEYMEM + (TRANSCRIPTS if trusted else [])
        refused(down, "not reachable at http://127.0.0.1:9")


def test_http_endpoint_on_the_real_daemon_when_mounted(daemon: Daemon) -> None:
    probe = httpx.post(
        f"{daemon.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        headers={"authorization": f"Bearer {daemon.token}", "accept": "application/json, text/event-stream"},
    )
    if probe.status_code == 404:
        pytest.skip("the daemon does not mount /mcp yet (see memmy.mcp.http)")
    assert httpx.post(f"{daemon.url}/mcp", json={}).status_code == 401

    async def session(client: Client) -> list[str]:
        names = await list_names(client)
        data(await client.call_tool("memmy_memory_search", {"query": "anything"}))
        return names

    assert with_client(http_transport(f"{daemon.url}/mcp", daemon.token), session) == MEMMY + KEYMEM


# -- keymem tools ----------------------------------------------------------------------------------------------
def keys_backend_missing(daemon: Daemon) -> bool:
    with daemon.client() as client:
        response = client.post("/api/v1/keys/memory_stats", json={})
    return response.status_code == 404 and "is not registered" in response.text


def first_id(value: Any, *names: str) -> str:
    """The first id-like field found (keymem answers vary between saved / id / memory_id / key_id)."""
    if isinstance(value, dict):
        for name in names:
            if isinstance(value.get(name), str):
                return str(value[name])
        for child in value.values():
            if isinstance(child, dict | list) and (found := first_id(child, *names)):
                return found
    if isinstance(value, list):
        for child in value:
            if found := first_id(child, *names):
                return found
    return ""


def test_keymem_tools_round_trip(daemon: Daemon, tmp_path: Path) -> None:
    if keys_backend_missing(daemon):
        pytest.skip("POST /api/v1/keys/* is not registered in this daemon yet")
    env = stdio_env(tmp_path, daemon.url, daemon.token)
    namespace = f"mcp-test-{uuid.uuid4().hex[:8]}"

    async def session(client: Client) -> dict[str, Any]:
        call = client.call_tool
        out: dict[str, Any] = {"stats0": data(await call("memory_stats", {}))}
        out["bad"] = [
            refused(await call("remember", {"content": "no keys"}), "'keys' is a required"),
            refused(await call("remember", {"content": "x", "keys": "orchid"}), "keys"),
            refused(await call("remember", {"content": "x", "keys": ["a"], "decay_profile": "forever"}), "decay"),
            refused(await call("confirm_memory", {"memory_id": "m", "evidence": " "}), "evidence"),
            refused(await call("confirm_memory", {"memory_id": "m"}), "'evidence' is a required"),
            refused(await call("remember", {"content": "x", "keys": ["|"]}), "keys[0]", "HTTP 400"),
            refused(await call("recall", {"query": "x", "top_k": 0}), "top_k"),
            refused(await call("remember_batch", {"items": []}), "items"),
            refused(await call("browse_keys", {}), "'namespace' is a required"),
        ]
        out["stats1"] = data(await call("memory_stats", {}))
        saved = data(
            await call(
                "remember",
                {
                    "content": "The user's favourite orchid is Phalaenopsis.",
                    "keys": ["orchid", "flower", "Phalaenopsis", "favourite"],
                    "namespace": namespace,
                },
            )
        )
        memory_id = first_id(saved, "saved", "id", "memory_id")
        out["memory_id"] = memory_id
        recalled = data(await call("recall", {"query": "orchid", "namespace": namespace}))
        key_id = first_id(recalled.get("keys"), "key_id", "id")
        out["key_id"] = key_id
        out["read_key"] = data(await call("read_key", {"key_id": key_id, "query": "orchid", "namespace": namespace}))
        out["read_memory"] = data(
            await call("read_memory", {"memory_id": memory_id, "via_key_id": key_id, "namespace": namespace})
        )
        corrected = data(
            await call("correct", {"memory_id": memory_id, "content": "The user's favourite orchid is Cattleya now."})
        )
        new_id = first_id(corrected, "new_id", "saved", "id", "memory_id")
        out["new_id"] = new_id
        out["read_new"] = data(await call("read_memory", {"memory_id": new_id, "namespace": namespace}))
        out["forget"] = data(await call("forget", {"memory_id": new_id}))
        out["gone"] = refused(await call("read_memory", {"memory_id": new_id}))
        out["unknown"] = refused(await call("read_memory", {"memory_id": f"missing-{uuid.uuid4().hex}"}), "HTTP 404")
        return out

    out = with_client(stdio(env), session)
    without_time = [{k: v for k, v in out[n].items() if k != "serverTime"} for n in ("stats0", "stats1")]
    assert without_time[0] == without_time[1]  # the rejected calls wrote nothing
    assert out["memory_id"] and out["key_id"]
    assert out["memory_id"] in json.dumps(out["read_key"])
    assert "Phalaenopsis" in json.dumps(out["read_memory"], ensure_ascii=False)
    assert out["new_id"] and out["new_id"] != out["memory_id"]
    assert "Cattleya" in json.dumps(out["read_new"], ensure_ascii=False)
    assert "404" in out["gone"] or "not found" in out["gone"].lower()
