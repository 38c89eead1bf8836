"""Claude Code transcript records → messages (the format is described in ``memmy.sources.adapters.claude_code``).

The first message of a line has id ``uuid``, further ones ``uuid:1``, ``uuid:2``...; a line without ``uuid`` takes
``<conversation>:<line number>``. Standard library only (the hook reads live transcripts with it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memmy.transcripts.model import EPOCH, Role, ScanStats, SourceMessage, extract_text, to_iso, tool_content

SOURCE = "claude_code"
# User lines that are the output of a local command, not a request: they join the command's turn as system text.
# (The command line itself, ``<command-name>`` or ``<bash-input>``, stays a user message: the user typed it.)
_HARNESS_OUTPUT_PREFIXES = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-stdout>",
    "<bash-stderr>",
)


def _as_json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass
class _Ctx:
    """Where the messages of one line come from (id, time, cwd) and how many it has produced."""

    uuid: str
    when: str
    cwd: str | None
    emitted: int = 0


class ClaudeTranscriptReader:
    """Turns the records of one transcript (a whole file, or the tail of a live one) into messages."""

    def __init__(self, conversation_id: str, stats: ScanStats) -> None:
        self.stats = stats
        self.conversation_id = conversation_id
        self.first_cwd: str | None = None
        self.last_time = EPOCH
        self.seen: set[str] = set()
        self.tool_names: dict[str, str] = {}
        self.messages: list[SourceMessage] = []

    def read(self, records: Iterable[tuple[int, dict[str, Any]]]) -> list[SourceMessage]:
        """Every message of ``(line number, record)`` pairs, in order."""
        for number, record in records:
            self.record(number, record)
        return self.messages

    def record(self, number: int, record: dict[str, Any]) -> None:
        """Add the messages of one record (a line of the transcript)."""
        kind = record.get("type")
        if kind not in ("user", "assistant"):
            self.stats.skip("non_message_record")
            return
        if record.get("isSidechain"):
            self.stats.skip("sidechain")
            return
        if record.get("isMeta"):
            self.stats.skip("meta")
            return
        message = record.get("message")
        if not isinstance(message, dict):
            self.stats.skip("no_message")
            return
        uuid = str(record.get("uuid") or f"{self.conversation_id}:{number}")
        if uuid in self.seen:
            self.stats.skip("duplicate_uuid")
            return
        self.seen.add(uuid)
        cwd = record.get("cwd") if isinstance(record.get("cwd"), str) and record.get("cwd") else None
        if cwd and self.first_cwd is None:
            self.first_cwd = cwd
        when = to_iso(record.get("timestamp"))
        if when == EPOCH:
            when = self.last_time
        self.last_time = when
        before = len(self.messages)
        self._blocks(kind, message.get("content"), _Ctx(uuid, when, cwd))
        if len(self.messages) == before:
            blocks = message.get("content")
            only_thinking = (
                isinstance(blocks, list)
                and bool(blocks)
                and all(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") for b in blocks)
            )
            self.stats.skip("thinking_only" if only_thinking else "empty_message")

    def _blocks(self, kind: str, content: Any, ctx: _Ctx) -> None:
        if isinstance(content, str):
            self._text(kind, content, ctx)
            return
        if not isinstance(content, list):
            return
        texts: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text":
                text = block.get("text")
                if isinstance(text, str) and text:
                    texts.append(text)
            elif btype == "tool_use":
                self._text(kind, "\n".join(texts), ctx)
                texts = []
                self._tool_use(block, ctx)
            elif btype == "tool_result":
                self._text(kind, "\n".join(texts), ctx)
                texts = []
                self._tool_result(block, ctx)
        self._text(kind, "\n".join(texts), ctx)

    def _text(self, kind: str, text: str, ctx: _Ctx) -> None:
        if not text.strip():
            return
        role: Role = "assistant" if kind == "assistant" else "user"
        if role == "user" and text.lstrip().startswith(_HARNESS_OUTPUT_PREFIXES):
            role = "system"
        self._add(ctx, role, text)

    def _tool_use(self, block: dict[str, Any], ctx: _Ctx) -> None:
        name = str(block.get("name") or "tool")
        call_id = str(block["id"]) if block.get("id") else None
        tool_input = _as_json_text(block.get("input", {}))
        if call_id:
            self.tool_names[call_id] = name
        content = tool_content(name, call_id, tool_input)
        self._add(ctx, "tool", content, tool_name=name, tool_call_id=call_id, tool_input=tool_input)

    def _tool_result(self, block: dict[str, Any], ctx: _Ctx) -> None:
        call_id = str(block["tool_use_id"]) if block.get("tool_use_id") else None
        name = self.tool_names.get(call_id or "", "tool")
        text = extract_text(block.get("content"))
        output, error = (None, text) if block.get("is_error") else (text, None)
        content = tool_content(name, call_id, output=output, error=error)
        self._add(ctx, "tool", content, tool_name=name, tool_call_id=call_id, tool_output=output, tool_error=error)

    def _add(self, ctx: _Ctx, role: Role, content: str, **tool: str | None) -> None:
        message_id = ctx.uuid if ctx.emitted == 0 else f"{ctx.uuid}:{ctx.emitted}"
        ctx.emitted += 1
        self.messages.append(
            SourceMessage(
                message_id=message_id,
                conversation_id=self.conversation_id,
                role=role,
                content=content,
                created_at=ctx.when,
                source=SOURCE,
                workspace_path=ctx.cwd,
                **tool,
            )
        )
