"""qwenwork adapter over a fixture home with both ``~/.qwenwork`` and ``~/.qwenworkcn`` (format assumed, see module)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from memmy.sources.adapters.qwenwork import ADAPTER, QwenWorkAdapter
from tests.agent_homes import fixture_home, scan

QWEN = "4f9c2a10-0000-4000-8000-0000000000aa"
CN = "session-cn"


def test_identity_and_roots(tmp_path: Path) -> None:
    assert isinstance(ADAPTER, QwenWorkAdapter) and ADAPTER.name == "qwenwork"
    assert ADAPTER.roots({"HOME": str(tmp_path)}) == [tmp_path / ".qwenwork", tmp_path / ".qwenworkcn"]
    assert ADAPTER.roots({"HOME": str(tmp_path), "MEMMY_QWENWORK_HOME": "/srv/qw"}) == [Path("/srv/qw")]


def test_both_homes_are_read(tmp_path: Path) -> None:
    found, stats = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "qwenwork"))})
    assert list(found) == [QWEN, CN]
    assert {c.source for c in found.values()} == {"qwenwork"}
    assert stats.files == 2 and stats.messages == 5 + 5 and stats.errors == []
    assert stats.skipped["non_message_record"] == 2  # a Qwen Code system record, a usage line


def test_qwen_code_chat_records(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "qwenwork")
    conv = scan(ADAPTER, {"HOME": str(home)})[0][QWEN]
    repo = str(home / "work" / "repo")
    assert conv.workspace_path == repo and {m.git_root for m in conv.messages} == {repo}
    assert conv.origin.endswith(f".qwenwork/projects/-work-repo/chats/{QWEN}.jsonl")
    assert [(m.message_id, m.role, m.created_at) for m in conv.messages] == [
        ("q-u1", "user", "2026-08-01T10:00:00.000Z"),
        ("q-a1", "assistant", "2026-08-01T10:00:02.000Z"),
        ("q-a1:0", "tool", "2026-08-01T10:00:02.000Z"),
        ("q-a2:0", "tool", "2026-08-01T10:00:05.000Z"),
        ("q-a3", "assistant", "2026-08-01T10:00:08.000Z"),
    ]
    user, looking, glob, read, answer = conv.messages
    assert (user.content, looking.content) == ("list the python files", "Let me look.")  # thought part dropped
    assert answer.content == "Two files: app.py and tests/test_app.py."
    assert (glob.tool_name, glob.tool_call_id, glob.tool_output, glob.tool_error) == (
        "glob",
        "call_g1",
        "app.py\ntests/test_app.py",
        None,
    )
    assert json.loads(glob.tool_input or "") == {"pattern": "**/*.py"}
    assert (read.tool_name, read.tool_output, read.tool_error) == ("read_file", None, "File not found: /nope.py")
    assert "Error:\nFile not found: /nope.py" in read.content


def test_workbuddy_style_records_in_the_cn_home(tmp_path: Path) -> None:
    conv = scan(ADAPTER, {"HOME": str(fixture_home(tmp_path, "qwenwork"))})[0][CN]
    assert conv.workspace_path == "/home/u/cn-docs"  # session-cn.meta.json
    assert [(m.message_id, m.role, m.content) for m in conv.messages] == [
        ("cn-u1", "user", "把这份周报整理成表格"),
        ("cn-c1", "tool", conv.messages[1].content),
        ("cn-a1", "assistant", "已整理成表格。"),
        ("cn-u2", "user", "谢谢"),
        ("cn-a2", "assistant", "不客气。"),
    ]
    tool = conv.messages[1]
    assert (tool.tool_name, tool.tool_call_id, tool.tool_output) == ("read_document", "fc-1", "本周完成三项任务。")
    assert json.loads(tool.tool_input or "") == {"path": "周报.docx"}
    assert conv.messages[0].created_at == "2026-08-01T10:00:00.000Z"
    assert conv.messages[3].created_at == "2026-08-01T10:01:40.000Z"


def test_home_override(tmp_path: Path) -> None:
    home = fixture_home(tmp_path, "qwenwork")
    custom = tmp_path / "qw"
    shutil.move(str(home / ".qwenworkcn"), custom)
    assert set(scan(ADAPTER, {"HOME": str(home)})[0]) == {QWEN}
    assert set(scan(ADAPTER, {"HOME": str(home), "MEMMY_QWENWORK_HOME": str(custom)})[0]) == {CN}
