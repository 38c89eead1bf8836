"""Codex rollout records → messages (the format is described in ``memmy.sources.adapters.codex``).

One message per line, id ``<rolloutId>:<lineNo>``. Standard library only (the hook reads live rollouts with it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.transcripts.model import EPOCH, Role, ScanStats, SourceMessage, extract_text, to_iso, tool_content

SOURCE = "codex"
_UUID_TAIL = re.compile(r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")
_CWD_TAG = re.compile(r"<cwd>\s*(.*?)\s*</cwd>", re.DOTALL)
_INJECTED_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
    "<turn_aborted>",
)
_SKIPPED_RECORDS = {"compacted": "compacted", "event_msg": "event_msg"}
_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def rollout_id_of(path: Path) -> str:
    """The thread UUID at the end of ``rollout-<ts>-<uuid>.jsonl`` (the file stem when there is none)."""
    match = _UUID_TAIL.search(path.stem)
    return match.group(1) if match else path.stem


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass
class Rollout:
    """Parsing state of one rollout file."""

    rollout_id: str
    conversation_id: str | None = None
    cwd: str | None = None
    first_cwd: str | None = None
    when: str = EPOCH
    tool_names: dict[str, str] = field(default_factory=dict)
    messages: list[tuple[bool, SourceMessage]] = field(default_factory=list)  # (from event_msg, message)
    has_message_items: bool = False

    def set_cwd(self, cwd: Any) -> None:
        if isinstance(cwd, str) and cwd:
            self.cwd = cwd
            self.first_cwd = self.first_cwd or cwd

    def add(self, line: int, role: Role, content: str, from_event: bool = False, **tool: str | None) -> None:
        message = SourceMessage(
            message_id=f"{self.rollout_id}:{line}",
            conversation_id=self.conversation_id or self.rollout_id,
            role=role,
            content=content,
            created_at=self.when,
            source=SOURCE,
            workspace_path=self.cwd,
            **tool,
        )
        self.messages.append((from_event, message))


def read_rollout(rollout_id: str, records: Iterable[tuple[int, dict[str, Any]]], stats: ScanStats) -> Rollout:
    """Parse ``(line number, record)`` pairs of one rollout (a whole file, or line 1 plus the tail of a live one)."""
    state = Rollout(rollout_id)
    for line, record in records:
        payload = record.get("payload")
        if "type" in record and isinstance(payload, dict):
            kind, item = str(record["type"]), payload
        elif "record_type" in record:
            stats.skip("state_record")
            continue
        elif "type" not in record and ("id" in record or "session_id" in record):
            kind, item = "session_meta", record
        else:
            kind, item = "response_item", record
        when = to_iso(record.get("timestamp"))
        if when != EPOCH:
            state.when = when
        _dispatch(state, line, kind, item, stats)
    return state


def _dispatch(state: Rollout, line: int, kind: str, item: dict[str, Any], stats: ScanStats) -> None:
    if kind == "session_meta":
        if state.conversation_id is None:
            ident = item.get("id") or item.get("session_id")
            state.conversation_id = str(ident) if ident else None
            if state.when == EPOCH:
                state.when = to_iso(item.get("timestamp"))
        if state.first_cwd is None:
            state.set_cwd(item.get("cwd"))
    elif kind == "turn_context":
        state.set_cwd(item.get("cwd"))
    elif kind == "response_item":
        _response_item(state, line, item, stats)
    elif kind == "event_msg" and item.get("type") in ("user_message", "agent_message"):
        text = item.get("message")
        if isinstance(text, str) and text.strip():
            state.add(line, "user" if item["type"] == "user_message" else "assistant", text, from_event=True)
        else:
            stats.skip("empty_message")
    else:
        stats.skip(_SKIPPED_RECORDS.get(kind, "unknown_record"))


def _response_item(state: Rollout, line: int, item: dict[str, Any], stats: ScanStats) -> None:
    itype = item.get("type")
    if itype == "message":
        state.has_message_items = True
        _message(state, line, item, stats)
    elif itype in _CALLS:
        _call(state, line, item)
    elif itype in _OUTPUTS:
        _output(state, line, item)
    else:
        stats.skip("reasoning" if itype == "reasoning" else "unknown_item")


def _message(state: Rollout, line: int, item: dict[str, Any], stats: ScanStats) -> None:
    text = extract_text(item.get("content"))
    if not text.strip():
        stats.skip("empty_message")
        return
    role: Role
    source_role = item.get("role")
    if source_role == "user":
        injected = text.lstrip().startswith(_INJECTED_PREFIXES)
        if injected and state.first_cwd is None and (match := _CWD_TAG.search(text)):
            state.set_cwd(match.group(1))
        role = "system" if injected else "user"
    elif source_role == "assistant":
        role = "assistant"
    elif source_role in ("developer", "system"):
        role = "system"
    else:
        stats.skip("unknown_role")
        return
    state.add(line, role, text)


def _call(state: Rollout, line: int, item: dict[str, Any]) -> None:
    itype = item.get("type")
    call_id = item.get("call_id") or item.get("id")
    call_id = str(call_id) if call_id else None
    if itype == "function_call":
        name, tool_input = str(item.get("name") or "tool"), _text_of(item.get("arguments", ""))
    elif itype == "custom_tool_call":
        name, tool_input = str(item.get("name") or "tool"), _text_of(item.get("input", ""))
    elif itype == "local_shell_call":
        name, tool_input = "local_shell", _text_of(item.get("action", {}))
    else:
        name, tool_input = "web_search", _text_of(item.get("action", {}))
    if call_id:
        state.tool_names[call_id] = name
    status = item.get("status")
    content = tool_content(name, call_id, tool_input, status=status if isinstance(status, str) else None)
    state.add(line, "tool", content, tool_name=name, tool_call_id=call_id, tool_input=tool_input)


def _output(state: Rollout, line: int, item: dict[str, Any]) -> None:
    call_id = str(item["call_id"]) if item.get("call_id") else None
    name = state.tool_names.get(call_id or "", "tool")
    raw = item.get("output")
    failed = False
    if isinstance(raw, dict):  # older serialisation: {"content": "...", "success": false}
        failed = raw.get("success") is False
        text = extract_text(raw.get("content")) if "content" in raw else _text_of(raw)
    elif isinstance(raw, list):  # content items: [{"type":"input_text","text":...}, {"type":"input_image",...}]
        text = extract_text(raw)
    else:
        text = "" if raw is None else str(raw)
    output, error = (None, text) if failed else (text, None)
    content = tool_content(name, call_id, output=output, error=error)
    state.add(line, "tool", content, tool_name=name, tool_call_id=call_id, tool_output=output, tool_error=error)


def rollout_messages(state: Rollout, stats: ScanStats) -> list[SourceMessage]:
    """The rollout's messages: its ``message`` items, or its ``event_msg`` messages when it has no items at all."""
    use_events = not state.has_message_items
    kept: list[SourceMessage] = []
    for from_event, message in state.messages:
        if from_event and not use_events:
            stats.skip("event_msg")
            continue
        kept.append(message)
    return kept
