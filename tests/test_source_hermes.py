"""Hermes adapter over a fixture home: ``state.db`` (built from SQL text) and legacy ``sessions/*.jsonl``."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from memmy.sources.adapters.hermes import ADAPTER, HermesAdapter
from tests.agent_homes import fixture_home, scan

FIX = "20260801_101500_ab12cd"
HELLO = "20260802_090000_ef34gh"
LEGACY = "20260730_180000_legacy"


def test_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, HermesAdapter) and ADAPTER.name == "hermes"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / ".hermes"]
    assert ADAPTER.roots({"HOME": str(tmp_path), "HERMES_HOME": "~/profiles/work"}) == [tmp_path / "profiles/work"]


def test_state_db_rows_tool_calls_and_inactive_rows(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "hermes")
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert list(found) == [FIX, HELLO, LEGACY]
    conv = found[FIX]
    repo = str(home / "work" / "repo")
    assert conv.source == "hermes" and conv.workspace_path == repo
    assert conv.origin == f"{home / '.hermes' / 'state.db'}#{FIX}"
    assert [(m.message_id, m.role, m.created_at) for m in conv.messages] == [
        ("1", "user", "2026-08-01T10:15:01.200Z"),
        ("2:0", "tool", "2026-08-01T10:15:02.000Z"),  # row 2 has only tool_calls; row 3 answers it
        ("5", "assistant", "2026-08-01T10:15:05.000Z"),
        ("5:0", "tool", "2026-08-01T10:15:05.000Z"),
        ("5:1", "tool", "2026-08-01T10:15:05.000Z"),  # never answered: no output
        ("7", "assistant", "2026-08-01T10:15:10.000Z"),
    ]
    user, pytest_call, looking, read_a, read_conftest, final = conv.messages
    assert user.content == "fix the tests" and looking.content == "Looking at the test and the fixture."
    assert final.content == "Fixed: the fixture now seeds the RNG. All tests pass."
    assert "Let me delete the failing test." not in [m.content for m in conv.messages]  # active=0
    assert (pytest_call.tool_name, pytest_call.tool_call_id) == ("terminal", "call_1")
    assert json.loads(pytest_call.tool_input or "") == {"command": "pytest -q"}
    assert pytest_call.tool_output == '{"output": "1 failed, 2 passed", "exit_code": 1}'
    assert pytest_call.content.startswith("Tool: terminal\n\nCall ID: call_1\n\nInput:\n")
    assert "Output:\n" in pytest_call.content and pytest_call.tool_error is None
    assert (read_a.tool_call_id, read_a.tool_output) == ("call_2", "def test_a(): ...")
    assert (read_conftest.tool_call_id, read_conftest.tool_output) == ("call_3", None)
    assert {m.git_root for m in conv.messages} == {repo}

    hello = found[HELLO]
    assert [(m.message_id, m.role, m.content) for m in hello.messages] == [
        ("8", "user", "hello"),
        ("10", "assistant", "Hi! How can I help?"),
    ]
    assert hello.workspace_path is None and hello.messages[0].git_root is None

    assert stats.skipped["inactive_row"] == 1
    assert stats.skipped["empty_message"] == 1  # row 9
    assert stats.skipped["unknown_role"] == 1  # row 11
    assert stats.skipped["duplicate_session"] == 1  # the jsonl copy of a state.db session
    assert stats.errors == [] and stats.messages == 6 + 2 + 3


def test_legacy_jsonl_transcript(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "hermes")
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    conv = found[LEGACY]
    assert conv.workspace_path == "/home/u/site"
    assert conv.origin == str(home / ".hermes" / "sessions" / f"{LEGACY}.jsonl")
    assert [(m.message_id, m.role, m.content, m.created_at) for m in conv.messages] == [
        (f"{LEGACY}:2", "user", "deploy the site", "2026-07-30T18:00:00.000Z"),
        (f"{LEGACY}:3:0", "tool", conv.messages[1].content, "2026-07-30T18:00:01.000Z"),
        (f"{LEGACY}:5", "assistant", "Deployed.", "2026-07-30T18:00:15.000Z"),
    ]
    tool = conv.messages[1]
    assert (tool.tool_name, tool.tool_call_id, tool.tool_output) == ("terminal", "call_9", "deployed to production")
    assert stats.skipped["non_message_record"] == 1  # the session_meta line
    assert stats.skipped["truncated_line"] == 1  # the half-written last line


def test_only_legacy_sessions_when_there_is_no_database(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "hermes")
    (home / ".hermes" / "state.db").unlink()
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert set(found) == {FIX, LEGACY}  # the jsonl copy is read when state.db does not hold it
    assert [m.content for m in found[FIX].messages] == ["fix the tests"]
    assert stats.skipped["duplicate_session"] == 0


def test_hermes_home_override_and_broken_database(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "hermes")
    profile = tmp_path / "profile"
    shutil.move(str(home / ".hermes"), profile)
    assert scan(ADAPTER, {"HOME": str(home)})[0] == {}
    assert set(scan(ADAPTER, {"HOME": str(home), "HERMES_HOME": str(profile)})[0]) == {FIX, HELLO, LEGACY}

    (profile / "state.db").write_bytes(b"\0garbage" * 512)
    found, stats = scan(ADAPTER, {"HOME": str(home), "HERMES_HOME": str(profile)})
    assert set(found) == {FIX, LEGACY} and len(stats.errors) == 1

    (profile / "state.db").unlink()
    with sqlite3.connect(profile / "state.db") as conn:
        conn.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
    conn.close()
    found, stats = scan(ADAPTER, {"HOME": str(home), "HERMES_HOME": str(profile)})
    assert stats.skipped["schema_mismatch"] == 1 and set(found) == {FIX, LEGACY}
