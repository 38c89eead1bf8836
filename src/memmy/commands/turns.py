"""Typed session and turn requests: open/close a session, start a turn (recall), complete a turn (capture)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Self

from memmy.commands.idempotency import IdempotencyKey, idempotency_key
from memmy.commands.memory import RecallOptions
from memmy.commands.validate import layers_of, opt_int, opt_list, opt_str, opt_tags, req_str, require_object
from memmy.domain import Layer
from memmy.errors import InvalidArgument

_STATUS_ALIASES = {
    "ok": "succeeded",
    "success": "succeeded",
    "succeeded": "succeeded",
    "error": "failed",
    "failed": "failed",
    "failure": "failed",
    "timeout": "failed",
    "killed": "failed",
    "cancelled": "cancelled",
    "canceled": "cancelled",
    "reset": "cancelled",
    "deleted": "cancelled",
}


class Redacts(Protocol):
    """Anything with ``redact(text)`` and ``redact_json(value)`` (the service's configured redactor)."""

    def redact(self, text: str | None) -> str:
        """The text with secrets replaced."""
        ...

    def redact_json(self, value: Any) -> Any:
        """A copy of a JSON value with secrets replaced."""
        ...


def normalize_status(value: Any) -> str:
    """Map host status words onto succeeded | failed | cancelled."""
    if value is None or value == "":
        return "succeeded"
    if not isinstance(value, str) or value.strip().lower() not in _STATUS_ALIASES:
        raise InvalidArgument(f"status: expected succeeded, failed or cancelled, got {value!r}")
    return _STATUS_ALIASES[value.strip().lower()]


def safe_id(value: str, name: str) -> str:
    """A short id without control characters (it becomes part of keys and file names)."""
    if len(value) > 200 or any(ch in value for ch in "\x00\n\r"):
        raise InvalidArgument(f"{name}: expected a short id without control characters")
    return value


def _opt_text(body: dict[str, Any], name: str) -> str | None:
    """A body-level ``source``/``workspacePath``: used when it is a non-empty string, ignored otherwise (as before)."""
    value = body.get(name)
    return value if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True)
class OpenSession:
    """``POST /api/v1/sessions/open``: open (or resume) a session for an agent."""

    session_id: str | None = None
    source: str | None = None
    workspace_path: str | None = None

    @classmethod
    def from_json(cls, body: object) -> Self:
        """Parse and validate a request body."""
        data = require_object(body)
        session_id = opt_str(data, "sessionId")
        return cls(
            session_id=safe_id(session_id, "sessionId") if session_id else None,
            source=_opt_text(data, "source"),
            workspace_path=_opt_text(data, "workspacePath"),
        )

    def redacted(self, redactor: Redacts) -> OpenSession:
        """A copy with secrets removed from the workspace path (it is stored with the session)."""
        return replace(self, workspace_path=redactor.redact(self.workspace_path) if self.workspace_path else None)


@dataclass(frozen=True)
class CloseSession:
    """``POST /api/v1/sessions/{sessionId}/close``."""

    session_id: str

    @classmethod
    def from_json(cls, body: object, session_id: str) -> Self:
        """The session id comes from the path; the body is ignored (kept for idempotency keys)."""
        return cls(session_id=session_id)


@dataclass(frozen=True)
class StartTurn:
    """``POST /api/v1/turns/start``: record a turn start and recall context for the agent's prompt.

    ``recall_options`` carries the recall fields (``scope``, ``channels``, ``contextHints``, ``tags``), typed as for
    ``memory/search``.
    """

    session_id: str
    query: str
    turn_id: str | None = None
    limit: int = 10
    layers: list[Layer] = field(default_factory=list)
    source: str | None = None
    workspace_path: str | None = None
    recall_options: RecallOptions = field(default_factory=RecallOptions)
    #: The request's idempotency key (``adapterId`` + ``requestId``), hashed from the body as it came.
    idempotency: IdempotencyKey | None = None

    @classmethod
    def from_json(cls, body: object) -> Self:
        """Parse and validate a request body."""
        data = require_object(body)
        session_id = safe_id(req_str(data, "sessionId"), "sessionId")
        query = req_str(data, "query", max_len=200_000)
        turn_id = opt_str(data, "turnId")
        return cls(
            session_id=session_id,
            query=query,
            turn_id=safe_id(turn_id, "turnId") if turn_id else None,
            limit=opt_int(data, "limit", 10, minimum=1, maximum=50),
            layers=layers_of(data),
            source=_opt_text(data, "source"),
            workspace_path=_opt_text(data, "workspacePath"),
            recall_options=RecallOptions.from_json(data),
            idempotency=idempotency_key("turn.start", data),
        )

    def redacted(self, redactor: Redacts) -> StartTurn:
        """A copy with secrets removed from every text that may be stored or logged."""
        return replace(
            self,
            query=redactor.redact(self.query),
            workspace_path=redactor.redact(self.workspace_path) if self.workspace_path else None,
            recall_options=replace(
                self.recall_options,
                context_hints=redactor.redact_json(self.recall_options.context_hints),
            ),
        )


@dataclass(frozen=True)
class CompleteTurn:
    """``POST /api/v1/turns/{turnId}/complete``: store the answered turn (its L1 trace) in memory.

    ``host_conversation_id`` + ``host_message_id`` (JSON ``hostConversationId``/``hostMessageId``) name the turn in
    the host's own transcript (the conversation and the id of the user message that opened the turn, as the
    transcript reader ``memmy.transcripts`` names them); a turn sent with them is stored once even when the history
    importer reads the same transcript later (or did earlier).
    """

    turn_id: str
    session_id: str
    query: str
    answer: str
    status: str = "succeeded"
    reasoning_summary: str | None = None
    tool_calls: list[Any] = field(default_factory=list)
    tool_results: list[Any] = field(default_factory=list)
    source_memory_ids: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    episode_id: str | None = None
    source: str | None = None
    workspace_path: str | None = None
    host_conversation_id: str | None = None
    host_message_id: str | None = None

    @classmethod
    def from_json(cls, body: object, turn_id: str) -> Self:
        """Parse and validate a request body (the turn id comes from the path)."""
        data = require_object(body)
        turn_id = safe_id(turn_id, "turnId")
        session_id = safe_id(req_str(data, "sessionId"), "sessionId")
        query = req_str(data, "query", max_len=2_000_000)
        answer = req_str(data, "answer", max_len=2_000_000)
        status = normalize_status(data.get("status"))
        reasoning = opt_str(data, "reasoningSummary")
        tool_calls, tool_results = opt_list(data, "toolCalls"), opt_list(data, "toolResults")
        source_ids = [i for i in opt_list(data, "sourceMemoryIds") if isinstance(i, str)]
        tags = opt_tags(data)
        usage = data.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise InvalidArgument("usage: expected an object")
        host_conversation, host_message = opt_str(data, "hostConversationId"), opt_str(data, "hostMessageId")
        if bool(host_conversation) != bool(host_message):
            raise InvalidArgument("hostConversationId and hostMessageId: send both or neither")
        return cls(
            turn_id=turn_id,
            session_id=session_id,
            query=query,
            answer=answer,
            status=status,
            reasoning_summary=reasoning,
            tool_calls=tool_calls,
            tool_results=tool_results,
            source_memory_ids=source_ids,
            tags=tags,
            usage=usage,
            episode_id=opt_str(data, "episodeId"),
            source=_opt_text(data, "source"),
            workspace_path=_opt_text(data, "workspacePath"),
            host_conversation_id=host_conversation or None,
            host_message_id=host_message or None,
        )
