"""Typed session and turn requests: open/close a session, start a turn (recall), complete a turn (capture).

They are :class:`~memmy.commands.base.Command`s like every other request (their fields give the OpenAPI schema);
their ``from_json`` is their own because a turn's fields are read leniently, as the hooks have always sent them
(host status words, ``source``/``workspacePath`` ignored unless a non-empty string), and the session or turn id
of ``close``/``complete`` comes from the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

from memmy.commands.base import Command, Redacts, param
from memmy.commands.fields import LAYERS_SCHEMA, TAGS_SCHEMA, TEXT
from memmy.commands.idempotency import IdempotencyKey, idempotency_key
from memmy.commands.memory import PROJECT_SCOPE, RecallOptions
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
#: A caller-chosen id: up to 200 characters, no NUL or line breaks (see :func:`safe_id`).
_ID: dict[str, Any] = {"maxLength": 200, "not": {"pattern": "[\\x00\\n\\r]"}}
_SID: dict[str, Any] = {**_ID, "pattern": TEXT["pattern"]}
_OPT_TEXT = {"description": "used when a non-blank string (blank or null: absent)"}
_STATUS = {
    "enum": ["succeeded", "failed", "cancelled", *sorted(set(_STATUS_ALIASES) - {"succeeded", "failed", "cancelled"})],
    "description": "succeeded, failed or cancelled; host words (ok, error, timeout, ...) are mapped onto them",
}


def _both(given: str, needed: str) -> dict[str, Any]:
    """JSON Schema: when ``given`` is a string, ``needed`` must be one too."""
    string = {"properties": {given: {"type": "string"}}, "required": [given]}
    return {"if": string, "then": {"properties": {needed: {"type": "string"}}, "required": [needed]}}


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
    """A body-level ``source``/``workspacePath``: used when it is a non-blank string (blank or null: absent);
    another type is a 400."""
    value = opt_str(body, name)
    return value if value is not None and value.strip() else None


def _path_value(path: Mapping[str, str] | None, name: str) -> str:
    if not path or name not in path:
        raise InvalidArgument(f"{name}: missing from the path")
    return path[name]


@dataclass(frozen=True)
class OpenSession(Command):
    """``POST /api/v1/sessions/open``: open (or resume) a session for an agent."""

    summary: ClassVar[str] = "Open or resume an agent session"
    session_id: str | None = param(None, schema=_ID)
    source: str | None = param(None, schema=_OPT_TEXT)
    workspace_path: str | None = param(None, schema=_OPT_TEXT)

    @classmethod
    def from_json(cls, body: object = None) -> Self:
        """Parse and validate a request body."""
        data = require_object(body)
        session_id = opt_str(data, "sessionId")
        return cls(
            session_id=safe_id(session_id, "sessionId") if session_id else None,
            source=_opt_text(data, "source"),
            workspace_path=_opt_text(data, "workspacePath"),
        )

    def redacted(self, redactor: Redacts) -> Self:
        """A copy with secrets removed from the workspace path (it is stored with the session)."""
        return replace(self, workspace_path=redactor.redact(self.workspace_path) if self.workspace_path else None)


@dataclass(frozen=True)
class CloseSession(Command):
    """``POST /api/v1/sessions/{sessionId}/close``."""

    summary: ClassVar[str] = "Close a session"
    session_id: str = param(wire=False, doc="from the path")

    @classmethod
    def from_json(cls, body: object = None, session_id: str = "") -> Self:
        """The session id comes from the path; the body is ignored (kept for idempotency keys)."""
        if not session_id:
            raise InvalidArgument("sessionId: missing from the path")
        return cls(session_id=session_id)

    @classmethod
    def from_request(cls, body: object, query: Mapping[str, str], path: Mapping[str, str] | None = None) -> Self:
        """The session named by the path."""
        return cls.from_json(body, _path_value(path, "session_id"))


@dataclass(frozen=True)
class StartTurn(Command):
    """``POST /api/v1/turns/start``: record a turn start and recall context for the agent's prompt.

    ``recall_options`` carries the recall fields (``scope``, ``channels``, ``contextHints``, ``tags``), typed as for
    ``memory/search``.
    """

    summary: ClassVar[str] = "Record a turn start and recall context"
    schema_extra: ClassVar[dict[str, Any]] = PROJECT_SCOPE
    session_id: str = param(schema=_SID)
    query: str = param(schema={**TEXT, "maxLength": 200_000})
    turn_id: str | None = param(None, schema=_SID)
    limit: int = param(10, schema={"minimum": 1, "maximum": 50})
    layers: list[Layer] = param(factory=list, schema=LAYERS_SCHEMA)
    source: str | None = param(None, schema=_OPT_TEXT)
    workspace_path: str | None = param(None, schema=_OPT_TEXT)
    recall_options: RecallOptions = param(factory=RecallOptions)
    #: The request's idempotency key (``adapterId`` + ``requestId``), hashed from the body as it came.
    idempotency: IdempotencyKey | None = param(None, wire=False)

    @classmethod
    def from_json(cls, body: object = None) -> Self:
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

    def redacted(self, redactor: Redacts) -> Self:
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
class CompleteTurn(Command):
    """``POST /api/v1/turns/{turnId}/complete``: store the answered turn (its L1 trace) in memory.

    ``host_conversation_id`` + ``host_message_id`` (JSON ``hostConversationId``/``hostMessageId``) name the turn in
    the host's own transcript (the conversation and the id of the user message that opened the turn, as the
    transcript reader ``memmy.transcripts`` names them); a turn sent with them is stored once even when the history
    importer reads the same transcript later (or did earlier).
    """

    summary: ClassVar[str] = "Record a turn completion (capture)"
    #: The host transcript's two ids name the turn together: both or neither (null is neither).
    schema_extra: ClassVar[dict[str, Any]] = {
        "allOf": [_both("hostConversationId", "hostMessageId"), _both("hostMessageId", "hostConversationId")]
    }
    turn_id: str = param(wire=False, doc="from the path")
    session_id: str = param(schema=_SID)
    query: str = param(schema={**TEXT, "maxLength": 2_000_000})
    answer: str = param(schema={**TEXT, "maxLength": 2_000_000})
    status: str = param("succeeded", schema=_STATUS)
    reasoning_summary: str | None = None
    tool_calls: list[Any] = param(factory=list, schema={"items": {"type": "object"}})
    tool_results: list[Any] = param(factory=list)
    source_memory_ids: list[str] = param(factory=list, schema={"description": "ids recalled for this turn"})
    tags: list[str] = param(factory=list, schema=TAGS_SCHEMA)
    usage: dict[str, Any] | None = None
    episode_id: str | None = None
    source: str | None = param(None, schema=_OPT_TEXT)
    workspace_path: str | None = param(None, schema=_OPT_TEXT)
    host_conversation_id: str | None = param(
        None, schema={"minLength": 1}, doc="the host transcript's conversation (with hostMessageId)"
    )
    host_message_id: str | None = param(
        None, schema={"minLength": 1}, doc="the host transcript's id of the turn's user message"
    )

    @classmethod
    def from_json(cls, body: object = None, turn_id: str = "") -> Self:
        """Parse and validate a request body (the turn id comes from the path)."""
        if not turn_id:
            raise InvalidArgument("turnId: missing from the path")
        data = require_object(body)
        turn_id = safe_id(turn_id, "turnId")
        session_id = safe_id(req_str(data, "sessionId"), "sessionId")
        query = req_str(data, "query", max_len=2_000_000)
        answer = req_str(data, "answer", max_len=2_000_000)
        status = normalize_status(data.get("status"))
        reasoning = opt_str(data, "reasoningSummary")
        tool_calls, tool_results = opt_list(data, "toolCalls"), opt_list(data, "toolResults")
        if not all(isinstance(call, dict) for call in tool_calls):
            raise InvalidArgument("toolCalls: expected an array of objects")
        source_ids = opt_list(data, "sourceMemoryIds")
        if not all(isinstance(i, str) for i in source_ids):
            raise InvalidArgument("sourceMemoryIds: expected an array of memory ids (strings)")
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

    @classmethod
    def from_request(cls, body: object, query: Mapping[str, str], path: Mapping[str, str] | None = None) -> Self:
        """The turn named by the path."""
        return cls.from_json(body, _path_value(path, "turn_id"))
