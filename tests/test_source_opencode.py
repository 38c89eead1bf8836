"""OpenCode adapter over a fixture home: ``opencode.db`` (built from SQL text) plus the older ``storage/`` files."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from memmy.sources.adapters.opencode import ADAPTER, OpenCodeAdapter
from tests.agent_homes import fixture_home, scan

DATA = Path(".local") / "share" / "opencode"


def test_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, OpenCodeAdapter) and ADAPTER.name == "opencode"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / DATA]
    assert ADAPTER.roots({"HOME": str(tmp_path), "XDG_DATA_HOME": "/srv/data"}) == [Path("/srv/data/opencode")]


def test_database_session_parts_and_tool_trace(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "opencode")
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert list(found) == ["ses_01JABC", "ses_02SEC", "ses_03FILE"]
    conv = found["ses_01JABC"]
    assert conv.source == "opencode" and conv.workspace_path == "/home/u/proj"
    assert conv.origin == f"{home / DATA / 'opencode.db'}#ses_01JABC"
    rows = [(m.message_id, m.role, m.created_at) for m in conv.messages]
    assert rows == [
        ("msg_01JU", "user", "2026-06-01T09:23:54.748Z"),
        ("msg_01JA", "assistant", "2026-06-01T09:23:54.768Z"),
        ("prt_01JA4", "tool", "2026-06-01T09:23:54.775Z"),  # same time as prt_01JA5: ordered by id
        ("prt_01JA5", "tool", "2026-06-01T09:23:54.775Z"),
        ("msg_01JA:prt_01JA6", "assistant", "2026-06-01T09:23:54.789Z"),
    ]
    user, first, bash, read, final = conv.messages
    assert user.content == "fix the tests"  # the synthetic text and the file part are not user text
    assert first.content == "I'll run them first." and final.content == "Fixed: tests pass."
    assert (bash.tool_name, bash.tool_call_id, bash.tool_output, bash.tool_error) == (
        "bash",
        "toolu_01",
        "1 failed, 2 passed",
        None,
    )
    assert json.loads(bash.tool_input or "") == {"command": "pytest -q", "description": "Run tests"}
    assert bash.content.startswith("Tool: bash\n\nCall ID: toolu_01\n\nStatus: completed\n\nInput:\n")
    assert (read.tool_name, read.tool_output, read.tool_error) == (
        "read",
        None,
        "File not found: /home/u/proj/missing.py",
    )
    assert "Error:\nFile not found" in read.content
    assert all(m.conversation_id == "ses_01JABC" and m.git_root is None for m in conv.messages)

    assert stats.skipped["synthetic_part"] == 1
    assert stats.skipped["unsupported_part"] == 5  # file, step-start, reasoning, step-finish; step-start (files)
    assert stats.skipped["empty_message"] == 1  # msg_01JB holds only blanks
    assert stats.skipped["bad_json"] == 2  # msg_01JX's data and a truncated part file
    assert stats.skipped["duplicate_session"] == 1  # ses_01JABC's pre-migration files
    assert stats.messages == 5 + 2 + 3 and stats.errors == []


def test_seconds_and_milliseconds_are_normalised_and_ordered(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "opencode")
    conv = scan(ADAPTER, {"HOME": str(home)})[0]["ses_02SEC"]
    # msg_02B is stored in seconds (1780306005): by raw number it would sort before msg_02A (ms).
    assert [(m.message_id, m.role, m.content, m.created_at) for m in conv.messages] == [
        ("msg_02A", "user", "what changed?", "2026-06-01T09:26:40.000Z"),
        ("msg_02B", "assistant", "Only README.md changed.", "2026-06-01T09:26:45.000Z"),
    ]
    # session.directory is empty: the assistant's path.cwd is the workspace, and it is a git repository.
    repo = str(home / "work" / "repo")
    assert conv.workspace_path == repo and {m.git_root for m in conv.messages} == {repo}


def test_json_file_storage(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "opencode")
    conv = scan(ADAPTER, {"HOME": str(home)})[0]["ses_03FILE"]
    assert conv.workspace_path == "/home/u/legacy"
    assert conv.origin == str(home / DATA / "storage" / "message" / "ses_03FILE")
    assert [(m.message_id, m.role, m.created_at) for m in conv.messages] == [
        ("msg_03U", "user", "2026-02-02T02:40:00.000Z"),
        ("prt_03A2", "tool", "2026-02-02T02:40:02.000Z"),
        ("msg_03A", "assistant", "2026-02-02T02:40:08.000Z"),  # the text after the tool keeps its own time
    ]
    tool = conv.messages[1]
    assert (tool.tool_name, tool.tool_call_id, tool.tool_output) == ("bash", "call_9", "All checks passed!")
    assert json.loads(tool.tool_input or "") == {"command": "ruff check ."}
    assert conv.messages[2].content == "Lint is clean."


def test_xdg_data_home_override_and_missing_root(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "opencode")
    moved = tmp_path / "xdg"
    shutil.move(str(home / ".local" / "share"), moved)
    assert scan(ADAPTER, {"HOME": str(home)})[0] == {}
    found, _ = scan(ADAPTER, {"HOME": str(home), "XDG_DATA_HOME": str(moved)})
    assert set(found) == {"ses_01JABC", "ses_02SEC", "ses_03FILE"}


def test_unreadable_database_and_foreign_schema_are_counted_not_raised(tmp_path: Path) -> None:
    data = tmp_path / "h" / DATA
    data.mkdir(parents=True)
    (data / "opencode.db").write_bytes(b"this is not a database" * 100)
    found, stats = scan(ADAPTER, {"HOME": str(tmp_path / "h")})
    assert found == {} and len(stats.errors) == 1
    (data / "opencode.db").unlink()
    with sqlite3.connect(data / "opencode.db") as conn:
        conn.execute("CREATE TABLE message (id TEXT, body TEXT)")
    conn.close()
    found, stats = scan(ADAPTER, {"HOME": str(tmp_path / "h")})
    assert found == {} and stats.skipped["schema_mismatch"] == 1 and stats.errors == []
