"""JSON Schemas of the request bodies still passed raw to the service: the four session/turn routes (issue 13's
turn path types them), the history scan and the key-graph tools (keymem's argument names)."""

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
SOURCE_NAMES = ("claude_code", "codex", "cursor", "hermes", "openclaw", "opencode", "pi", "qwenwork", "workbuddy")

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
    "scan": {
        "properties": {
            "sources": {
                "type": "array",
                "items": {"enum": list(SOURCE_NAMES)},
                "description": "built-in sources (and the names of custom sources in config)",
            },
            "mode": {"enum": ["incremental", "full"], "default": "incremental"},
            "confirm": {"type": "boolean", "description": "required for mode=full"},
            "since": {"type": "string", "format": "date-time"},
            "dryRun": {"type": "boolean"},
            "initialLimit": {"type": "integer", "minimum": 1, "default": 1000},
            "stopOnDisconnect": {"type": "boolean", "description": "stop when the last events follower leaves"},
        },
        # mode=full re-reads all history, so it needs confirm=true
        "anyOf": [
            {"properties": {"mode": {"const": "incremental"}}},
            {"properties": {"confirm": {"const": True}}, "required": ["confirm"]},
        ],
    },
}

#: A key needs a letter or digit (Latin, Cyrillic, kana, CJK or Hangul): edge punctuation and blanks are dropped.
_KEY_CHAR = "[0-9A-Za-z\\u00c0-\\u024f\\u0400-\\u04ff\\u3040-\\u30ff\\u4e00-\\u9fff\\uac00-\\ud7af]"
_KEY_ID = {**_TEXT, "description": "a key id (key_...)"}
_MEMORY_ID = {**_TEXT, "description": "a memory id"}
_NS = {"type": "string", "description": "keymem namespace (default 'default')"}
_DECAY = {"enum": ["transient", "standard", "stable", "permanent"], "default": "standard"}
_KEY_TYPES = {"type": "object", "additionalProperties": {"enum": ["concept", "name", "proper_noun"]}}
_KEYS = {
    "type": "array",
    # a key needs one character besides blanks, edge punctuation and the alias bar
    "items": {"type": "string", "maxLength": 100, "pattern": _KEY_CHAR},
    "minItems": 1,
    "maxItems": 32,
    "description": "atomic concept keys; 'apple|사과' declares 사과 an alias of apple",
}
_REMEMBER_ITEM: dict[str, Any] = {
    "properties": {
        "content": {**_TEXT, "maxLength": 200_000},
        "keys": _KEYS,
        "key_types": _KEY_TYPES,
        "namespace": _NS,
        "ttl_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 100 * 365 * 86_400},
        "decay_profile": _DECAY,
        "related_to": {"type": "array", "items": _MEMORY_ID},
        "source": {"type": "object"},
    },
    "required": ["content", "keys"],
}
#: keymem's tools at ``POST /api/v1/keys/<op>``: the body is the tool's arguments.
KEY_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "recall": (
        "Ranked key clusters plus one passive Top-1 memory (or no_match with nearest_keys)",
        {
            "properties": {
                "query": _TEXT,
                "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8},
                "namespace": _NS,
                "context": _STR,
                "explain": {"type": "boolean"},
                "max_chars": {"type": "integer", "minimum": 50, "maximum": 200_000, "default": 2000},
            },
            "required": ["query"],
        },
    ),
    "browse_keys": (
        "A namespace's key vocabulary, hubs first",
        {
            "properties": {
                "namespace": _NS,
                "hubs_only": {"type": "boolean"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 20},
                "offset": {"type": "integer", "minimum": 0, "maximum": 1_000_000, "default": 0},
            }
        },
    ),
    "read_key": (
        "Ranked memory handles under one key (no content)",
        {
            "properties": {
                "key_id": _KEY_ID,
                "query": _TEXT,
                "namespace": _NS,
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 10},
                "offset": {"type": "integer", "minimum": 0, "maximum": 1_000_000, "default": 0},
            },
            "required": ["key_id"],
        },
    ),
    "read_memory": (
        "Full content, connected keys and validity; reinforces only the via_key_id edge",
        {"properties": {"memory_id": _MEMORY_ID, "via_key_id": _KEY_ID, "namespace": _NS}, "required": ["memory_id"]},
    ),
    "remember": ("Save a memory under atomic keys (dedupes; refuses tombstoned content)", _REMEMBER_ITEM),
    "remember_batch": (
        "Save several memories (all validated before anything is written)",
        {
            "properties": {"items": {"type": "array", "minItems": 1, "items": {"type": "object", **_REMEMBER_ITEM}}},
            "required": ["items"],
        },
    ),
    "correct": (
        "New version of a memory; the old one's validity ends and the chain is kept",
        {
            "properties": {
                "memory_id": _MEMORY_ID,
                "content": {**_TEXT, "maxLength": 200_000},
                "keys": _KEYS,
                "key_types": _KEY_TYPES,
                "ttl_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 100 * 365 * 86_400},
                "decay_profile": _DECAY,
                "related_to": {"type": "array", "items": _MEMORY_ID},
                "source": {"type": "object"},
            },
            "required": ["memory_id", "content"],
        },
    ),
    "confirm_memory": (
        "Evidence-backed confirmation: refreshes freshness, depth +0.05",
        {
            "properties": {"memory_id": _MEMORY_ID, "evidence": _TEXT, "namespace": _NS, "source": {"type": "object"}},
            "required": ["memory_id", "evidence"],
        },
    ),
    "dismiss": (
        "Weaken one key->memory edge (floored, never severed)",
        {
            "properties": {"memory_id": _MEMORY_ID, "key_id": _KEY_ID, "namespace": _NS},
            "required": ["memory_id", "key_id"],
        },
    ),
    "related": (
        "Memories sharing keys or explicitly related",
        {"properties": {"memory_id": _MEMORY_ID}, "required": ["memory_id"]},
    ),
    "forget": (
        "Delete a memory and tombstone its value",
        {"properties": {"memory_id": _MEMORY_ID, "reason": _STR}, "required": ["memory_id"]},
    ),
    "list_memories": ("Active key-graph memories", {"properties": {"namespace": _NS}}),
    "cleanup_expired": ("Delete memories past their TTL", {"properties": {}}),
    "memory_stats": ("Counts of keys, memories and links", {"properties": {}}),
}
