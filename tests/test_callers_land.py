"""Each caller lands where it belongs: the stdio MCP server answers every request it read before stdin closed,
MCP ``remember`` writes into the caller's namespace, turn-start idempotency is atomic with the turn, a stale
server lock whose pid now belongs to another process is taken over, and an interrupted import frees its slot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Daemon
from tests.test_mcp import mcp_argv, stdio_env


def jsonrpc(request_id: int | None, method: str, params: dict[str, Any] | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return json.dumps(message)


def test_stdio_answers_every_request_read_before_stdin_closes(daemon: Daemon, tmp_path: Path) -> None:
    lines = [
        jsonrpc(
            0,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}},
        ),
        jsonrpc(None, "notifications/initialized"),
    ]
    ids = list(range(1, 31))
    for request_id in ids:
        if request_id % 3 == 0:
            lines.append(jsonrpc(request_id, "tools/list"))
        else:
            lines.append(
                jsonrpc(
                    request_id,
                    "tools/call",
                    {"name": "memmy_memory_search", "arguments": {"query": f"deploy notes {request_id}", "limit": 3}},
                )
            )
    result = subprocess.run(
        [sys.executable, *mcp_argv(), "--no-start"],
        input="\n".join(lines) + "\n",
        env=stdio_env(daemon.home, daemon.url, daemon.token),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    answers = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    answered = {a["id"] for a in answers if "id" in a}
    assert answered == {0, *ids}, f"missing replies: {sorted({0, *ids} - answered)}; stderr: {result.stderr[-2000:]}"
    for answer in answers:
        assert "error" not in answer, answer
        if answer["id"] and answer["id"] % 3:
            assert answer["result"]["isError"] is False, answer
