"""Claude Code adapter over a fixture home in the real ``~/.claude/projects/<enc-cwd>/<sessionId>.jsonl`` layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from memmy.sources.adapters.claude_code import ADAPTER, ClaudeCodeAdapter, decode_project_slug
from tests.agent_homes import FIXTURES, fixture_home, scan

FIXTURE = FIXTURES / "claude_code" / "home"
SESSION = "2ff46cd5-f4e7-4724-bb20-579dae7956ea"
OTHER = "0b7c9e21-3f4d-4a5b-8c6d-7e8f9a0b1c2d"


def test_adapter_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, ClaudeCodeAdapter) and ADAPTER.name == "claude_code"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / ".claude" / "projects"]
    override = {"HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")}
    assert ADAPTER.roots(override) == [tmp_path / "cfg" / "projects"]


def test_messages_roles_and_tool_trace(tmp_path: Path) -> None:
    found, stats = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "claude_code", repo=False))})
    assert set(found) == {SESSION, OTHER}  # the subagents/ file is not a conversation
    conv = found[SESSION]
    assert conv.source == "claude_code" and conv.workspace_path == "/home/u/proj"
    assert conv.origin.endswith(f"-home-u-proj/{SESSION}.jsonl")
    rows = [(m.message_id, m.role, m.content) for m in conv.messages]
    assert [r[:2] for r in rows] == [
        ("4d2196f2-bd5f-45fd-9777-83d22fabe49d", "user"),
        ("a1111111-0000-4000-8000-000000000001", "tool"),
        ("c2222222-0000-4000-8000-000000000002", "tool"),
        ("a3333333-0000-4000-8000-000000000003", "assistant"),
        ("77777777-0000-4000-8000-000000000007", "user"),
        ("78787878-0000-4000-8000-000000000078", "system"),
        ("44444444-0000-4000-8000-000000000004", "user"),
        ("a5555555-0000-4000-8000-000000000005", "assistant"),
        ("a5555555-0000-4000-8000-000000000005:1", "tool"),
        ("c6666666-0000-4000-8000-000000000006", "tool"),
        ("a8888888-0000-4000-8000-000000000008", "assistant"),
    ]
    assert rows[0][2] == "list the projects"
    assert rows[3][2] == "Two projects: a and b."
    assert rows[4][2].startswith("<command-name>/clear</command-name>")  # a slash command is what the user typed
    assert rows[5][2] == "<local-command-stdout></local-command-stdout>"  # its output: system, joins that turn
    assert rows[6][2] == "now run the tests"  # string and block content alike; the image block adds nothing
    assert rows[7][2] == "Running them."

    call, result = conv.messages[1], conv.messages[2]
    assert (call.tool_name, call.tool_call_id) == ("Bash", "toolu_01A")
    assert json.loads(call.tool_input or "") == {"command": "ls", "description": "List files"}
    assert call.tool_output is None and call.tool_error is None
    assert call.content.startswith("Tool: Bash\n\nCall ID: toolu_01A\n\nInput:\n")
    assert (result.tool_name, result.tool_call_id, result.tool_output, result.tool_error) == (
        "Bash",
        "toolu_01A",
        "a b",
        None,
    )
    assert result.tool_input is None and "Output:\na b" in result.content

    failed = conv.messages[9]
    assert (failed.tool_name, failed.tool_call_id) == ("Bash", "toolu_02B")
    assert failed.tool_output is None and failed.tool_error == "1 failed, 2 passed"
    assert "Error:\n1 failed, 2 passed" in failed.content
    assert json.loads(conv.messages[8].tool_input or "") == {"command": "pytest -q"}

    assert [m.created_at for m in conv.messages[:4]] == [
        "2026-03-01T22:38:47.557Z",
        "2026-03-01T22:38:52.000Z",
        "2026-03-01T22:38:53.000Z",
        "2026-03-01T22:38:57.000Z",
    ]
    assert conv.last_created_at == "2026-03-01T22:40:12.000Z"
    assert all(m.conversation_id == SESSION and m.source == "claude_code" for m in conv.messages)
    assert all(m.workspace_path == "/home/u/proj" and m.git_root is None for m in conv.messages)


def test_skips_are_counted(tmp_path: Path) -> None:
    _, stats = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "claude_code", repo=False))})
    assert stats.files == 2
    assert stats.messages == 13
    assert stats.errors == []
    assert stats.skipped == {
        "thinking_only": 1,
        "non_message_record": 4,  # two summaries, a file-history-snapshot, a queue-operation
        "sidechain": 1,
        "meta": 1,
        "duplicate_uuid": 1,
        "empty_message": 1,
        "truncated_line": 1,
    }


def test_missing_cwd_falls_back_to_the_project_slug(tmp_path: Path) -> None:
    found, _ = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "claude_code", repo=False))})
    conv = found[OTHER]
    assert conv.workspace_path == "/home/u/other/repo" == decode_project_slug("-home-u-other-repo")
    assert [(m.role, m.content) for m in conv.messages] == [
        ("user", "hello"),
        ("assistant", "Hi! What shall we build?"),
    ]
    # +02:00 is normalised to UTC; a line without a timestamp takes the previous line's time
    assert [m.created_at for m in conv.messages] == ["2025-06-30T21:59:59.900Z", "2025-06-30T21:59:59.900Z"]
    assert all(m.workspace_path == "/home/u/other/repo" for m in conv.messages)


def test_claude_config_dir_override_and_git_root(tmp_path: Path) -> None:
    config = tmp_path / "claude-config"
    shutil.copytree(FIXTURE / ".claude", config)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    line = {
        "type": "user",
        "uuid": "f0000000-0000-4000-8000-00000000000f",
        "sessionId": "s-git",
        "cwd": str(repo / "pkg"),
        "timestamp": 1767225600000,
        "isSidechain": False,
        "message": {"role": "user", "content": "where am I?"},
    }
    project = config / "projects" / str(repo / "pkg").replace("/", "-")
    project.mkdir()
    (project / "s-git.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    empty_home = tmp_path / "empty-home"
    empty_home.mkdir()

    found, stats = scan(ADAPTER, {"HOME": str(empty_home), "CLAUDE_CONFIG_DIR": str(config)})
    assert set(found) == {SESSION, OTHER, "s-git"}
    message = found["s-git"].messages[0]
    assert message.workspace_path == str(repo / "pkg") and message.git_root == str(repo)
    assert message.created_at == "2026-01-01T00:00:00.000Z"
    assert stats.files == 3


def test_missing_root_yields_nothing(tmp_path: Path) -> None:
    found, stats = scan(ADAPTER, {"HOME": str(tmp_path / "nobody")})
    assert found == {} and stats.files == 0 and stats.errors == []
