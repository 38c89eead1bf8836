"""The OpenAPI 3.1 document of the HTTP API (served at ``/api/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

from memmy import __version__

_STR = {"type": "string"}
#: Text the service requires to hold more than whitespace.
#: (Python's ``str.strip()`` whitespace, spelled out: regex engines disagree on ``\\s``.)
_NOT_BLANK = "[^\\x09-\\x0d\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
_TEXT = {"type": "string", "pattern": _NOT_BLANK}
#: A caller-chosen id: up to 200 characters, no NUL or line breaks, not blank.
_SID = {"type": "string", "maxLength": 200, "pattern": _NOT_BLANK, "not": {"pattern": "[\\x00\\n\\r]"}}
#: Ids in paths (the daemon's own ids look like ``trace_0a1b…``).
_PATH_ID = {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,200}$"}
_STR_LIST = {"type": "array", "items": _STR}
_LAYER_NAMES = "(L1|L2|L3|Skill)"
_LAYERS = {
    "oneOf": [
        {"type": "array", "items": {"enum": ["L1", "L2", "L3", "Skill"]}},
        {"type": "string", "pattern": f"^{_LAYER_NAMES}(,{_LAYER_NAMES})*$", "description": "comma-separated"},
    ]
}
_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": _STR, "message": _STR, "requestId": _STR},
            "required": ["code", "message", "requestId"],
        }
    },
    "required": ["error"],
}
_IDEMPOTENCY = {"adapterId": _STR, "requestId": _STR}
_SCOPE = {"enum": ["auto", "pooled", "project", "agent"], "default": "auto"}
#: scope=project needs a project: the body's workspacePath (or an x-memmy-project-id header).
_PROJECT_SCOPE = {
    "anyOf": [
        {"properties": {"scope": {"enum": ["auto", "pooled", "agent"]}}},
        {"properties": {"workspacePath": {"type": "string", "pattern": "^/"}}, "required": ["workspacePath"]},
    ]
}
_CHANNELS = {"type": "array", "items": {"enum": ["vec", "fts", "pattern", "structural"]}}
SOURCE_NAMES = ("claude_code", "codex", "cursor", "hermes", "openclaw", "opencode", "pi", "qwenwork", "workbuddy")
MODE_NAMES = ("turn_start", "search", "tool_driven", "sub_agent", "skill_invoke", "decision_repair", "world_model")

_BODIES: dict[str, dict[str, Any]] = {
    "open_session": {"properties": {"sessionId": _STR, "workspacePath": _STR, "source": _STR, **_IDEMPOTENCY}},
    "start_turn": {
        "properties": {
            "sessionId": _SID,
            "query": _TEXT,
            "turnId": _SID,
            "contextHints": {"type": "object"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "scope": _SCOPE,
            "layers": _LAYERS,
            "channels": _CHANNELS,
            "tags": _STR_LIST,
            "workspacePath": _STR,
            "source": _STR,
            **_IDEMPOTENCY,
        },
        "required": ["sessionId", "query"],
        **_PROJECT_SCOPE,
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
    "search": {
        "properties": {
            "query": _TEXT,
            "sessionId": _STR,
            "layers": _LAYERS,
            "tags": {**_STR_LIST, "description": "only memories carrying all of these tags"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            "scope": _SCOPE,
            "mode": {"enum": list(MODE_NAMES), "default": "search"},
            "channels": _CHANNELS,
            "contextHints": {"type": "object"},
            "workspacePath": _STR,
            "source": _STR,
            "verbose": {"type": "boolean"},
            **_IDEMPOTENCY,
        },
        "required": ["query"],
        **_PROJECT_SCOPE,
    },
    "add": {
        "properties": {
            "content": {**_TEXT, "maxLength": 200_000},
            "layer": {"enum": ["L1", "L2", "L3", "Skill"], "default": "L1"},
            "title": _STR,
            "tags": _STR_LIST,
            "source": _STR,
            "sessionId": _STR,
            "turnId": _STR,
            "createdAt": {"type": "string", "format": "date-time"},
            "projectId": _STR,
            "workspacePath": _STR,
            "visibility": {"enum": ["private", "global"]},
            "deferProcessing": {"type": "boolean"},
            **_IDEMPOTENCY,
        },
        "required": ["content"],
    },
    "delete": {"properties": {"reason": _STR, **_IDEMPOTENCY}},
    "reload": {"properties": {"reason": _STR, "restartFailedProcessing": {"type": "boolean"}}},
    "worker": {"properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 10_000}}},
    "processing": {"properties": {"memoryIds": _STR_LIST}},
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
_BODIES.update({f"keys.{name}": schema for name, (_summary, schema) in KEY_TOOLS.items()})
_BODIES["restore"] = {"properties": {"reason": _STR}}
_BODIES["review"] = {
    "properties": {
        "decision": {"enum": ["approve", "reject"]},
        "content": {"type": "string", "description": "approve with this text instead (edit, then approve)"},
        "reason": {"type": "string"},
    },
    "required": ["decision"],
}
_BODIES["export"] = {
    "properties": {
        "out": {"type": "string", "description": "archive path on the daemon's machine (default: under the data dir)"},
        "raw": {"type": "boolean", "default": True, "description": "false leaves raw turns out"},
    }
}
_BODIES["import_store"] = {
    "properties": {
        "path": {"type": "string", "description": "an archive made by export"},
        "onConflict": {"enum": ["skip", "replace", "error"], "default": "skip"},
        "dryRun": {"type": "boolean"},
    },
    "required": ["path"],
}
_BODIES["wipe"] = {
    "properties": {"confirm": {"const": True}, "backup": {"type": "boolean", "default": True}},
    "required": ["confirm"],
}
_BODIES["dream.run"] = {"properties": {"dryRun": {"type": "boolean", "description": "report, write nothing"}}}
_BODIES["dream.restore"] = {
    "properties": {"force": {"type": "boolean", "description": "overwrite memories edited after the dream"}}
}
_BODIES["feedback"] = {
    "properties": {
        "id": {**_TEXT, "description": "a memory id (trace_/policy_/skill_…) or an episode id (episode_…)"},
        "polarity": {"enum": ["positive", "negative", "neutral"]},
        "magnitude": {"type": "number", "minimum": 0, "maximum": 1, "default": 1},
        "note": _STR,
    },
    "required": ["id", "polarity"],
}

#: (method, path, summary, body key or None, anonymous)
ROUTES: tuple[tuple[str, str, str, str | None, bool], ...] = (
    ("get", "/", "A small HTML page pointing at the API document and health", None, False),
    ("get", "/api/v1/openapi.json", "This document", None, False),
    (
        "get",
        "/api/v1/health",
        "Health: {ok, version} for anyone; details (storage, models, queue) with the token",
        None,
        True,
    ),
    ("post", "/api/v1/sessions/open", "Open or resume an agent session", "open_session", False),
    ("post", "/api/v1/sessions/{sessionId}/close", "Close a session", None, False),
    ("post", "/api/v1/turns/start", "Record a turn start and recall context", "start_turn", False),
    ("post", "/api/v1/turns/{turnId}/complete", "Record a turn completion (capture)", "complete_turn", False),
    ("post", "/api/v1/memory/search", "Search memories", "search", False),
    ("post", "/api/v1/memory/add", "Write a memory", "add", False),
    ("get", "/api/v1/memory/logs", "memory_add / memory_search call logs", None, False),
    ("post", "/api/v1/memory/processing/status", "Processing state of memories", "processing", False),
    ("post", "/api/v1/memory/{id}/processing/retry", "Retry a failed embedding", None, False),
    ("post", "/api/v1/memory/{id}/archive", "Archive a memory", "delete", False),
    ("get", "/api/v1/memory/{id}", "Memory detail", None, False),
    ("delete", "/api/v1/memory/{id}", "Soft-delete a memory", "delete", False),
    ("get", "/api/v1/panel/overview", "Panel overview", None, False),
    ("get", "/api/v1/panel/analysis", "Memory analytics", None, False),
    ("get", "/api/v1/panel/items", "Entry list (page, layer, status, q, sourceAgent)", None, False),
    ("get", "/api/v1/panel/tasks", "Captured turns", None, False),
    ("post", "/api/v1/admin/reload-config", "Hot-reload config.yaml", "reload", False),
    ("post", "/api/v1/admin/shutdown", "Stop the daemon", None, False),
    ("post", "/api/v1/worker/run", "Run due embeddings and evolution jobs now", "worker", False),
    ("get", "/api/v1/sources", "Detected agent history sources, last sync and counts", None, False),
    ("post", "/api/v1/sources/scan", "Start a history import job", "scan", False),
    ("get", "/api/v1/sources/scan/{jobId}", "Import job progress", None, False),
    ("get", "/api/v1/sources/scan/{jobId}/events", "Import progress as server-sent events", None, False),
    ("post", "/api/v1/sources/scan/{jobId}/pause", "Pause an import job", None, False),
    ("post", "/api/v1/sources/scan/{jobId}/resume", "Resume an import job", None, False),
    ("post", "/api/v1/sources/scan/{jobId}/stop", "Stop an import job", None, False),
    ("get", "/api/v1/memory/{id}/history", "Version chain of a memory (oldest -> newest, with validity)", None, False),
    ("get", "/api/v1/tombstones", "Forgotten values (content hash + memory key)", None, False),
    ("post", "/api/v1/tombstones/{id}/restore", "Remove a tombstone so the value may come back", "restore", False),
    ("post", "/api/v1/dream/run", "Run a Dream pass (merge twins, archive stale/contradicted)", "dream.run", False),
    ("get", "/api/v1/dream/log", "Past Dream passes with counts per action (limit, offset)", None, False),
    ("get", "/api/v1/dream/{id}", "One Dream pass and its changes (verbose=true: full rows)", None, False),
    ("post", "/api/v1/dream/{id}/restore", "Undo a Dream pass byte for byte", "dream.restore", False),
    ("post", "/api/v1/feedback", "Explicit feedback on a memory or episode (reward, guidance)", "feedback", False),
    ("get", "/api/v1/episodes", "Recent episodes (status, limit)", None, False),
    ("get", "/api/v1/logs", "Audit, API, change and recall logs (kind, limit, offset)", None, False),
    ("get", "/api/v1/review", "The review queue of induced L2/L3/Skills (state)", None, False),
    ("post", "/api/v1/review/{id}", "Approve (optionally edited) or reject a review item", "review", False),
    ("post", "/api/v1/admin/export", "Export the store to one archive (manifest + checksums)", "export", False),
    ("post", "/api/v1/admin/import", "Import an exported archive", "import_store", False),
    ("post", "/api/v1/admin/wipe", "Remove every memory (config and tokens stay; a backup first)", "wipe", False),
    ("get", "/api/v1/evolution/jobs", "Evolution jobs (status, type, episodeId, limit) and counts", None, False),
    *(
        ("post", f"/api/v1/keys/{name}", f"Key graph: {summary}", f"keys.{name}", False)
        for name, (summary, _schema) in KEY_TOOLS.items()
    ),
)


#: Error answers any operation may give, by status (the body is always the error envelope).
ERROR_STATUSES: dict[str, str] = {
    "400": "Invalid argument, or a body that is not JSON (`invalid_json`: malformed or nested too deep)",
    "401": "Missing or wrong token",
    "403": "Refused: a browser origin not allowed, or an operation disabled by configuration",
    "404": "Unknown id or route",
    "409": "Conflict (idempotency key reuse, closed session, not run by `memmy-memory serve`)",
    "413": "Body over server.maxBodyBytes (2 MiB by default)",
    "415": "A body not sent as `content-type: application/json`",
    "421": "A Host header that does not name this loopback service (DNS rebinding guard)",
    "507": "The store cannot write (disk full or I/O error); nothing of the request was saved",
}
#: Success bodies that are not JSON objects.
_SUCCESS_MEDIA: dict[str, dict[str, Any]] = {
    "/": {"text/html": {"schema": {"type": "string"}}},
    "/api/v1/sources/scan/{jobId}/events": {"text/event-stream": {"schema": {"type": "string"}}},
}
_HEALTH = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "version": _STR,
        "status": {"enum": ["ok", "degraded"], "description": "with the token only"},
        "reason": {"type": "string", "description": "why the store is degraded (with the token only)"},
        "storeId": {"type": "string", "description": "hash of the store's path (with the token only)"},
    },
    "required": ["ok", "version"],
}


def _operation(method: str, path: str, summary: str, body: str | None, anonymous: bool) -> dict[str, Any]:
    if path in _SUCCESS_MEDIA:
        content = _SUCCESS_MEDIA[path]
    else:
        success = {"type": ["object", "array"]} if path.startswith("/api/v1/keys/") else {"type": "object"}
        content = {"application/json": {"schema": _HEALTH if path == "/api/v1/health" else success}}
    responses: dict[str, Any] = {"200": {"description": "OK", "content": content}}
    responses.update({status: {"$ref": f"#/components/responses/E{status}"} for status in ERROR_STATUSES})
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if anonymous:
        operation["security"] = [{}, {"bearer": []}]
    if body is not None:
        schema = {"type": "object", **_BODIES[body]}
        operation["requestBody"] = {
            "required": "required" in schema,
            "content": {"application/json": {"schema": schema}},
        }
    params = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    if params:
        operation["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": _PATH_ID} for name in params
        ]
    return operation


def openapi_document() -> dict[str, Any]:
    """Build the OpenAPI document from :data:`ROUTES`."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, body, anonymous in ROUTES:
        paths.setdefault(path, {})[method] = _operation(method, path, summary, body, anonymous)
    error_content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "memmy memory service", "version": __version__},
        "servers": [{"url": "http://127.0.0.1:18960"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR},
            "responses": {
                f"E{status}": {"description": text, "content": error_content} for status, text in ERROR_STATUSES.items()
            },
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
