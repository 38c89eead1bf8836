"""``memmy-memory doctor --canary`` on a HOME where ``init`` installed Claude Code, Codex and Cursor: a marker goes
through each agent's installed hook commands, is stored, recalled through the same hook and removed without a
trace; a broken hook (a missing program, a removed entry) is named with its fix."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner, Result

from memmy.cli.main import cli
from memmy.commands.memory import PurgeCanary
from memmy.commands.turn_requests import CompleteTurn, OpenSession
from memmy.domain import CANARY_PREFIX
from memmy.errors import Conflict, InvalidArgument
from memmy.namespace import Namespace
from memmy.service import MemoryService
from tests.answers import must
from tests.conftest import SUITE_BACKEND, Daemon, home_dsn, home_env
from tests.test_integration_hooks import run_cli, seed

AGENTS = ("claude_code", "codex", "cursor")


@pytest.fixture
def installed(fresh_daemon: Daemon) -> Iterator[Daemon]:
    seed(fresh_daemon.home)
    fresh_daemon.start()
    result = run_cli(fresh_daemon.home, "init", "--agent", ",".join(AGENTS), "--endpoint", fresh_daemon.url)
    assert result.exit_code == 0, result.output
    yield fresh_daemon


def doctor(daemon: Daemon, *extra: str) -> Result:
    env = home_env(daemon.home)
    args = ["--url", daemon.url, "--token", str(daemon.token), *extra, "doctor", "--canary"]
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def traces_left(daemon: Daemon) -> list[str]:
    """Every line of the store's SQL dump and every hook state file that still names a canary."""
    if SUITE_BACKEND == "postgres":  # every row of every table, as text
        with psycopg.connect(home_dsn(daemon.home)) as pg:
            tables = [r[0] for r in pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
            like = f"%{CANARY_PREFIX}%"
            dump = [
                str(r[0])
                for t in tables
                for r in pg.execute(f'SELECT r::text FROM "{t}" r WHERE r::text LIKE %s', (like,))
            ]
    else:
        with sqlite3.connect(daemon.home / ".memmy" / "memory-service" / "memory.sqlite") as conn:
            dump = [line for line in conn.iterdump() if CANARY_PREFIX in line]
    state = daemon.home / ".memmy" / "hooks" / "state"
    files = sorted(state.glob("*")) if state.is_dir() else []
    return dump + [str(p) for p in files if CANARY_PREFIX in p.read_text(errors="replace")]


def test_three_canaries_go_through_and_leave_no_trace(installed: Daemon) -> None:
    result = doctor(installed)
    lines = [line for line in result.output.splitlines() if "canary_" in line]
    assert len(lines) == 3 and all(line.startswith("ok      canary_ok") for line in lines), result.output
    for agent in AGENTS:
        assert any(line.split()[2] == f"{agent}:" for line in lines)
    assert result.exit_code == 0, result.output
    assert traces_left(installed) == []

    as_json = doctor(installed, "--json")
    codes = [f["code"] for f in json.loads(as_json.output)["findings"] if f["code"].startswith("canary")]
    assert codes == ["canary_ok"] * 3, as_json.output
    assert traces_left(installed) == []


def test_a_broken_hook_and_a_removed_entry_are_named_with_their_fix(installed: Daemon) -> None:
    settings = installed.home / ".claude" / "settings.json"
    claude = json.loads(settings.read_text())
    for entry in claude["hooks"]["UserPromptSubmit"]:
        for handler in entry["hooks"]:
            if "memmy-hook" in handler["command"]:  # a host upgrade that lost the launcher the command names
                handler["command"] = handler["command"].replace("/.memmy/bin/", "/.memmy/bin-gone/")
    settings.write_text(json.dumps(claude))
    cursor_file = installed.home / ".cursor" / "hooks.json"
    cursor = json.loads(cursor_file.read_text())
    del cursor["hooks"]["stop"]
    cursor_file.write_text(json.dumps(cursor))

    result = doctor(installed)
    assert result.exit_code == 1
    text = result.output
    assert "canary_failed    claude_code: the UserPromptSubmit hook" in text and "bin-gone/memmy-hook" in text
    assert "fix: memmy-memory init --agent claude_code" in text
    assert f"canary_failed    cursor: no memmy stop hook in {cursor_file} (the entry was removed)" in text
    assert "fix: memmy-memory init --agent cursor" in text
    assert "ok      canary_ok        codex:" in text
    assert traces_left(installed) == []

    repaired = run_cli(installed.home, "init", "--agent", ",".join(AGENTS), "--endpoint", installed.url)
    assert repaired.exit_code == 0, repaired.output
    again = doctor(installed)
    assert again.output.count("canary_ok") == 3, again.output

    hook_json = installed.home / ".memmy" / "hook.json"  # hooks that fail open against another endpoint
    hook_json.write_text(json.dumps({**json.loads(hook_json.read_text()), "endpoint": "http://127.0.0.1:9"}))
    elsewhere = doctor(installed)
    assert elsewhere.exit_code == 1 and elsewhere.output.count("the canary turn was not stored") == 3
    assert traces_left(installed) == []


def test_purge_refuses_anything_but_a_canary_turn(service: MemoryService) -> None:
    ns = Namespace(source="codex")
    session = service.open_session(OpenSession.from_json({"source": "codex"}), ns)["sessionId"]
    body = {"sessionId": session, "query": "which port does the API use?", "answer": "It listens on 8080."}
    kept = must(service.complete_turn(CompleteTurn.from_json(body, "turn-1"), ns)["l1MemoryId"])
    marker = f"{CANARY_PREFIX}0123456789"
    with pytest.raises(Conflict, match="not a canary"):
        service.purge_canary(PurgeCanary.from_json({"marker": marker, "sessionIds": [session]}))
    with pytest.raises(InvalidArgument, match="marker"):
        PurgeCanary.from_json({"marker": "memmy-canary-", "sessionIds": [session]})
    assert service.get_memory(kept)["id"] == kept
