"""OpenClaw adapter over a fixture state dir: per-agent SQLite transcripts (built from SQL text) and session JSONL."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from memmy.sources.adapters.openclaw import ADAPTER, OpenClawAdapter
from tests.agent_homes import fixture_home, scan

LIVE = "9a1f2b3c-0000-4000-8000-000000000001"
CHANNEL = "7d8e9f00-0000-4000-8000-000000000002"
TOPIC = f"{CHANNEL}-topic-42"
ARCHIVED = "5e5e5e5e-0000-4000-8000-000000000005"
LEGACY = "b1b2b3b4-0000-4000-8000-000000000003"


def test_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, OpenClawAdapter) and ADAPTER.name == "openclaw"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / ".openclaw"]
    assert ADAPTER.roots({"HOME": str(tmp_path), "OPENCLAW_STATE_DIR": "/srv/claw"}) == [Path("/srv/claw")]


def test_sqlite_transcript_events(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "openclaw")
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert list(found) == [LIVE, TOPIC, CHANNEL, ARCHIVED, LEGACY]  # database first, then files
    conv = found[LIVE]
    repo = str(home / "work" / "repo")
    assert conv.source == "openclaw" and conv.workspace_path == repo
    assert conv.origin == f"{home / '.openclaw/agents/main/agent/openclaw-agent.sqlite'}#{LIVE}"
    assert [(m.message_id.removeprefix(f"{LIVE}:"), m.role, m.created_at) for m in conv.messages] == [
        ("b0000002", "user", "2025-09-08T10:00:05.000Z"),
        ("c0000003", "assistant", "2025-09-08T10:00:10.000Z"),
        ("c0000003:call_w1", "tool", "2025-09-08T10:00:10.000Z"),
        ("e0000005", "assistant", "2025-09-08T10:00:20.000Z"),
    ]
    user, checking, fetch, answer = conv.messages
    assert user.content == "[Telegram Ann] what is the weather in Berlin?"
    assert (checking.content, answer.content) == ("Checking the weather service.", "Berlin: sunny, 21 °C.")
    assert (fetch.tool_name, fetch.tool_call_id, fetch.tool_output) == ("web_fetch", "call_w1", "Berlin: ☀️ +21°C")
    assert json.loads(fetch.tool_input or "") == {"url": "https://wttr.in/Berlin?format=3"}
    assert "Output:\nBerlin: ☀️ +21°C" in fetch.content
    assert {m.git_root for m in conv.messages} == {repo}
    assert stats.skipped["bad_json"] == 1  # the half-written event row
    assert stats.skipped["non_message_entry"] == 1  # model_change
    assert stats.skipped["duplicate_session"] == 1  # the live session's pre-migration jsonl
    assert stats.errors == []


def test_session_jsonl_files_topics_archive_and_legacy_dir(tmp_path: Path) -> None:
    found, _ = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "openclaw"))})
    assert [(m.message_id, m.role, m.content) for m in found[CHANNEL].messages] == [
        (f"{CHANNEL}:11111111", "user", "summarise AGENTS.md"),
        (f"{CHANNEL}:22222222", "assistant", "It tells me to keep MEMORY.md up to date."),
    ]
    assert found[CHANNEL].workspace_path == "/home/u/.openclaw/workspace"
    assert found[CHANNEL].messages[1].created_at == "2025-09-04T15:35:04.000Z"
    # a topic transcript shares the session header id but is its own conversation (named by its file)
    assert [m.content for m in found[TOPIC].messages] == ["thread question", "thread answer"]
    assert found[TOPIC].messages[0].message_id == f"{TOPIC}:33333333"
    assert [m.content for m in found[ARCHIVED].messages] == ["old question", "old answer"]
    assert [m.content for m in found[LEGACY].messages] == ["legacy hello", "legacy hi"]
    assert found[LEGACY].workspace_path == "/home/u/clawd"
    assert all("deleted question" not in m.content for c in found.values() for m in c.messages)  # *.deleted.*


def test_files_are_read_when_there_is_no_database(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "openclaw")
    (home / ".openclaw/agents/main/agent/openclaw-agent.sqlite").unlink()
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert [m.content for m in found[LIVE].messages] == ["[Telegram Ann] what is the weather in Berlin?"]
    assert found[LIVE].workspace_path == "/home/u/.openclaw/workspace"
    assert stats.skipped["duplicate_session"] == 0


def test_state_dir_override_and_unusable_databases(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "openclaw")
    state = tmp_path / "state"
    shutil.move(str(home / ".openclaw"), state)
    assert scan(ADAPTER, {"HOME": str(home)})[0] == {}
    env = {"HOME": str(home), "OPENCLAW_STATE_DIR": str(state)}
    assert set(scan(ADAPTER, env)[0]) == {LIVE, TOPIC, CHANNEL, ARCHIVED, LEGACY}

    db = state / "agents/main/agent/openclaw-agent.sqlite"
    db.write_bytes(b"not sqlite" * 300)
    found, stats = scan(ADAPTER, env)
    assert len(stats.errors) == 1 and LIVE in found  # falls back to the jsonl copy

    db.unlink()
    with sqlite3.connect(db) as conn:  # an older store without transcript tables
        conn.execute("CREATE TABLE auth_profile_store (store_key TEXT PRIMARY KEY, store_json TEXT)")
    conn.close()
    found, stats = scan(ADAPTER, env)
    assert stats.skipped["schema_mismatch"] == 1 and stats.errors == [] and LIVE in found
