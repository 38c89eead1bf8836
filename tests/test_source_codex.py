"""Codex adapter over a fixture ``~/.codex`` holding rollouts of every format era."""

from __future__ import annotations

import json
from pathlib import Path

from memmy.sources.adapters.codex import ADAPTER, CodexAdapter, rollout_id_of
from memmy.sources.model import Conversation, ScanStats
from tests.agent_homes import fixture_home, scan

ENVELOPE = "019dd8e4-15dd-7143-95e8-219014341717"
NEWEST = "019de000-aaaa-7bbb-8ccc-000000000002"
BARE = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
EVENTS_ONLY = "019df111-0000-7000-8000-000000000004"


def _fixture_scan(tmp_path: Path) -> tuple[dict[str, Conversation], ScanStats]:
    """Scan a copy of the Codex fixture home."""
    return scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "codex", repo=False))})


def test_adapter_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, CodexAdapter) and ADAPTER.name == "codex"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [
        tmp_path / ".codex" / "sessions",
        tmp_path / ".codex" / "archived_sessions",
    ]
    assert ADAPTER.roots({"HOME": "/nowhere", "CODEX_HOME": str(tmp_path / "cx")})[0] == tmp_path / "cx" / "sessions"
    assert rollout_id_of(Path(f"rollout-2026-04-29T10-58-39-{ENVELOPE}.jsonl")) == ENVELOPE
    assert rollout_id_of(Path("rollout-odd.jsonl")) == "rollout-odd"


def test_envelope_era_messages_and_tool_pairs(tmp_path: Path) -> None:
    found, _ = _fixture_scan(tmp_path)
    assert set(found) == {ENVELOPE, NEWEST, BARE, EVENTS_ONLY}
    conv = found[ENVELOPE]
    assert conv.source == "codex" and conv.workspace_path == "/home/u/proj"
    assert conv.origin.endswith(f"sessions/2026/04/29/rollout-2026-04-29T10-58-39-{ENVELOPE}.jsonl")
    lines = [(int(m.message_id.rsplit(":", 1)[1]), m.role, m.tool_name) for m in conv.messages]
    assert lines == [
        (2, "system", None),  # developer message
        (3, "system", None),  # injected AGENTS.md instructions
        (4, "system", None),  # injected <environment_context>
        (6, "user", None),
        (10, "tool", "exec_command"),
        (12, "tool", "exec_command"),
        (14, "assistant", None),
        (17, "user", None),
        (18, "tool", "web_search"),
        (19, "tool", "apply_patch"),
        (20, "tool", "apply_patch"),
        (21, "tool", "exec_command"),
        (22, "tool", "exec_command"),
        (25, "assistant", None),
    ]
    assert all(m.message_id.startswith(f"{ENVELOPE}:") and m.conversation_id == ENVELOPE for m in conv.messages)
    by_line = {int(m.message_id.rsplit(":", 1)[1]): m for m in conv.messages}
    assert by_line[6].content == "run the tests"  # the input_image part adds nothing
    assert by_line[14].content == "All 3 tests pass."  # once, though event_msg agent_message repeats it

    call, output = by_line[10], by_line[12]
    assert (call.tool_call_id, call.tool_input, call.tool_output) == ("call_ahWf1", '{"cmd":"pytest -q"}', None)
    assert (output.tool_call_id, output.tool_input) == ("call_ahWf1", None)
    assert output.tool_output == "Process exited with code 0\nOutput:\n3 passed" and output.tool_error is None
    assert call.content == 'Tool: exec_command\n\nCall ID: call_ahWf1\n\nInput:\n{"cmd":"pytest -q"}'

    search = by_line[18]
    assert search.tool_call_id is None
    assert json.loads(search.tool_input or "") == {"type": "search", "query": "vite 7 release notes"}
    assert "Status: completed" in search.content

    patch, patched = by_line[19], by_line[20]
    assert patch.tool_call_id == patched.tool_call_id == "call_patch1"
    assert (patch.tool_input or "").startswith("*** Begin Patch")
    assert json.loads(patched.tool_output or "")["metadata"] == {"exit_code": 0}

    failed = by_line[22]
    assert failed.tool_output is None and failed.tool_error == "npm ERR! network timeout"

    assert [by_line[n].created_at for n in (2, 6, 10, 12, 25)] == [
        "2026-04-29T10:58:39.800Z",
        "2026-04-29T10:58:42.786Z",
        "2026-04-29T10:58:44.100Z",
        "2026-04-29T10:58:45.000Z",
        "2026-04-29T10:59:45.000Z",
    ]
    # turn_context moves the cwd for the messages after it
    assert by_line[14].workspace_path == "/home/u/proj" and by_line[17].workspace_path == "/home/u/proj/web"
    assert all(m.git_root is None for m in conv.messages)


def test_session_id_only_and_content_item_outputs(tmp_path: Path) -> None:
    found, _ = _fixture_scan(tmp_path)
    conv = found[NEWEST]
    assert conv.workspace_path == "/srv/api"
    assert [(m.role, m.tool_name, m.tool_call_id) for m in conv.messages] == [
        ("user", None, None),
        ("tool", "read_file", "call_r1"),
        ("tool", "read_file", "call_r1"),
        ("tool", "tool", "call_lost"),  # an output whose call is not in the file still imports
        ("assistant", None, None),
    ]
    assert conv.messages[2].tool_output == "# API\nA small service."


def test_bare_era_file(tmp_path: Path) -> None:
    found, _ = _fixture_scan(tmp_path)
    conv = found[BARE]
    assert conv.workspace_path == "/home/u/old-proj"  # only known from <environment_context><cwd>
    rows = [(int(m.message_id.rsplit(":", 1)[1]), m.role, m.tool_name, m.tool_call_id) for m in conv.messages]
    assert rows == [
        (3, "system", None, None),
        (4, "system", None, None),
        (5, "user", None, None),
        (8, "tool", "shell", "call_old1"),
        (9, "tool", "shell", "call_old1"),
        (10, "tool", "local_shell", "call_old2"),
        (11, "tool", "local_shell", "call_old2"),
        (12, "assistant", None, None),
    ]
    assert conv.messages[2].content == "what does main.py do?"
    assert json.loads(conv.messages[5].tool_input or "")["command"] == ["python", "main.py"]
    assert conv.messages[6].tool_output == "hi\n"
    # bare items carry no time: every message takes the session start
    assert {m.created_at for m in conv.messages} == {"2025-08-20T09:15:00.123Z"}
    assert all(m.workspace_path == "/home/u/old-proj" for m in conv.messages)


def test_event_only_rollout_and_duplicate_archive(tmp_path: Path) -> None:
    found, stats = _fixture_scan(tmp_path)
    conv = found[EVENTS_ONLY]
    assert "/sessions/2026/03/10/" in conv.origin  # sessions/ wins over the archived copy
    assert [(m.role, m.content, m.created_at) for m in conv.messages] == [
        ("user", "summarise notes.md", "2026-03-10T12:00:05.000Z"),
        ("assistant", "It lists three TODOs.", "2026-03-10T12:00:09.000Z"),
    ]
    assert stats.skipped["duplicate_rollout"] == 1


def test_skips_are_counted(tmp_path: Path) -> None:
    _, stats = _fixture_scan(tmp_path)
    assert stats.files == 4 and stats.messages == 29 and stats.errors == []
    assert stats.skipped == {
        "event_msg": 5,  # user_message/agent_message duplicates, task_started, token_count, task_complete
        "state_record": 3,
        "reasoning": 2,
        "malformed_line": 2,
        "truncated_line": 1,
        "unknown_item": 1,  # ghost_snapshot
        "unknown_record": 1,  # world_state
        "compacted": 1,
        "duplicate_rollout": 1,
    }


def test_codex_home_override_and_git_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    codex_home = tmp_path / "codex-home"
    day = codex_home / "sessions" / "2026" / "06" / "01"
    day.mkdir(parents=True)
    thread = "019e0000-1111-7222-8333-444444444444"
    lines = [
        {"timestamp": "2026-06-01T10:00:00Z", "type": "session_meta", "payload": {"id": thread, "cwd": str(repo)}},
        {
            "timestamp": "2026-06-01T10:00:01Z",
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        },
        {
            "timestamp": "2026-06-01T10:00:02Z",
            "type": "response_item",
            "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]},
        },
    ]
    path = day / f"rollout-2026-06-01T10-00-00-{thread}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    found, stats = scan(ADAPTER, {"HOME": str(tmp_path / "nobody"), "CODEX_HOME": str(codex_home)})
    assert list(found) == [thread]
    [message] = found[thread].messages
    assert (message.message_id, message.created_at) == (f"{thread}:2", "2026-06-01T10:00:01.000Z")
    assert message.workspace_path == str(repo) and message.git_root == str(repo)
    assert stats.skipped == {"empty_message": 1}
