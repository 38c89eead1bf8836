"""Pi adapter over a fixture home in the real ``~/.pi/agent/sessions/--<cwd>--/<ts>_<uuid>.jsonl`` layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from memmy.sources.adapters.pi import ADAPTER, PiAdapter, cwd_from_dir_name
from tests.agent_homes import fixture_home, scan

TREE = "019f94e7-a627-75fa-8509-c8d85654e609"
LINEAR = "5c6d7e8f-0000-4000-8000-00000000a001"


def test_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, PiAdapter) and ADAPTER.name == "pi"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / ".pi" / "agent" / "sessions"]
    agent_dir = {"HOME": str(tmp_path), "PI_CODING_AGENT_DIR": "~/pi-agent"}
    assert ADAPTER.roots(agent_dir) == [tmp_path / "pi-agent" / "sessions"]
    both = {**agent_dir, "PI_CODING_AGENT_SESSION_DIR": "/srv/pi-sessions"}
    assert ADAPTER.roots(both) == [Path("/srv/pi-sessions")]
    assert cwd_from_dir_name("--home-u-proj--") == "/home/u/proj" and cwd_from_dir_name("misc") is None


def test_current_branch_messages_and_tool_trace(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "pi")
    found, stats = scan(ADAPTER, {"HOME": str(home)})
    assert set(found) == {TREE, LINEAR}
    conv = found[TREE]
    repo = str(home / "work" / "repo")
    assert conv.source == "pi" and conv.workspace_path == repo
    assert conv.origin.endswith(f"--work-repo--/2026-07-24T16-13-57-159Z_{TREE}.jsonl")
    rows = [(m.message_id.removeprefix(f"{TREE}:"), m.role, m.created_at) for m in conv.messages]
    assert rows == [
        ("a1b2c3d4", "user", "2026-07-24T16:14:01.000Z"),
        ("b2c3d4e5", "assistant", "2026-07-24T16:14:02.000Z"),
        ("b2c3d4e5:toolu_01", "tool", "2026-07-24T16:14:02.000Z"),
        ("b2c3d4e5:toolu_02", "tool", "2026-07-24T16:14:02.000Z"),
        ("d4e5f6a7", "assistant", "2026-07-24T16:14:04.000Z"),
        # the abandoned branch (e5f6a7b8, f6a7b8c9) is not on the path from the last entry
        ("2c3d4e5f", "user", "2026-07-24T16:16:10.000Z"),
        ("1b2c3d4e", "tool", "2026-07-24T16:16:05.000Z"),  # a user-run `!git status`: joins the next prompt
        ("5f6a7b8c:toolu_03", "tool", "2026-07-24T16:16:20.000Z"),
        ("5f6a7b8c", "assistant", "2026-07-24T16:16:20.000Z"),
    ]
    texts = {m.message_id.removeprefix(f"{TREE}:"): m.content for m in conv.messages if m.role != "tool"}
    assert texts == {
        "a1b2c3d4": "run the tests",  # the image part adds nothing
        "b2c3d4e5": "Running the suite.",  # thinking dropped
        "d4e5f6a7": "Run `pytest -q`; 3 tests pass.",
        "2c3d4e5f": "commit it",
        "5f6a7b8c": "Committed as abc123.",
    }
    bash, read = conv.messages[2], conv.messages[3]
    assert (bash.tool_name, bash.tool_call_id, bash.tool_output, bash.tool_error) == (
        "bash",
        "toolu_01",
        "3 passed",
        None,
    )
    assert json.loads(bash.tool_input or "") == {"command": "pytest -q"}
    assert bash.content == 'Tool: bash\n\nCall ID: toolu_01\n\nInput:\n{"command": "pytest -q"}\n\nOutput:\n3 passed'
    assert (read.tool_name, read.tool_output, read.tool_error) == ("read", None, "ENOENT: no such file or directory")
    shell = conv.messages[6]
    assert (shell.tool_name, shell.tool_input, shell.tool_output) == (
        "bash",
        "git status --short",
        " M tests/test_a.py\n",
    )
    commit = conv.messages[7]
    assert commit.tool_call_id == "toolu_03" and commit.tool_output is None and commit.tool_error is None
    assert {m.git_root for m in conv.messages} == {repo}
    assert all(m.conversation_id == TREE and m.source == "pi" for m in conv.messages)

    assert stats.skipped["off_branch"] == 2
    assert stats.skipped["non_message_entry"] == 4  # model_change, thinking_level_change, branch_summary, label
    assert stats.skipped["custom_message"] == 2  # an extension's custom_message entry and a custom-role message
    assert stats.skipped["empty_message"] == 1  # the aborted assistant reply
    assert stats.skipped["truncated_line"] == 1  # the half-written last line


def test_linear_v1_session_without_ids_or_cwd(tmp_path: Path) -> None:
    found, stats = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "pi"))})
    conv = found[LINEAR]
    assert conv.workspace_path == "/home/u/other"  # decoded from the directory name
    assert [(m.message_id, m.role, m.content, m.created_at) for m in conv.messages] == [
        (f"{LINEAR}:line1", "user", "what is in this folder?", "2025-11-02T08:00:01.000Z"),
        (f"{LINEAR}:line2", "assistant", "Two files: a.txt and b.txt.", "2025-11-02T08:00:03.000Z"),
    ]
    assert stats.skipped["unknown_type"] == 1 and stats.skipped["malformed_line"] == 1
    assert stats.files == 2 and stats.messages == 9 + 2 and stats.errors == []


def test_session_dir_override(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "pi")
    moved = tmp_path / "elsewhere"
    shutil.move(str(home / ".pi" / "agent" / "sessions"), moved)
    assert scan(ADAPTER, {"HOME": str(home)})[0] == {}
    assert set(scan(ADAPTER, {"HOME": str(home), "PI_CODING_AGENT_SESSION_DIR": str(moved)})[0]) == {TREE, LINEAR}


def test_shell_command_waits_for_the_prompt_it_informs(tmp_path: Path) -> None:
    session = tmp_path / "h" / ".pi" / "agent" / "sessions" / "--tmp--" / "2026-01-01T00-00-00-000Z_s1.jsonl"
    session.parent.mkdir(parents=True)
    lines = [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/tmp"},
        {"type": "message", "id": "u1", "parentId": None, "message": {"role": "user", "content": "hi", "timestamp": 1}},
        {
            "type": "message",
            "id": "a1",
            "parentId": "u1",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "timestamp": 2},
        },
        {
            "type": "message",
            "id": "b1",
            "parentId": "a1",
            "message": {"role": "bashExecution", "command": "make", "output": "boom", "exitCode": 2, "timestamp": 3},
        },
    ]
    session.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    found, stats = scan(ADAPTER, {"HOME": str(tmp_path / "h")})
    assert [m.message_id for m in found["s1"].messages] == ["s1:u1", "s1:a1"]  # the answer still ends its turn
    assert stats.skipped["shell_without_prompt"] == 1

    lines.append({"type": "message", "id": "u2", "parentId": "b1", "message": {"role": "user", "content": "fix it"}})
    session.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    conv = scan(ADAPTER, {"HOME": str(tmp_path / "h")})[0]["s1"]
    assert [m.message_id for m in conv.messages] == ["s1:u1", "s1:a1", "s1:u2", "s1:b1"]
    shell = conv.messages[3]
    assert (shell.tool_name, shell.tool_input, shell.tool_output, shell.tool_error) == (
        "bash",
        "make",
        "boom",
        "exit code 2",
    )
