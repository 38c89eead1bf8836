"""Helpers every history adapter shares: tool-message rendering, env roots, loose JSON access, a transcript builder
that pairs tool results with their calls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from memmy.sources.model import Conversation, Role, ScanStats, SourceMessage, git_root_of, home_of
from memmy.transcripts.model import tool_content as tool_content


def env_dir(env: Mapping[str, str], *names: str) -> Path | None:
    """The first non-empty directory variable among ``names``, with a leading ``~`` expanded against ``env``."""
    for name in names:
        value = env.get(name, "").strip()
        if value == "~":
            return home_of(env)
        if value.startswith("~/"):
            return home_of(env) / value[2:]
        if value:
            return Path(value)
    return None


def as_text(value: Any) -> str | None:
    """Tool input/output as text: strings unchanged, other JSON values serialised, ``None`` when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


class Transcript:
    """Collects one conversation's messages; a tool result is merged into the ``tool`` message of its call.

    Tool content is rendered with the Claude Code adapter's :func:`tool_content`, so all traces read alike.
    """

    def __init__(self, source: str, conversation_id: str, workspace: str | None, stats: ScanStats) -> None:
        self.source = source
        self.conversation_id = conversation_id
        self.workspace = workspace or None
        self.git_root = git_root_of(self.workspace)
        self.stats = stats
        self.messages: list[SourceMessage] = []
        self._calls: dict[str, int] = {}

    def text(self, message_id: str, role: Role, content: str, created_at: str) -> None:
        """Add a user/assistant/system message; empty text is dropped and counted as ``empty_message``."""
        text = content.strip()
        if not text:
            self.stats.skip("empty_message")
            return
        self.messages.append(self._message(message_id, role, text, created_at))

    def tool_call(
        self,
        message_id: str,
        created_at: str,
        name: str | None,
        call_id: str | None,
        tool_input: str | None,
        output: str | None = None,
        error: str | None = None,
        status: str | None = None,
    ) -> None:
        """Add a tool call (optionally with its outcome already known)."""
        if call_id:
            self._calls[call_id] = len(self.messages)
        self.messages.append(self._tool(message_id, created_at, name, call_id, tool_input, output, error, status))

    def tool_result(
        self,
        message_id: str,
        created_at: str,
        name: str | None,
        call_id: str | None,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        """Attach a result to its call, or add it alone when the call was not seen."""
        index = self._calls.pop(call_id, None) if call_id else None
        if index is None:
            self.messages.append(self._tool(message_id, created_at, name, call_id, None, output, error))
            return
        call = self.messages[index]
        self.messages[index] = self._tool(
            call.message_id, call.created_at, call.tool_name or name, call_id, call.tool_input, output, error
        )

    def conversation(self, origin: str) -> Conversation | None:
        """The finished conversation (``None`` when nothing usable was found); counts its messages."""
        if not self.messages:
            self.stats.skip("empty_conversation")
            return None
        self.stats.messages += len(self.messages)
        return Conversation(self.source, self.conversation_id, self.messages, origin, self.workspace)

    def _tool(
        self,
        message_id: str,
        created_at: str,
        name: str | None,
        call_id: str | None,
        tool_input: str | None,
        output: str | None,
        error: str | None,
        status: str | None = None,
    ) -> SourceMessage:
        content = tool_content(name or "tool", call_id, tool_input, output, error, status)
        return replace(
            self._message(message_id, "tool", content, created_at),
            tool_name=name or None,
            tool_call_id=call_id or None,
            tool_input=tool_input,
            tool_output=output,
            tool_error=error,
        )

    def _message(self, message_id: str, role: Role, content: str, created_at: str) -> SourceMessage:
        return SourceMessage(
            message_id, self.conversation_id, role, content, created_at, self.source, self.workspace, self.git_root
        )
