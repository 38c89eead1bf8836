"""Codex CLI rollouts: ``$CODEX_HOME|~/.codex`` + ``{sessions,archived_sessions}/**/rollout-*-<uuid>.jsonl``.

Since Sept 2025 every line is an envelope ``{"timestamp","type","payload"}`` with ``type`` one of ``session_meta``
(``id`` or ``session_id``, ``cwd``), ``turn_context`` (``cwd``), ``response_item`` (the model-visible history),
``event_msg`` (UI events that duplicate the messages), ``compacted``, ...::

    {"timestamp":"2026-04-29T10:58:39.740Z","type":"session_meta","payload":{"id":"019dd8e4-...","cwd":"/home/u/p"}}
    {"timestamp":"...","type":"response_item","payload":{"type":"message","role":"user",
     "content":[{"type":"input_text","text":"run the tests"}]}}
    {"timestamp":"...","type":"response_item","payload":{"type":"function_call","name":"exec_command",
     "arguments":"{\\"cmd\\":\\"pytest -q\\"}","call_id":"call_1"}}
    {"timestamp":"...","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1",
     "output":"3 passed"}}

Older "bare" rollouts have no envelope: line 1 is ``{"id","timestamp","instructions","git"}``, items are bare
``{"type":"message",...}`` lines without times, ``{"record_type":"state"}`` lines are bookkeeping, and the cwd is
only in the ``<environment_context><cwd>`` user message. A line without a time takes the last time seen.

Conversation id: the first ``session_meta``'s ``id``, else its ``session_id``, else the file name's UUID (the
rollout id). One message per line, id ``<rolloutId>:<lineNo>``:

- ``message``: user/assistant as is; ``developer`` and ``system`` → ``system``; user messages that are injected
  context (``<environment_context>``, ``<user_instructions>``, ``# AGENTS.md instructions``, ...) → ``system``.
- ``function_call``/``custom_tool_call``/``local_shell_call``/``web_search_call`` → ``tool`` calls;
  ``function_call_output``/``custom_tool_call_output`` → ``tool`` outputs named after their call (by ``call_id``).
- ``event_msg`` ``user_message``/``agent_message`` are used only when a file has no ``message`` items at all.

Skip reasons: ``reasoning``, ``event_msg``, ``state_record``, ``compacted``, ``unknown_record``, ``unknown_item``,
``unknown_role``, ``empty_message``, ``empty_conversation``, ``duplicate_rollout`` and the JSONL reader's
``malformed_line``, ``truncated_line``, ``non_object_line``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import tool_content
from memmy.sources.model import (
    EPOCH,
    Conversation,
    Role,
    ScanStats,
    SourceMessage,
    extract_text,
    git_root_of,
    home_of,
    iter_jsonl,
    to_iso,
)

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
class _Rollout:
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


def _read_rollout(path: Path, stats: ScanStats) -> _Rollout:
    state = _Rollout(rollout_id_of(path))
    for line, record in iter_jsonl(path, stats):
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


def _dispatch(state: _Rollout, line: int, kind: str, item: dict[str, Any], stats: ScanStats) -> None:
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


def _response_item(state: _Rollout, line: int, item: dict[str, Any], stats: ScanStats) -> None:
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


def _message(state: _Rollout, line: int, item: dict[str, Any], stats: ScanStats) -> None:
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


def _call(state: _Rollout, line: int, item: dict[str, Any]) -> None:
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


def _output(state: _Rollout, line: int, item: dict[str, Any]) -> None:
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


class CodexAdapter:
    """Reads Codex CLI rollout files of every format era."""

    name = SOURCE

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """``$CODEX_HOME/sessions`` and ``$CODEX_HOME/archived_sessions`` (default ``~/.codex``)."""
        configured = env.get("CODEX_HOME")
        base = Path(configured) if configured else home_of(env) / ".codex"
        return [base / "sessions", base / "archived_sessions"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """One conversation per rollout file (a rollout id seen twice is read once)."""
        seen: set[str] = set()
        git_roots: dict[str, str | None] = {}
        for root in self.roots(env):
            try:
                files = sorted(p for p in root.rglob("rollout-*.jsonl") if p.is_file())
            except OSError as exc:
                stats.errors.append(f"{root}: {exc}")
                continue
            for path in files:
                if rollout_id_of(path) in seen:
                    stats.skip("duplicate_rollout")
                    continue
                seen.add(rollout_id_of(path))
                conversation = self._read_file(path, stats, git_roots)
                if conversation is not None:
                    yield conversation

    def _read_file(self, path: Path, stats: ScanStats, git_roots: dict[str, str | None]) -> Conversation | None:
        stats.files += 1
        state = _read_rollout(path, stats)
        use_events = not state.has_message_items
        kept: list[SourceMessage] = []
        for from_event, message in state.messages:
            if from_event and not use_events:
                stats.skip("event_msg")
                continue
            kept.append(message)
        if not kept:
            stats.skip("empty_conversation")
            return None
        conversation_id = state.conversation_id or state.rollout_id
        workspace = state.first_cwd
        finished: list[SourceMessage] = []
        for message in kept:
            cwd = message.workspace_path or workspace
            if cwd is not None and cwd not in git_roots:
                git_roots[cwd] = git_root_of(cwd) if Path(cwd).is_absolute() else None
            root = git_roots.get(cwd) if cwd else None
            finished.append(replace(message, conversation_id=conversation_id, workspace_path=cwd, git_root=root))
        stats.messages += len(finished)
        return Conversation(SOURCE, conversation_id, finished, str(path), workspace)


ADAPTER = CodexAdapter()
