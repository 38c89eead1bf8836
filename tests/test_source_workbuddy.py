"""WorkBuddy adapter over a fixture home in the ``~/.workbuddy/projects/<slug>/<s>.jsonl`` + ``.meta.json`` layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from memmy.sources.adapters.workbuddy import ADAPTER, WorkBuddyAdapter, clean_user_text
from tests.agent_homes import fixture_home, scan


def test_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, WorkBuddyAdapter) and ADAPTER.name == "workbuddy"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / ".workbuddy"]
    assert ADAPTER.roots({"HOME": str(tmp_path), "CODEBUDDY_CONFIG_DIR": "/srv/cb"}) == [Path("/srv/cb")]
    both = {"HOME": str(tmp_path), "CODEBUDDY_CONFIG_DIR": "/srv/cb", "WORKBUDDY_CONFIG_DIR": "~/wb"}
    assert ADAPTER.roots(both) == [tmp_path / "wb"]


def test_user_query_extraction() -> None:
    text = "<additional_data>open: a.py</additional_data>\n<user_query>\n fix it \n</user_query><system_reminder>x"
    assert clean_user_text(text + "</system_reminder>") == "fix it"
    assert clean_user_text("<working_memory_reminder>w</working_memory_reminder> plain request") == "plain request"


def test_session_messages_internal_lines_and_tool_trace(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "workbuddy")
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert list(found) == ["conv-legacy", "session-1"]  # files in path order
    conv = found["session-1"]
    repo = str(home / "work" / "repo")
    assert conv.source == "workbuddy" and conv.workspace_path == repo  # from session-1.meta.json
    assert conv.origin == str(home / ".workbuddy" / "projects" / "-work-repo" / "session-1.jsonl")
    assert [(m.message_id, m.role, m.created_at) for m in conv.messages] == [
        ("user-1", "user", "2026-07-16T02:47:38.222Z"),
        ("call-item-1", "tool", "2026-07-16T02:47:40.000Z"),
        ("call-item-2", "tool", "2026-07-16T02:47:42.000Z"),  # numeric-string timestamps
        ("assistant-1", "assistant", "2026-07-16T02:47:44.000Z"),
        ("user-2", "user", "2026-07-16T02:47:49.000Z"),
        ("assistant-2", "assistant", "2026-07-16T02:47:50.000Z"),
    ]
    user, read, run, done, lint, clean = conv.messages
    assert user.content == "fix the failing tests"  # only the <user_query>, reminders and data stripped
    assert lint.content == "now run lint"
    assert (done.content, clean.content) == ("Done: the expected value was wrong; fixed it.", "Lint is clean.")
    assert (read.tool_name, read.tool_call_id, read.tool_error) == ("read_file", "call-1", None)
    assert json.loads(read.tool_input or "") == {"path": "tests/test_a.py"}
    assert read.tool_output == "def test_a():\n    assert add(1, 1) == 3\n"
    assert read.content.startswith("Tool: read_file\n\nCall ID: call-1\n\nInput:\n")
    assert (run.tool_name, run.tool_output, run.tool_error) == ("run_command", None, "1 failed")  # status error
    assert {m.git_root for m in conv.messages} == {repo}

    assert stats.skipped["internal_message"] == 4  # skipRun, isCompactInternal, agent=compact, teammateMessage
    assert stats.skipped["non_message_record"] == 2  # reasoning, file-history-snapshot
    assert stats.skipped["empty_message"] == 1  # assistant-3
    assert stats.skipped["non_object_line"] == 1
    assert stats.files == 2 and stats.messages == 6 + 3 and stats.errors == []


def test_legacy_lines_without_meta_file(tmp_path: Path) -> None:
    conv = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "workbuddy"))})[0]["conv-legacy"]
    assert conv.workspace_path == "/home/u/legacy"  # no .meta.json: the lines' cwd
    assert [(m.message_id, m.role, m.content, m.created_at) for m in conv.messages] == [
        ("m-1", "user", "rename the module", "2026-03-01T09:00:00.000Z"),
        ("m-2", "assistant", "Renamed utils.py to helpers.py.", "2026-03-01T09:00:05.000Z"),
        ("m-3", "assistant", "plain legacy text", "2026-03-01T09:00:06.000Z"),
    ]


def test_config_dir_overrides(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "workbuddy")
    codebuddy = tmp_path / "codebuddy"
    shutil.move(str(home / ".workbuddy"), codebuddy)
    assert scan(ADAPTER, {"HOME": str(home)})[0] == {}
    found = scan(ADAPTER, {"HOME": str(home), "CODEBUDDY_CONFIG_DIR": str(codebuddy)})[0]
    assert set(found) == {"conv-legacy", "session-1"}
    env = {"HOME": str(home), "CODEBUDDY_CONFIG_DIR": str(codebuddy), "WORKBUDDY_CONFIG_DIR": str(tmp_path / "none")}
    assert scan(ADAPTER, env)[0] == {}  # WORKBUDDY_CONFIG_DIR wins
