"""Turn grouping: a user message starts a turn; tool, system and assistant messages join it.

A turn is complete when it starts with non-empty user content and its last message is a non-empty
assistant answer. The last turn of a conversation may still be in progress: it waits for a later sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from memmy.capture.sanitize import sanitize_text
from memmy.sources.model import Conversation, SourceMessage
from memmy.transcripts.turn_grouping import group_messages, host_turn_id


@dataclass
class ImportedTurn:
    """One complete (or waiting) turn of a conversation."""

    source: str
    conversation_id: str
    messages: list[SourceMessage] = field(default_factory=list)
    #: What the sink will write, built already by the history reader process (its ``TurnSink.preparer``).
    prepared: object | None = field(default=None, compare=False, repr=False)

    @property
    def first_user(self) -> SourceMessage:
        """The user message that opened the turn."""
        return self.messages[0]

    @cached_property
    def turn_id(self) -> str:
        """Stable id: ``<source>:`` + sha256(source::conversation::first user message id)[:24]."""
        return host_turn_id(self.source, self.conversation_id, self.first_user.message_id)

    @property
    def created_at(self) -> str:
        """When the turn started."""
        return self.first_user.created_at

    @property
    def complete(self) -> bool:
        """Starts with user content and ends with a non-empty assistant answer."""
        answered = [m for m in self.messages if m.role != "system"]  # agents write context after an answer
        last = answered[-1]
        return last.role == "assistant" and bool(last.content.strip())

    @property
    def user_text(self) -> str:
        """Every user message of the turn, in order (follow-ups typed while the agent worked included)."""
        return "\n\n".join(m.content for m in self.messages if m.role == "user" and m.content.strip())

    @property
    def assistant_text(self) -> str:
        """Every assistant message, in order; the last one is the final answer."""
        return "\n\n".join(m.content for m in self.messages if m.role == "assistant" and m.content.strip())

    @property
    def workspace_path(self) -> str | None:
        """The first workspace any message of the turn names."""
        return next((m.workspace_path for m in self.messages if m.workspace_path), None)

    @property
    def git_root(self) -> str | None:
        """The first git root any message of the turn names."""
        return next((m.git_root for m in self.messages if m.git_root), None)

    def tool_calls(self) -> list[dict[str, object]]:
        """Tool messages as the capture layer's tool-call shape (calls and outputs paired by call id)."""
        calls: list[dict[str, object]] = []
        by_id: dict[str, dict[str, object]] = {}
        for message in self.messages:
            if message.role != "tool":
                continue
            existing = by_id.get(message.tool_call_id or "") if message.tool_call_id else None
            if existing is not None:
                if message.tool_output and not existing.get("output"):
                    existing["output"] = message.tool_output
                if message.tool_error and not existing.get("error"):
                    existing["error"] = message.tool_error
                continue
            call: dict[str, object] = {
                "id": message.tool_call_id,
                "name": message.tool_name or "tool",
                "input": message.tool_input,
                "output": message.tool_output or (message.content if not message.tool_input else None),
                "error": message.tool_error,
                "startedAt": message.created_at,
            }
            calls.append(call)
            if message.tool_call_id:
                by_id[message.tool_call_id] = call
        return calls


def group_turns(conversation: Conversation) -> tuple[list[ImportedTurn], int]:
    """Split a conversation into turns; returns (turns, messages before the first user message).

    memmy's own injected context is stripped from user text first, so a user message that was only a
    recalled-memory wrapper does not open a turn.
    """
    groups, orphans = group_messages(conversation.messages, sanitize_text)
    return [ImportedTurn(conversation.source, conversation.conversation_id, group) for group in groups], orphans
