"""One turn, one memory: turns captured live by the installed Claude Code and Codex hooks, then read again by the
history importer from the same transcripts, are stored once (the README's order: ``init``, work, ``import``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.claude_transcripts import Transcript
from tests.conftest import Daemon
from tests.test_integration_hooks import captured, hook_command, run_cli, seed
from tests.test_integration_hooks import run_hook as run_hook_in_budget

#: A generous hook budget: on a loaded machine a hook that gives up after the default 1.5 s fails open (by design),
#: which is not what this test is about.
SLOW_MACHINE_ENV = {"MEMMY_HOOK_TIMEOUT_MS": "30000"}


def run_hook(home: Path, argv: list[str], payload: Any) -> tuple[str, float, int]:
    """Run an installed hook command with a budget no loaded machine exceeds."""
    return run_hook_in_budget(home, argv, payload, SLOW_MACHINE_ENV)


class Rollout:
    """A Codex rollout (envelope era) written line by line, as Codex appends it while it works."""

    def __init__(self, home: Path, cwd: str) -> None:
        self.thread = str(uuid.uuid4())
        self.path = (
            home / ".codex" / "sessions" / "2026" / "12" / "03" / f"rollout-2026-12-03T10-00-00-{self.thread}.jsonl"
        )
        self.cwd = cwd
        self.clock = 0
        self.lines: list[dict[str, Any]] = []
        self._add("session_meta", {"id": self.thread, "cwd": cwd, "originator": "codex_cli_rs"})

    def _add(self, kind: str, payload: dict[str, Any]) -> None:
        self.clock += 1
        stamp = f"2026-12-03T10:{self.clock // 60:02d}:{self.clock % 60:02d}.000Z"
        self.lines.append({"timestamp": stamp, "type": kind, "payload": payload})

    def user(self, text: str) -> None:
        self._add(
            "response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        )

    def tool(self, command: str, output: str) -> None:
        call = f"call_{uuid.uuid4().hex[:8]}"
        arguments = json.dumps({"cmd": command})
        self._add(
            "response_item", {"type": "function_call", "name": "exec_command", "arguments": arguments, "call_id": call}
        )
        self._add("response_item", {"type": "function_call_output", "call_id": call, "output": output})

    def assistant(self, text: str) -> None:
        payload = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        self._add("response_item", payload)

    def write(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(json.dumps(line) + "\n" for line in self.lines), encoding="utf-8")
        return self.path


@pytest.fixture
def installed(fresh_daemon: Daemon, tmp_path: Path) -> Iterator[tuple[Daemon, Path, Path]]:
    """A daemon and a HOME where ``init`` installed the Claude Code and Codex hooks."""
    home = fresh_daemon.home
    seed(home)
    fresh_daemon.start()
    result = run_cli(home, "init", "--agent", "claude_code,codex", "--endpoint", fresh_daemon.url)
    assert result.exit_code == 0, result.output
    project = tmp_path / "webshop"
    (project / ".git").mkdir(parents=True)
    yield fresh_daemon, home, project


def import_all(daemon: Daemon) -> dict[str, Any]:
    """A deep import of both agents' history through the daemon; its final status."""
    with daemon.client() as client:
        body = {"sources": ["claude_code", "codex"], "mode": "full", "confirm": True}
        job = client.post("/api/v1/sources/scan", json=body).json()
        for _ in range(600):
            status: dict[str, Any] = client.get(f"/api/v1/sources/scan/{job['jobId']}").json()
            if status["state"] in ("done", "stopped", "failed"):
                return status
            time.sleep(0.1)
    raise AssertionError("the import did not finish")


def test_live_turns_then_import_of_the_same_transcripts_store_each_turn_once(
    installed: tuple[Daemon, Path, Path],
) -> None:
    daemon, home, project = installed
    claude = Transcript(home, str(project))
    claude_base = {"session_id": claude.session_id, "cwd": str(project), "transcript_path": str(claude.path)}
    for number, (prompt, answer) in enumerate(
        [
            ("run the checkout tests please", "Two tests fail: STRIPE_TEST_MODE is unset."),
            ("set STRIPE_TEST_MODE in the test script", "Done; the checkout tests pass now."),
        ]
    ):
        claude.user(prompt)
        claude.write()  # Claude Code appends the prompt before the hook runs
        out, _, code = run_hook(
            home,
            hook_command(home, "claude_code", "UserPromptSubmit"),
            {**claude_base, "hook_event_name": "UserPromptSubmit", "prompt": prompt},
        )
        assert code == 0, out
        claude.tool("Bash", {"command": f"pytest tests/checkout -k case{number}"}, "2 failed" if number == 0 else "ok")
        claude.assistant(answer)
        claude.write()
        out, _, code = run_hook(
            home, hook_command(home, "claude_code", "Stop"), {**claude_base, "hook_event_name": "Stop"}
        )
        assert code == 0 and out == ""

    codex = Rollout(home, str(project))
    for number, (prompt, answer) in enumerate(
        [
            ("why does the payment webhook time out?", "The handler waits on a slow DNS lookup."),
            ("cache the DNS lookup in the webhook", "Cached it; the webhook answers in 40 ms."),
        ]
    ):
        codex.user(prompt)
        codex.write()
        base = {
            "session_id": codex.thread,
            "turn_id": f"codex-turn-{number}",
            "cwd": str(project),
            "transcript_path": str(codex.path),
            "hook_event_name": "UserPromptSubmit",
        }
        out, _, code = run_hook(home, hook_command(home, "codex", "UserPromptSubmit"), {**base, "prompt": prompt})
        assert code == 0, out
        codex.tool(f"rg webhook{number}", "src/webhook.py")
        codex.assistant(answer)
        codex.write()
        stop = {**base, "hook_event_name": "Stop", "last_assistant_message": answer}
        out, _, code = run_hook(home, hook_command(home, "codex", "Stop"), stop)
        assert code == 0 and out == ""

    assert len(captured(daemon, "claude_code")) == 2 and len(captured(daemon, "codex")) == 2
    status = import_all(daemon)
    assert status["state"] == "done", status
    assert status["totals"]["turnsAdded"] == 0 and status["totals"]["turnsExisting"] == 4, status
    claude_traces, codex_traces = captured(daemon, "claude_code"), captured(daemon, "codex")
    assert len(claude_traces) == 2 and len(codex_traces) == 2  # every turn stored once
    again = import_all(daemon)
    assert again["totals"]["turnsAdded"] == 0 and len(captured(daemon, "claude_code")) == 2


def test_a_turn_imported_before_its_stop_hook_ran_is_not_stored_twice(installed: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = installed
    claude = Transcript(home, str(project))
    base = {"session_id": claude.session_id, "cwd": str(project), "transcript_path": str(claude.path)}
    prompt = "rename the checkout module to payments"
    claude.user(prompt)
    claude.write()
    out, _, code = run_hook(
        home,
        hook_command(home, "claude_code", "UserPromptSubmit"),
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": prompt},
    )
    assert code == 0, out
    claude.assistant("Renamed checkout/ to payments/ and updated the imports.")
    claude.write()
    assert import_all(daemon)["totals"]["turnsAdded"] == 1  # the import ran between the answer and the stop hook
    out, _, code = run_hook(home, hook_command(home, "claude_code", "Stop"), {**base, "hook_event_name": "Stop"})
    assert code == 0 and out == ""
    traces = captured(daemon, "claude_code")
    assert len(traces) == 1, traces


def test_the_hooks_transcript_reader_is_standard_library_only() -> None:
    code = (
        "import sys; before = set(sys.modules); import memmy.hook.transcripts; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names) - {'memmy'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
