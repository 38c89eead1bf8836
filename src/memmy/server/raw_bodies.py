"""JSON Schemas of the request bodies still passed raw to the service: the four session/turn routes (issue 13's
turn path parses them into its own commands inside the call)."""

from __future__ import annotations

from typing import Any

from memmy.commands.fields import LAYERS_SCHEMA
from memmy.commands.fields import NOT_BLANK as _NOT_BLANK
from memmy.commands.memory import PROJECT_SCOPE

_STR = {"type": "string"}
_TEXT = {"type": "string", "pattern": _NOT_BLANK}
#: A caller-chosen id: up to 200 characters, no NUL or line breaks, not blank.
_SID = {"type": "string", "maxLength": 200, "pattern": _NOT_BLANK, "not": {"pattern": "[\\x00\\n\\r]"}}
_STR_LIST = {"type": "array", "items": _STR}
_IDEMPOTENCY = {"adapterId": _STR, "requestId": _STR}
_SCOPE = {"enum": ["auto", "pooled", "project", "agent"], "default": "auto"}
_CHANNELS = {"type": "array", "items": {"enum": ["vec", "fts", "pattern", "structural"]}}

RAW_BODIES: dict[str, dict[str, Any]] = {
    "close_session": {"properties": _IDEMPOTENCY},
    "open_session": {"properties": {"sessionId": _STR, "workspacePath": _STR, "source": _STR, **_IDEMPOTENCY}},
    "start_turn": {
        "properties": {
            "sessionId": _SID,
            "query": _TEXT,
            "turnId": _SID,
            "contextHints": {"type": "object"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "scope": _SCOPE,
            "layers": LAYERS_SCHEMA,
            "channels": _CHANNELS,
            "tags": _STR_LIST,
            "workspacePath": _STR,
            "source": _STR,
            **_IDEMPOTENCY,
        },
        "required": ["sessionId", "query"],
        **PROJECT_SCOPE,
    },
    "complete_turn": {
        "properties": {
            "sessionId": _SID,
            "query": _TEXT,
            "answer": _TEXT,
            "reasoningSummary": _STR,
            "tags": _STR_LIST,
            "toolCalls": {"type": "array", "items": {"type": "object"}},
            "toolResults": {"type": "array"},
            "sourceMemoryIds": _STR_LIST,
            "usage": {"type": "object"},
            "status": {"enum": ["succeeded", "failed", "cancelled"]},
            "workspacePath": _STR,
            "source": _STR,
            **_IDEMPOTENCY,
        },
        "required": ["sessionId", "query", "answer"],
    },
}
