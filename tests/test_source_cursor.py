"""Cursor adapter over a fixture User directory whose ``state.vscdb`` files are built from SQL at test time."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from memmy.sources.adapters.cursor import ADAPTER, CursorAdapter, cursor_user_dir, uri_to_path, workspace_folder
from memmy.sources.model import EPOCH, ScanStats
from tests.agent_homes import fixture_home, scan

USER = Path(".config") / "Cursor" / "User"
FLAKY = "98251e54-8aed-4515-b2b4-08895453eedd"  # global composer owned by workspace A (headers, mixed createdAt)
WINDOWS = "4f1d3b6a-2c8e-4d7f-9a10-5b6c7d8e9f01"  # global composer owned by workspace B (no createdAt at all)
ORPHAN = "7e3a9c21-5d4b-4e6f-8a7b-1c2d3e4f5a6b"  # bubbles without a composerData row
INLINE = "b8c7d6e5-f4a3-4b2c-9d1e-0f1a2b3c4d5e"  # older build: conversation inline in composerData
OLDEST = "c7c7c7c7-1111-4222-8333-444455556666"  # inline composer in a workspace ItemTable
LEGACY = "tab-legacy-1"  # workbench.panel.aichat chat tab


def bid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


@pytest.fixture
def cursor_home(tmp_path: Path) -> Path:
    return fixture_home(tmp_path, "cursor", repo=False)


def _linux_env(home: Path) -> dict[str, str]:
    """Point the adapter at the fixture's Linux-layout User directory on any platform."""
    return {"HOME": str(home), "MEMMY_CURSOR_USER_DIR": str(home / USER)}


def test_adapter_identity_and_user_dirs(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, CursorAdapter) and ADAPTER.name == "cursor"
    env = {"HOME": str(tmp_path)}
    assert cursor_user_dir(env, "linux") == tmp_path / ".config" / "Cursor" / "User"
    assert cursor_user_dir({**env, "XDG_CONFIG_HOME": "/xdg"}, "linux") == Path("/xdg/Cursor/User")
    assert cursor_user_dir(env, "darwin") == tmp_path / "Library" / "Application Support" / "Cursor" / "User"
    assert cursor_user_dir({**env, "APPDATA": "/appdata"}, "win32") == Path("/appdata/Cursor/User")
    assert cursor_user_dir(env, "win32") == tmp_path / "AppData" / "Roaming" / "Cursor" / "User"
    assert cursor_user_dir({**env, "MEMMY_CURSOR_USER_DIR": "/u"}, "darwin") == Path("/u")
    assert ADAPTER.roots({**env, "MEMMY_CURSOR_USER_DIR": "/u"}) == [Path("/u")]


def test_workspace_uri_decoding(tmp_path: Path) -> None:
    assert uri_to_path("file:///home/u/my%20proj") == "/home/u/my proj"
    assert uri_to_path("file:///c%3A/Users/u/win%20proj") == "c:/Users/u/win proj"
    assert uri_to_path("file://server/share/proj") == "//server/share/proj"
    assert uri_to_path("vscode-remote://ssh-remote%2Bbox/srv/app") == "/srv/app"
    assert uri_to_path("/plain/path") == "/plain/path"
    (tmp_path / "workspace.json").write_text('{"workspace": "file:///home/u/all.code-workspace"}', encoding="utf-8")
    assert workspace_folder(tmp_path / "workspace.json") == "/home/u/all.code-workspace"
    assert workspace_folder(tmp_path / "missing.json") is None


def test_conversations_grouping_and_workspaces(cursor_home: Path) -> None:
    found, stats = scan(ADAPTER, _linux_env(cursor_home))
    assert set(found) == {FLAKY, WINDOWS, ORPHAN, INLINE, OLDEST, LEGACY}
    assert found[FLAKY].workspace_path == "/home/u/my proj"  # global composer, workspace from composer.composerData
    assert found[WINDOWS].workspace_path == "c:/Users/u/win proj"
    assert found[LEGACY].workspace_path == "/home/u/my proj"
    assert found[OLDEST].workspace_path == "c:/Users/u/win proj"
    assert found[ORPHAN].workspace_path is None and found[INLINE].workspace_path is None
    assert found[FLAKY].origin.endswith(f"globalStorage/state.vscdb#{FLAKY}")
    assert found[LEGACY].origin.endswith(f"state.vscdb#{LEGACY}") and "workspaceStorage" in found[LEGACY].origin
    for conv in found.values():
        assert conv.source == "cursor"
        assert all(m.conversation_id == conv.conversation_id and m.source == "cursor" for m in conv.messages)
        assert all(m.workspace_path == conv.workspace_path and m.git_root is None for m in conv.messages)
    assert stats.files == 3 and stats.messages == 15 and stats.errors == []
    assert stats.skipped == {
        "empty_message": 2,  # a thinking-only bubble, an empty legacy bubble
        "missing_bubble": 1,  # a header whose bubble row is gone
        "unreferenced_bubble": 1,  # a stored bubble no header names (an abandoned draft)
        "malformed_value": 1,  # a truncated composerData JSON
        "empty_conversation": 1,
    }


def test_bubbles_order_roles_times_and_tools(cursor_home: Path) -> None:
    found, _ = scan(ADAPTER, _linux_env(cursor_home))
    flaky = found[FLAKY].messages
    assert [(m.message_id, m.role) for m in flaky] == [
        (bid(1), "user"),
        (bid(2), "assistant"),
        (bid(3), "tool"),
        (bid(4), "assistant"),
    ]  # header order, not key or insertion order
    assert flaky[0].content == "fix the flaky test"
    # bid(2) has no createdAt: it takes the previous bubble's time; bid(3) has only timingInfo
    assert [m.created_at for m in flaky] == [
        "2025-12-25T19:35:08.500Z",
        "2025-12-25T19:35:08.500Z",
        "2025-12-25T19:35:30.000Z",
        "2025-12-25T19:36:00.000Z",
    ]
    tool = flaky[2]
    assert (tool.tool_name, tool.tool_call_id) == ("run_terminal_cmd", "toolu_cur1")
    assert json.loads(tool.tool_input or "") == {"command": "pytest -q tests/test_lock.py"}
    assert json.loads(tool.tool_output or "") == {"output": "1 failed"} and tool.tool_error is None
    assert tool.content.startswith("Tool: run_terminal_cmd\n\nCall ID: toolu_cur1\n\nStatus: completed\n\nInput:\n")

    windows = found[WINDOWS].messages
    assert [m.role for m in windows] == ["user", "tool", "assistant"]
    assert {m.created_at for m in windows} == {"2025-12-29T09:20:00.000Z"}  # the composer's createdAt (epoch ms)
    failed = windows[1]
    assert (failed.tool_name, failed.tool_call_id) == ("delete_file", bid(22))
    assert json.loads(failed.tool_input or "") == {"path": "build"}
    assert failed.tool_output is None and failed.tool_error == "permission denied"

    orphan = found[ORPHAN].messages
    assert [(m.role, m.content, m.created_at) for m in orphan] == [
        ("user", "how do I close files?", "2026-01-02T10:00:00.000Z"),
        ("assistant", "Use a context manager.", "2026-01-02T10:00:05.000Z"),
    ]
    assert [(m.message_id, m.role, m.content) for m in found[INLINE].messages] == [
        (bid(41), "user", "rename foo to bar"),
        (bid(42), "assistant", "Renamed in 3 files."),
    ]
    assert [(m.message_id, m.role, m.created_at) for m in found[LEGACY].messages] == [
        ("lb-1", "user", "2024-01-01T10:00:00.000Z"),
        ("lb-2", "assistant", "2024-01-01T10:00:00.000Z"),
    ]
    assert [m.content for m in found[OLDEST].messages] == ["add a README", "Added README.md."]


def test_default_linux_location_and_git_root(tmp_path: Path, cursor_home: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    storage = cursor_home / USER / "workspaceStorage" / "ffff0000"
    storage.mkdir()
    (storage / "workspace.json").write_text(json.dumps({"folder": repo.as_uri()}), encoding="utf-8")
    with closing(sqlite3.connect(storage / "state.vscdb")) as conn:
        conn.execute("CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB)")
        tabs = {"tabs": [{"tabId": "t-git", "bubbles": [{"type": "user", "text": "q"}, {"type": "ai", "text": "a"}]}]}
        conn.execute(
            "INSERT INTO ItemTable VALUES (?, ?)", ("workbench.panel.aichat.view.aichat.chatdata", json.dumps(tabs))
        )
        conn.commit()
    env = {"HOME": str(cursor_home), "XDG_CONFIG_HOME": str(cursor_home / ".config")}
    if cursor_user_dir(env) != cursor_home / USER:  # macOS/Windows: the Linux location is not the default there
        env = _linux_env(cursor_home)
    found, _ = scan(ADAPTER, env)
    conv = found["t-git"]
    assert conv.workspace_path == str(repo) and all(m.git_root == str(repo) for m in conv.messages)
    assert [m.message_id for m in conv.messages] == ["t-git:0", "t-git:1"]
    assert {m.created_at for m in conv.messages} == {EPOCH}  # a tab without any time


def test_locked_database_is_read_through_a_copy(cursor_home: Path) -> None:
    global_db = cursor_home / USER / "globalStorage" / "state.vscdb"
    writer = sqlite3.connect(global_db, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute("INSERT INTO ItemTable VALUES ('pending.write', '1')")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            with closing(sqlite3.connect(f"file:{global_db}?mode=ro", uri=True, timeout=0.1)) as probe:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
        found, stats = scan(ADAPTER, _linux_env(cursor_home))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert stats.errors == []
    assert [m.message_id for m in found[FLAKY].messages] == [bid(1), bid(2), bid(3), bid(4)]
    assert set(found) == {FLAKY, WINDOWS, ORPHAN, INLINE, OLDEST, LEGACY}


def test_no_read_lock_is_held_while_a_conversation_is_handed_out(cursor_home: Path) -> None:
    global_db = cursor_home / USER / "globalStorage" / "state.vscdb"
    stats = ScanStats()
    handed_out = 0
    for conversation in ADAPTER.conversations(_linux_env(cursor_home), stats):
        if "globalStorage" not in conversation.origin:
            continue
        handed_out += 1
        # Cursor must be able to write (an EXCLUSIVE lock needs every reader gone) while the importer works
        with closing(sqlite3.connect(global_db, timeout=0, isolation_level=None)) as writer:
            writer.execute("BEGIN EXCLUSIVE")
            writer.execute("ROLLBACK")
    assert handed_out == 4 and stats.errors == []


def test_unreadable_database_is_an_error_not_a_crash(cursor_home: Path) -> None:
    broken = cursor_home / USER / "workspaceStorage" / "deadbeef"
    broken.mkdir()
    (broken / "state.vscdb").write_bytes(b"this is not a database, just text" * 100)
    found, stats = scan(ADAPTER, _linux_env(cursor_home))
    assert len(stats.errors) == 1 and "deadbeef" in stats.errors[0]
    assert FLAKY in found and stats.files == 3


def test_missing_user_dir_yields_nothing(tmp_path: Path) -> None:
    found, stats = scan(ADAPTER, {"HOME": str(tmp_path), "MEMMY_CURSOR_USER_DIR": str(tmp_path / "none")})
    assert found == {} and stats.files == 0 and stats.errors == []
