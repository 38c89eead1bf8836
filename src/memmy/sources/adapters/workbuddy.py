"""WorkBuddy (Tencent; successor of CodeBuddy) history.

Where: ``$WORKBUDDY_CONFIG_DIR``, else ``$CODEBUDDY_CONFIG_DIR``, else ``~/.workbuddy``; transcripts are
``projects/<cwd-slug>/<session>.jsonl`` with a sibling ``<session>.meta.json`` = ``{"cwd": "/abs"}``.

Lines resemble OpenAI Agents-SDK items (timestamps epoch ms, sometimes as a numeric string)::

    {"type":"message","role":"user","id":"u1","sessionId":"s1","timestamp":1784170058222,
     "content":[{"type":"input_text","text":"<user_query>fix tests</user_query><additional_data>…</additional_data>"}]}
    {"type":"function_call","id":"fc1","callId":"c1","sessionId":"s1","name":"read_file","arguments":"{…}"}
    {"type":"function_call_result","callId":"c1","name":"read_file","status":"completed","output":{"text":"…"}}
    {"type":"message","role":"assistant","id":"a1","sessionId":"s1","content":[{"type":"output_text","text":"Done"}]}

Legacy lines use ``role: human|ai``, ``uuid``, ``conversationId``, ``createdAt``, ``cwd`` and ``message`` as a JSON
string. Internal lines (``providerData.skipRun``, ``isCompactInternal``, ``agent == "compact"``,
``teammateMessage.from``) are skipped as ``internal_message``; ``reasoning``, ``file-history-snapshot`` and other
non-message lines as ``non_message_record``. From user text only the ``<user_query>`` content is kept and
``<additional_data>``, ``<system_reminder>`` and ``<working_memory_reminder>`` blocks are removed. Ids are
``id|uuid|messageId|callId`` (else ``<session>:<line>``); one conversation per ``sessionId|conversationId|threadId``
(else the file name) within a file. :class:`ChatLogReader` is reused by the qwenwork adapter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import Transcript, as_text, env_dir
from memmy.sources.model import Conversation, Role, ScanStats, extract_text, home_of, iter_jsonl, to_iso

ROLES: dict[str, Role] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "model": "assistant",
    "system": "system",
    "developer": "system",
}
TOOL_ROLES = frozenset({"tool", "function"})
CALL_TYPES = frozenset({"function_call", "function_call_input", "tool_call", "custom_tool_call"})
RESULT_TYPES = frozenset({"function_call_result", "function_call_output", "tool_result", "custom_tool_call_output"})
FAILED = frozenset({"error", "failed", "failure"})
_BLOCKS = re.compile(r"<(additional_data|system_reminder|working_memory_reminder)\b[^>]*>.*?</\1\s*>", re.S)
_QUERY = re.compile(r"<user_query\b[^>]*>(.*?)</user_query\s*>", re.S)


def clean_user_text(text: str) -> str:
    """Only the ``<user_query>`` content when present; injected context blocks removed."""
    text = _BLOCKS.sub("", text)
    queries = [q.strip() for q in _QUERY.findall(text)]
    return "\n\n".join(q for q in queries if q) if queries else text.strip()


def deep_text(value: Any) -> str:
    """Text of a value, parsing JSON held in a string first (``{"text": …}`` outputs, legacy messages)."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        return extract_text(parsed) or value
    return extract_text(value)


def is_internal(record: dict[str, Any]) -> bool:
    """Whether a line is WorkBuddy bookkeeping rather than conversation."""
    provider = record.get("providerData")
    for holder in (record, provider if isinstance(provider, dict) else {}):
        teammate = holder.get("teammateMessage")
        if holder.get("skipRun") or holder.get("isCompactInternal") or holder.get("agent") == "compact":
            return True
        if isinstance(teammate, dict) and teammate.get("from"):
            return True
    return False


def first_str(record: Mapping[str, Any], *keys: str) -> str | None:
    """The first non-empty string (or number) among ``keys``."""
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    return None


def meta_cwd(path: Path) -> str | None:
    """``cwd`` from the sibling ``<name>.meta.json`` (``None`` if missing or unreadable)."""
    meta = path.with_name(path.stem + ".meta.json")
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cwd = data.get("cwd") if isinstance(data, dict) else None
    return cwd if isinstance(cwd, str) and cwd else None


class ChatLogReader:
    """Reads one JSONL chat log into conversations keyed by session id (subclassed for qwenwork)."""

    def __init__(self, source: str, path: Path, stats: ScanStats) -> None:
        self.source = source
        self.path = path
        self.stats = stats
        self.workspace = meta_cwd(path)
        self.transcripts: dict[str, Transcript] = {}

    def read(self) -> list[Conversation]:
        """All conversations of the file, in first-seen order."""
        self.stats.files += 1
        for number, record in iter_jsonl(self.path, self.stats):
            self.add(number, record)
        found = (t.conversation(str(self.path)) for t in self.transcripts.values())
        return [c for c in found if c is not None]

    def transcript(self, record: Mapping[str, Any]) -> Transcript:
        """The transcript a record belongs to, created on first use."""
        key = first_str(record, "sessionId", "conversationId", "threadId", "session_id") or self.path.stem
        if key not in self.transcripts:
            cwd = self.workspace or first_str(record, "cwd")
            self.transcripts[key] = Transcript(self.source, key, cwd, self.stats)
        return self.transcripts[key]

    def add(self, number: int, record: dict[str, Any]) -> None:
        """Add one line: a message, a tool call or a tool result; anything else is counted and skipped."""
        if is_internal(record):
            self.stats.skip("internal_message")
            return
        record = self.unwrap_legacy(record)
        kind = record.get("type")
        role = record.get("role")
        transcript = self.transcript(record)
        message_id = first_str(record, "id", "uuid", "messageId", "callId") or f"{transcript.conversation_id}:{number}"
        at = to_iso(record.get("timestamp") or record.get("createdAt") or record.get("created_at"))
        call_id = first_str(record, "callId", "call_id", "toolCallId", "tool_call_id")
        name = first_str(record, "name", "toolName", "tool_name")
        if kind in CALL_TYPES:
            tool_input = as_text(record.get("arguments", record.get("input", record.get("args"))))
            transcript.tool_call(message_id, at, name, call_id, tool_input)
        elif kind in RESULT_TYPES or role in TOOL_ROLES:
            output = deep_text(record.get("output", record.get("result", record.get("content")))) or None
            error = first_str(record, "error")
            if output and record.get("status") in FAILED and error is None:
                output, error = None, output
            transcript.tool_result(message_id, at, name, call_id, output=output, error=error)
        elif isinstance(role, str) and role in ROLES and kind in (None, "message", role):
            text = deep_text(record.get("content", record.get("text")))
            mapped = ROLES[role]
            transcript.text(message_id, mapped, clean_user_text(text) if mapped == "user" else text, at)
        else:
            self.stats.skip("non_message_record")

    @staticmethod
    def unwrap_legacy(record: dict[str, Any]) -> dict[str, Any]:
        """Merge a legacy ``message`` (object or JSON string) into the line; plain strings become ``content``."""
        message = record.get("message")
        if isinstance(message, str):
            try:
                parsed: Any = json.loads(message)
            except json.JSONDecodeError:
                parsed = {"content": message}
            message = parsed if isinstance(parsed, dict) else {"content": parsed}
        if not isinstance(message, dict):
            return record
        merged = {**record, **{k: v for k, v in message.items() if v is not None}}
        merged.pop("message", None)
        for key in ("id", "uuid", "type"):  # the line's identity wins over the inner message's
            if key in record:
                merged[key] = record[key]
        return merged


class WorkBuddyAdapter:
    """Reads WorkBuddy's ``projects/**/*.jsonl`` transcripts."""

    name = "workbuddy"

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """The WorkBuddy config directory."""
        return [env_dir(env, "WORKBUDDY_CONFIG_DIR", "CODEBUDDY_CONFIG_DIR") or home_of(env) / ".workbuddy"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """One conversation per session per file."""
        for root in self.roots(env):
            projects = root / "projects"
            if projects.is_dir():
                for path in sorted(projects.rglob("*.jsonl")):
                    yield from ChatLogReader(self.name, path, stats).read()


ADAPTER = WorkBuddyAdapter()
