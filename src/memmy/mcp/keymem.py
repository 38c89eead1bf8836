"""The keymem tools: an associative key-graph memory served by the daemon at ``POST /api/v1/keys/<op>``.

Each tool posts its (already validated) arguments unchanged as the JSON body and returns the daemon's result
object. Names, arguments and behaviour follow keymem's "MCP Tools" table (docs/mcp.md lists them).
"""

from __future__ import annotations

from typing import Any

from memmy.mcp.tools import Handler, ToolCall, ToolSpec, array, boolean, integer, obj, string

DECAY_PROFILES = ["transient", "standard", "stable", "permanent"]
KEY_TYPES = ["concept", "name", "proper_noun"]
MAX_TTL_SECONDS = 100 * 365 * 86_400
MAX_CONTENT = 200_000


def _id(description: str) -> dict[str, Any]:
    return string(description, minLength=1, maxLength=200)


def _namespace(required: bool = False) -> dict[str, Any]:
    text = "Project/context namespace that groups memories; always pass the active one when known."
    return string(text if not required else "The namespace to browse.", minLength=1, maxLength=200)


def _source() -> dict[str, Any]:
    return {"type": "object", "description": "Provenance to record (merged over the automatic stamp)."}


def _write_fields() -> dict[str, dict[str, Any]]:
    """Fields shared by remember, remember_batch items and correct."""
    return {
        "keys": array(
            "3-6 diverse ATOMIC concept keys of 1-2 words each (e.g. 'Nexora', 'portfolio'; never phrases like "
            "'Nexora portfolio'). Reuse canonical keys that recall returned; register both language forms "
            "together (e.g. '포트폴리오' and 'portfolio'); 'a|b' declares b an alias of a.",
            {"type": "string", "minLength": 1, "maxLength": 100},
            minItems=1,
            maxItems=32,
        ),
        "key_types": {
            "type": "object",
            "description": "Per-key matching: 'concept' (default, similarity), 'name' or 'proper_noun' (exact "
            'match only), e.g. {"Donggeon": "name"}.',
            "additionalProperties": {"type": "string", "enum": KEY_TYPES},
        },
        "ttl_seconds": {
            "type": "number",
            "description": "Expire the memory after this many seconds.",
            "exclusiveMinimum": 0,
            "maximum": MAX_TTL_SECONDS,
        },
        "decay_profile": string(
            "Freshness half-life: transient (7 days), standard (90, the default), stable (365) or permanent "
            "(no decay).",
            enum=DECAY_PROFILES,
        ),
        "related_to": array("Memory ids to link explicitly.", _id("A memory id."), maxItems=100),
        "source": _source(),
    }


def _remember_item() -> dict[str, Any]:
    fields = _write_fields()
    return obj(
        {
            "content": string("The durable fact, self-contained.", minLength=1, maxLength=MAX_CONTENT, pattern=r"\S"),
            "keys": fields["keys"],
            "key_types": fields["key_types"],
            "namespace": _namespace(),
            "ttl_seconds": fields["ttl_seconds"],
            "decay_profile": fields["decay_profile"],
            "related_to": fields["related_to"],
            "source": fields["source"],
        },
        ["content", "keys"],
    )


def keys_op(op: str) -> Handler:
    """A handler posting the arguments to ``/api/v1/keys/<op>``."""

    async def handler(call: ToolCall) -> Any:
        return await call.api.arequest("POST", f"/api/v1/keys/{op}", dict(call.args), call.headers)

    handler.__name__ = f"keys_{op}"
    return handler


def _spec(
    name: str, title: str, description: str, schema: dict[str, Any], read_only: bool = False, destructive: bool = False
) -> ToolSpec:
    handler = keys_op(name)
    return ToolSpec(name, title, description, schema, handler, read_only=read_only, destructive=destructive)


_WRITE = _write_fields()

KEYMEM_TOOLS: list[ToolSpec] = [
    _spec(
        "recall",
        "Recall by key",
        "Search long-term memory for what is already known about the user, project, or topic; call this before "
        "your first reply and whenever the topic shifts. Returns ranked key clusters (canonical concept, aliases, "
        "key type, match score, linked-memory count, hub status, specificity) plus one passive Top-1 memory with "
        "validity, matched_key and connected_keys. explain:true also returns namespace counts. Use short focused "
        "noun queries and split multi-fact questions into several recall calls. For a core lookup continue with "
        "read_key(key_id, query, namespace) then read_memory(memory_id, via_key_id, namespace). An empty result "
        "is {status:'no_match', nearest_keys}: retry with one of those concepts when relevant.",
        obj(
            {
                "query": string(
                    "Short focused noun keywords, e.g. 'residence' (not a full sentence).",
                    minLength=1,
                    maxLength=2_000,
                    pattern=r"\S",
                ),
                "top_k": integer("How many key clusters to return (default 8).", 1, 50),
                "namespace": _namespace(),
                "context": string(
                    "The raw user utterance this lookup serves; it ranks memories within the key.", maxLength=20_000
                ),
                "max_chars": integer("Cut the previewed memory's content to this many characters.", 50, 200_000),
                "explain": boolean("Also return namespace memory counts (status found / no_match / empty_namespace)."),
            },
            ["query"],
        ),
        read_only=True,
    ),
    _spec(
        "browse_keys",
        "Browse key vocabulary",
        "Browse a namespace's active key vocabulary when recall has no hit or you need an entry point: key "
        "clusters with hubs first, then by linked-memory count. Index metadata only; continue with "
        "read_key(key_id, query, namespace) and read_memory(memory_id, via_key_id, namespace).",
        obj(
            {
                "namespace": _namespace(required=True),
                "hubs_only": boolean("Only hub keys (linked to at least three active memories)."),
                "limit": integer("Page size.", 1, 500),
                "offset": integer("Page offset.", 0),
            },
            ["namespace"],
        ),
        read_only=True,
    ),
    _spec(
        "read_key",
        "List memories under a key",
        "List the memories stored under one key (concept), ranked: the canonical key, its aliases and hub "
        "metadata plus ranked memory ids and metadata, never content. Pass the original focused query so hub "
        "memories are ranked by content relevance; page with limit/offset. Then call read_memory(memory_id, "
        "via_key_id=key_id, namespace) on the chosen handle.",
        obj(
            {
                "key_id": _id("The key cluster id (from recall, browse_keys or read_memory)."),
                "query": string("The original focused query, for relevance ordering.", maxLength=2_000),
                "namespace": _namespace(),
                "limit": integer("Page size.", 1, 200),
                "offset": integer("Page offset.", 0),
            },
            ["key_id"],
        ),
        read_only=True,
    ),
    _spec(
        "read_memory",
        "Read a keymem memory",
        "Read the full content, connected keys and validity of one memory (selected via read_key). Records "
        "access and, when via_key_id is given, reinforces that traversed edge only; it never confirms that the "
        "content is current or deepens it.",
        obj(
            {
                "memory_id": _id("The memory id."),
                "via_key_id": _id("The key you arrived by (its edge is reinforced)."),
                "namespace": _namespace(),
            },
            ["memory_id"],
        ),
    ),
    _spec(
        "confirm_memory",
        "Confirm a memory is current",
        "Refresh a memory's freshness and deepen it after explicit present evidence: a current user assertion, "
        "an authoritative current source, or direct observation. A read alone is not evidence.",
        obj(
            {
                "memory_id": _id("The memory id."),
                "evidence": string(
                    "What confirms it now: 'user' (an explicit current user assertion), 'authoritative_source' "
                    "or 'observation', optionally followed by a short note.",
                    minLength=1,
                    maxLength=2_000,
                    pattern=r"\S",
                ),
                "namespace": _namespace(),
                "source": _source(),
            },
            ["memory_id", "evidence"],
        ),
    ),
    _spec(
        "remember",
        "Remember a fact",
        "Save one durable fact (a name, preference, decision, correction, project fact or goal) with its key "
        "concepts, silently and in the same turn it was revealed. Recall the topic first and reuse returned "
        "canonical keys. Optional ttl_seconds, decay_profile (transient, standard, stable, permanent) and "
        "related_to links. The answer may carry hints.near_keys (existing concepts to reuse) and "
        "hints.language_note. Never store secrets.",
        obj(
            {
                "content": string(
                    "The durable fact, self-contained.", minLength=1, maxLength=MAX_CONTENT, pattern=r"\S"
                ),
                "keys": _WRITE["keys"],
                "key_types": _WRITE["key_types"],
                "namespace": _namespace(),
                "ttl_seconds": _WRITE["ttl_seconds"],
                "decay_profile": _WRITE["decay_profile"],
                "related_to": _WRITE["related_to"],
                "source": _WRITE["source"],
            },
            ["content", "keys"],
        ),
    ),
    _spec(
        "remember_batch",
        "Remember several facts",
        "Save several durable facts in one call; each item is {content, keys, key_types?, namespace?, "
        "ttl_seconds?, decay_profile?, related_to?}. Returns the saved ids.",
        obj({"items": array("The memories to save.", _remember_item(), minItems=1, maxItems=500)}, ["items"]),
    ),
    _spec(
        "correct",
        "Correct a memory",
        "Versioned update when information changes (moved cities, changed job): the predecessor is preserved "
        "but inactive. Omit keys to keep the same search terms; omitted ttl_seconds/decay_profile inherit from "
        "the predecessor; related_to links the new version to other memories.",
        obj(
            {
                "memory_id": _id("The memory to supersede."),
                "content": string("The corrected fact.", minLength=1, maxLength=MAX_CONTENT, pattern=r"\S"),
                "keys": _WRITE["keys"],
                "key_types": _WRITE["key_types"],
                "ttl_seconds": _WRITE["ttl_seconds"],
                "decay_profile": _WRITE["decay_profile"],
                "related_to": _WRITE["related_to"],
                "source": _WRITE["source"],
            },
            ["memory_id", "content"],
        ),
    ),
    _spec(
        "dismiss",
        "Dismiss a wrong key match",
        "Negative feedback: the fact is fine but this key should not have surfaced it. Weakens that one "
        "key->memory edge (floored, never severed) and cancels its pending alias learning.",
        obj(
            {
                "memory_id": _id("The memory that surfaced."),
                "key_id": _id("The key it was recalled under."),
                "namespace": _namespace(),
            },
            ["memory_id", "key_id"],
        ),
    ),
    _spec(
        "related",
        "Related memories",
        "Find memories associated with one you already have: neighbours sharing keys or explicit links.",
        obj(
            {"memory_id": _id("The memory id."), "limit": integer("How many neighbours (default 20).", 1, 200)},
            ["memory_id"],
        ),
        read_only=True,
    ),
    _spec(
        "forget",
        "Forget a memory",
        "Permanently delete a memory. Only for completely wrong information; for outdated facts use correct.",
        obj(
            {
                "memory_id": _id("The memory to delete."),
                "reason": string("Why (kept in the audit log).", maxLength=2_000),
            },
            ["memory_id"],
        ),
        destructive=True,
    ),
    _spec(
        "list_memories",
        "List keymem memories",
        "List active memories with keys, depth, access count and validity (expired ones excluded); namespace "
        "filters by project/context. Prefer recall for normal retrieval.",
        obj(
            {
                "namespace": _namespace(),
                "limit": integer("Page size (default 1000).", 1, 10_000),
                "offset": integer("Page offset.", 0),
            }
        ),
        read_only=True,
    ),
    _spec(
        "cleanup_expired",
        "Delete expired memories",
        "Delete every memory whose TTL has expired; returns how many were deleted.",
        obj({}),
        destructive=True,
    ),
    _spec(
        "memory_stats",
        "Key-graph statistics",
        "Current counts of keys, memories and links.",
        obj({}),
        read_only=True,
    ),
]
