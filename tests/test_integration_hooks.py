"""Claude Code, Codex and Cursor: install/merge/remove on realistic configs, the real hook against a live daemon,
and fail-open behaviour (daemon down, daemon hanging, bad stdin, unwritable state)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from tests.conftest import Daemon, HangingServer, home_env, refused_endpoint, store_execute

CLAUDE_SETTINGS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/guard.sh"}]}],
        "UserPromptSubmit": [{"matcher": "", "hooks": [{"type": "command", "command": "~/bin/log-prompt.sh"}]}],
    },
}
CODEX_HOOKS: dict[str, Any] = {
    "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}]}
}
CURSOR_HOOKS: dict[str, Any] = {"version": 1, "hooks": {"afterFileEdit": [{"command": "./format.sh"}]}}


def seed(home: Path) -> dict[str, Path]:
    """A home where each agent already has its own settings, hooks and instruction files."""
    files = {
        "claude_code": home / ".claude" / "settings.json",
        "codex": home / ".codex" / "hooks.json",
        "cursor": home / ".cursor" / "hooks.json",
    }
    files["claude_code"].parent.mkdir(parents=True)
    files["claude_code"].write_text(json.dumps(CLAUDE_SETTINGS, indent=4))
    (home / ".claude" / "CLAUDE.md").write_text("# My rules\n\nAlways run the linter.\n")
    files["codex"].parent.mkdir(parents=True)
    files["codex"].write_text(json.dumps(CODEX_HOOKS))
    files["cursor"].parent.mkdir(parents=True)
    files["cursor"].write_text(json.dumps(CURSOR_HOOKS))
    return files


def run_cli(home: Path, *args: str) -> Any:
    """Run the ``memmy`` CLI in-process with ``home`` as HOME."""
    return CliRunner().invoke(cli, list(args), env=home_env(home), catch_exceptions=False)


def snapshot(home: Path) -> dict[str, str]:
    """Every file under ``home`` outside ``.memmy`` with its text."""
    return {
        str(p.relative_to(home)): p.read_text()
        for p in sorted(home.rglob("*"))
        if p.is_file() and ".memmy" not in p.parts
    }


def test_install_merges_is_idempotent_and_removes_exactly_memmy(isolated_home: Path) -> None:
    files = seed(isolated_home)
    before = snapshot(isolated_home)
    result = run_cli(isolated_home, "init", "--agent", "claude_code,codex,cursor")
    assert result.exit_code == 0, result.output
    assert "trust" in result.output  # Codex needs the user to trust new hooks

    claude = json.loads(files["claude_code"].read_text())
    assert claude["model"] == "opus" and claude["permissions"] == CLAUDE_SETTINGS["permissions"]
    assert claude["hooks"]["PreToolUse"] == CLAUDE_SETTINGS["hooks"]["PreToolUse"]
    prompt_hooks = claude["hooks"]["UserPromptSubmit"]
    assert prompt_hooks[0] == CLAUDE_SETTINGS["hooks"]["UserPromptSubmit"][0] and len(prompt_hooks) == 2
    assert "/.memmy/bin/memmy-hook claude_code UserPromptSubmit" in prompt_hooks[1]["hooks"][0]["command"]
    assert "/.memmy/bin/memmy-hook claude_code Stop" in claude["hooks"]["Stop"][0]["hooks"][0]["command"]
    assert (isolated_home / ".claude" / "skills" / "memmy-memory" / "SKILL.md").read_text().startswith("---\nname:")
    assert "MEMMY_RESUME_COMMAND_ARGUMENTS" in (isolated_home / ".claude" / "commands" / "memmy-resume.md").read_text()
    claude_md = (isolated_home / ".claude" / "CLAUDE.md").read_text()
    assert claude_md.startswith("# My rules\n\nAlways run the linter.\n") and "<!-- memmy:start v=1 -->" in claude_md

    codex = json.loads(files["codex"].read_text())
    assert codex["hooks"]["Stop"][0] == CODEX_HOOKS["hooks"]["Stop"][0] and len(codex["hooks"]["Stop"]) == 2
    cursor = json.loads(files["cursor"].read_text())
    assert cursor["version"] == 1 and cursor["hooks"]["afterFileEdit"] == CURSOR_HOOKS["hooks"]["afterFileEdit"]
    assert set(cursor["hooks"]) == {"afterFileEdit", "beforeSubmitPrompt", "afterAgentResponse", "stop"}
    hook_json = isolated_home / ".memmy" / "hook.json"
    assert hook_json.stat().st_mode & 0o777 == 0o600

    installed = snapshot(isolated_home)
    again = run_cli(isolated_home, "init", "--agent", "claude_code,codex,cursor")
    assert again.exit_code == 0 and again.output.count("already up to date") == 5  # 3 agents, hook.json, launchers
    assert snapshot(isolated_home) == installed

    dry = run_cli(isolated_home, "remove", "--agent", "claude,codex,cursor", "--dry-run")
    assert "would change" in dry.output and "memmy-hook" in dry.output
    assert snapshot(isolated_home) == installed

    removed = run_cli(isolated_home, "remove", "--agent", "claude,codex,cursor")
    assert removed.exit_code == 0, removed.output
    assert snapshot(isolated_home) == before  # the original bytes, not just equal content


def test_init_without_agent_skips_absent_ones_and_rejects_unknown(isolated_home: Path) -> None:
    (isolated_home / ".codex").mkdir()
    result = run_cli(isolated_home, "init")
    assert result.exit_code == 0 and "✓ codex" in result.output and "skipped (not installed here)" in result.output
    assert not (isolated_home / ".claude").exists()
    missing = run_cli(isolated_home, "init", "--agent", "cursor")
    assert missing.exit_code == 2 and "not installed on this machine" in missing.output
    unknown = run_cli(isolated_home, "init", "--agent", "emacs")
    assert unknown.exit_code == 2 and "unknown agent" in unknown.output


def hook_command(home: Path, agent: str, event: str) -> list[str]:
    """The command the agent would run, read back from the installed config."""
    if agent == "cursor":
        data = json.loads((home / ".cursor" / "hooks.json").read_text())
        command = next(e["command"] for e in data["hooks"][event] if "memmy-hook" in e["command"])
    else:
        path = home / (".claude/settings.json" if agent == "claude_code" else ".codex/hooks.json")
        data = json.loads(path.read_text())
        command = next(h["command"] for e in data["hooks"][event] for h in e["hooks"] if "memmy-hook" in h["command"])
    return shlex.split(command)


def run_hook(
    home: Path, argv: list[str], payload: Any, extra_env: dict[str, str] | None = None
) -> tuple[str, float, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_"))}
    env.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), **(extra_env or {})})
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    started = time.monotonic()
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=30)
    return done.stdout.strip(), time.monotonic() - started, done.returncode


@pytest.fixture
def hooked_home(fresh_daemon: Daemon, tmp_path: Path) -> Iterator[tuple[Daemon, Path, Path]]:
    home = fresh_daemon.home
    seed(home)
    fresh_daemon.start()
    result = run_cli(home, "init", "--agent", "claude_code,codex,cursor", "--endpoint", fresh_daemon.url)
    assert result.exit_code == 0, result.output
    project = tmp_path / "webshop"
    (project / ".git").mkdir(parents=True)
    with fresh_daemon.client() as client:
        client.post(
            "/api/v1/memory/add",
            json={"content": "The webshop checkout tests need STRIPE_TEST_MODE=1 set", "workspacePath": str(project)},
        )
    fresh_daemon.drain()
    yield fresh_daemon, home, project


def captured(daemon: Daemon, source: str) -> list[dict[str, Any]]:
    with daemon.client() as client:
        items = client.get("/api/v1/panel/items", params={"sourceAgent": source, "pageSize": 50}).json()["items"]
    return [client_item for client_item in items if client_item["memoryLayer"] == "L1"]


@pytest.mark.parametrize("agent", ["claude_code", "codex"])
def test_claude_and_codex_hooks_inject_and_capture(hooked_home: tuple[Daemon, Path, Path], agent: str) -> None:
    daemon, home, project = hooked_home
    base = {
        "session_id": f"{agent}-session-1",
        "cwd": str(project),
        "transcript_path": None,
        "permission_mode": "default",
        "model": "gpt-5.5",
    }
    if agent == "codex":
        base["turn_id"] = "turn-42"
    prompt = {**base, "hook_event_name": "UserPromptSubmit", "prompt": "why do the webshop checkout tests fail?"}
    out, _, code = run_hook(home, hook_command(home, agent, "UserPromptSubmit"), prompt)
    assert code == 0
    context = json.loads(out)["hookSpecificOutput"]
    assert context["hookEventName"] == "UserPromptSubmit"
    assert "<memmy_memory_context" in context["additionalContext"]
    assert "STRIPE_TEST_MODE=1" in context["additionalContext"]
    assert "<current_user_request>\nwhy do the webshop checkout tests fail?" in context["additionalContext"]
    stop = {
        **base,
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "They need STRIPE_TEST_MODE=1; I exported it in the test script.",
    }
    out, _, code = run_hook(home, hook_command(home, agent, "Stop"), stop)
    assert code == 0 and out == ""
    traces = captured(daemon, agent)
    assert len(traces) == 1 and traces[0]["projectId"] == str(project)
    with daemon.client() as client:
        detail = client.get(f"/api/v1/memory/{traces[0]['id']}").json()
    raw = detail["refs"]["rawTurn"]
    assert raw["status"] == "succeeded" and raw["userText"] == "why do the webshop checkout tests fail?"
    assert "STRIPE_TEST_MODE" not in raw["userText"] and "memmy_memory_context" not in detail["content"]


def test_claude_stop_reads_answer_and_tools_from_the_transcript(hooked_home: tuple[Daemon, Path, Path]) -> None:
    from tests.claude_transcripts import Transcript

    daemon, home, project = hooked_home
    transcript = Transcript(home, str(project))
    transcript.user("run the checkout tests please")
    transcript.tool("Bash", {"command": "pytest tests/checkout"}, "2 failed: KeyError STRIPE_TEST_MODE", is_error=True)
    transcript.assistant("Two tests fail because STRIPE_TEST_MODE is unset.")
    path = transcript.write()
    base = {"session_id": transcript.session_id, "cwd": str(project), "transcript_path": str(path)}
    run_hook(
        home,
        hook_command(home, "claude_code", "UserPromptSubmit"),
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": "run the checkout tests please"},
    )
    out, _, code = run_hook(home, hook_command(home, "claude_code", "Stop"), {**base, "hook_event_name": "Stop"})
    assert code == 0
    trace = captured(daemon, "claude_code")[0]
    with daemon.client() as client:
        raw = client.get(f"/api/v1/memory/{trace['id']}").json()["refs"]["rawTurn"]
    assert raw["assistantText"] == "Two tests fail because STRIPE_TEST_MODE is unset."
    assert raw["toolCalls"][0]["name"] == "Bash" and "KeyError" in raw["toolCalls"][0]["error"]


def test_cursor_hooks_capture_with_status(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    base = {
        "conversation_id": "c0f1",
        "generation_id": "g-77",
        "model": "claude-4.5-sonnet",
        "cursor_version": "2.0.34",
        "workspace_roots": [str(project)],
        "user_email": None,
        "transcript_path": None,
    }
    out, _, _ = run_hook(
        home,
        hook_command(home, "cursor", "beforeSubmitPrompt"),
        {**base, "hook_event_name": "beforeSubmitPrompt", "prompt": "refactor the cart module", "attachments": []},
    )
    assert json.loads(out) == {"continue": True}
    out, _, _ = run_hook(
        home,
        hook_command(home, "cursor", "afterAgentResponse"),
        {**base, "hook_event_name": "afterAgentResponse", "text": "I started refactoring the cart."},
    )
    assert json.loads(out) == {}
    out, _, _ = run_hook(
        home,
        hook_command(home, "cursor", "stop"),
        {**base, "hook_event_name": "stop", "status": "aborted", "loop_count": 0},
    )
    assert json.loads(out) == {}
    trace = captured(daemon, "cursor")[0]
    with daemon.client() as client:
        raw = client.get(f"/api/v1/memory/{trace['id']}").json()["refs"]["rawTurn"]
    assert raw["status"] == "cancelled" and raw["assistantText"] == "I started refactoring the cart."


@pytest.mark.parametrize(
    "agent,event,allow",
    [
        ("claude_code", "UserPromptSubmit", ""),
        ("codex", "Stop", ""),
        ("cursor", "beforeSubmitPrompt", '{"continue": true}'),
    ],
)
def test_hooks_fail_open_within_budget(
    tmp_path: Path, hanging_server: HangingServer, agent: str, event: str, allow: str
) -> None:
    argv = [sys.executable, "-m", "memmy.hook", agent, event]
    payload = {
        "session_id": "s",
        "cwd": str(tmp_path),
        "prompt": "a prompt long enough to be searched",
        "workspace_roots": [str(tmp_path)],
        "last_assistant_message": "done",
    }
    budget = {"MEMMY_HOOK_TIMEOUT_MS": "700"}
    down = refused_endpoint()
    cases = {
        "daemon down": (payload, {"MEMMY_MEMORY_URL": down}),
        "daemon hanging": (payload, {"MEMMY_MEMORY_URL": hanging_server.url}),
        "malformed stdin": ("{not json", {"MEMMY_MEMORY_URL": down}),
        "list stdin": ("[1, 2]", {"MEMMY_MEMORY_URL": down}),
    }
    for name, (body, env) in cases.items():
        out, elapsed, code = run_hook(tmp_path, argv, body, {**budget, **env})
        assert code == 0, name
        assert out == allow, name
        assert elapsed < 0.7 + 1.0, f"{name}: {elapsed:.2f}s"  # budget + interpreter start-up


def test_unwritable_state_dir_fails_open(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    hooks_dir = home / ".memmy" / "hooks"
    hooks_dir.mkdir(parents=True, exist_ok=True)
    (hooks_dir / "state").write_text("not a directory")  # mkdir fails even for root
    out, _, code = run_hook(
        home,
        hook_command(home, "claude_code", "UserPromptSubmit"),
        {
            "session_id": "s9",
            "cwd": str(project),
            "hook_event_name": "UserPromptSubmit",
            "prompt": "webshop checkout tests failing again",
        },
    )
    assert code == 0
    assert "STRIPE_TEST_MODE" in json.loads(out)["hookSpecificOutput"]["additionalContext"]  # recall still works


def test_short_prompts_and_slash_commands_are_not_searched(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    for prompt in ("ok", "/compact", "hi :)"):
        out, _, code = run_hook(
            home,
            hook_command(home, "claude_code", "UserPromptSubmit"),
            {"session_id": "s2", "cwd": str(project), "prompt": prompt},
        )
        assert code == 0 and out == ""
    with daemon.client() as client:
        assert client.get("/api/v1/panel/analysis").json()["metrics"]["recallEvents"] == 0


def test_hook_runtime_imports_only_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import memmy.hook.runtime; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "print(sorted(new - set(sys.stdlib_module_names) - {'memmy'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_memmy_resume_lists_candidates_and_injects_the_choice(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    argv = hook_command(home, "claude_code", "UserPromptSubmit")
    base = {"cwd": str(project), "hook_event_name": "UserPromptSubmit"}
    for session in ("old-1", "old-2"):
        run_hook(home, argv, {**base, "session_id": session, "prompt": f"migrate the orders table ({session})"})
        run_hook(
            home,
            hook_command(home, "claude_code", "Stop"),
            {
                **base,
                "session_id": session,
                "hook_event_name": "Stop",
                "last_assistant_message": f"Added the migration for orders in {session}.",
            },
        )
    daemon.drain()
    now = {**base, "session_id": "new-session"}
    out, _, code = run_hook(home, argv, {**now, "prompt": "/memmy-resume orders table migration"})
    listing = json.loads(out)
    assert code == 0 and listing["decision"] == "block"
    assert "1. " in listing["reason"] and "2. " in listing["reason"] and "Reply with 1-5" in listing["reason"]
    out, _, _ = run_hook(home, argv, {**now, "prompt": "2"})
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("Memmy resume selection") and "migrate the orders table" in context
    out, _, _ = run_hook(home, argv, {**now, "prompt": "/memmy-resume orders"})
    assert json.loads(out)["decision"] == "block"
    out, _, _ = run_hook(home, argv, {**now, "prompt": "cancel"})
    assert json.loads(out) == {"decision": "block", "reason": "memmy resume cancelled."}
    # The CLI route (the memmy-resume skill for agents without commands) offers the same flow.
    listed = run_cli(home, "--url", daemon.url, "resume", "orders table migration")
    assert listed.exit_code == 0 and "1. " in listed.output and "--pick N" in listed.output
    picked = run_cli(home, "--url", daemon.url, "resume", "orders table migration", "--pick", "1")
    assert picked.output.startswith("Memmy resume selection") and "migrate the orders table" in picked.output
    assert (home / ".codex" / "skills" / "memmy-resume" / "SKILL.md").exists()


def test_service_unit_install_and_uninstall(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(isolated_home / ".config"))
    monkeypatch.setenv("PATH", str(isolated_home / "empty-path"))  # no systemctl: the command must still work
    result = CliRunner().invoke(cli, ["service", "install", "--no-start"], catch_exceptions=False)
    unit = isolated_home / ".config" / "systemd" / "user" / "memmy.service"
    assert result.exit_code == 0 and unit.exists()
    text = unit.read_text()
    assert "/.memmy/bin/memmy-memory' serve" in text or "/.memmy/bin/memmy-memory serve" in text
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text
    assert f"Environment=MEMMY_HOME={isolated_home / '.memmy'}" in text
    removed = CliRunner().invoke(cli, ["service", "uninstall"], catch_exceptions=False)
    assert removed.exit_code == 0 and not unit.exists()


def test_status_shows_agents(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    run_hook(
        home,
        hook_command(home, "claude_code", "UserPromptSubmit"),
        {"session_id": "st", "cwd": str(project), "prompt": "what about the checkout tests?"},
    )
    result = run_cli(home, "--url", daemon.url, "--json", "status")
    agents = {row["agent"]: row for row in json.loads(result.output)["agents"]}
    assert agents["claude_code"]["installed"] is True and agents["claude_code"]["lastRecall"] is not None
    assert agents["cursor"]["installed"] is True and agents["cursor"]["lastCapture"] is None


def test_init_stops_cleanly_on_a_broken_agent_config(isolated_home: Path) -> None:
    settings = isolated_home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"hooks": {')  # the user's file is half edited
    result = run_cli(isolated_home, "init", "--agent", "claude_code")
    assert result.exit_code == 1
    assert f"{settings} is not valid JSON" in result.output and "Traceback" not in result.output
    assert settings.read_text() == '{"hooks": {'  # never overwritten
    assert not (isolated_home / ".memmy" / "config.yaml").exists()  # nothing written before the plan succeeded


def test_cursor_overlapping_generations_pair_by_turn(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    base = {"conversation_id": "conv-x", "workspace_roots": [str(project)], "cursor_version": "2.0.34"}
    for generation, prompt in (("g1", "rename the cart service"), ("g2", "and update the cart docs")):
        run_hook(
            home,
            hook_command(home, "cursor", "beforeSubmitPrompt"),
            {**base, "generation_id": generation, "hook_event_name": "beforeSubmitPrompt", "prompt": prompt},
        )
    for generation, text in (("g1", "Renamed the service."), ("g2", "Docs updated.")):
        run_hook(
            home,
            hook_command(home, "cursor", "afterAgentResponse"),
            {**base, "generation_id": generation, "hook_event_name": "afterAgentResponse", "text": text},
        )
    for generation in ("g1", "g2"):
        run_hook(
            home,
            hook_command(home, "cursor", "stop"),
            {**base, "generation_id": generation, "hook_event_name": "stop", "status": "completed"},
        )
    pairs = set()
    with daemon.client() as client:
        for trace in captured(daemon, "cursor"):
            raw = client.get(f"/api/v1/memory/{trace['id']}").json()["refs"]["rawTurn"]
            pairs.add((raw["userText"], raw["assistantText"]))
    assert pairs == {("rename the cart service", "Renamed the service."), ("and update the cart docs", "Docs updated.")}


def test_hook_reopens_a_session_the_daemon_no_longer_knows(hooked_home: tuple[Daemon, Path, Path]) -> None:
    daemon, home, project = hooked_home
    argv = hook_command(home, "claude_code", "UserPromptSubmit")
    payload = {
        "session_id": "s-forgotten",
        "cwd": str(project),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "why do the webshop checkout tests fail?",
    }
    first_out, _, _ = run_hook(home, argv, payload)
    assert "STRIPE_TEST_MODE" in first_out
    store_execute(home, "DELETE FROM sessions WHERE id LIKE 'claude_code-memory-%'")  # as if the store was replaced
    again, _, code = run_hook(home, argv, payload)  # the hook's "already opened" marker is now stale
    assert code == 0 and "STRIPE_TEST_MODE" in json.loads(again)["hookSpecificOutput"]["additionalContext"]
