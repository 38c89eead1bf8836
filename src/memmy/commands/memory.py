"""Requests about memories: add, search (and the recall options a turn start shares), delete, archive,
processing status."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from memmy.commands.base import Command, param
from memmy.commands.fields import (
    LAYERS_SCHEMA,
    MAX_CONTENT_CHARS,
    STR_LIST,
    TAGS_SCHEMA,
    TEXT,
    iso_time_field,
    layer_field,
    layers_field,
    loose_str,
    tags_field,
)
from memmy.commands.validate import opt_list
from memmy.domain import CANARY_PREFIX, Layer
from memmy.errors import InvalidArgument

Scope = Literal["auto", "pooled", "project", "agent"]
SCOPES: tuple[str, ...] = ("auto", "pooled", "project", "agent")
#: The recall channels (memmy.recall.channels.CHANNELS; a test keeps the two equal).
CHANNEL_NAMES: tuple[str, ...] = ("vec", "fts", "pattern", "structural")
#: The retrieval modes (memmy.recall.pipeline.MODE_LAYERS; a test keeps the two equal).
Mode = Literal["turn_start", "search", "tool_driven", "sub_agent", "skill_invoke", "decision_repair", "world_model"]
#: scope=project needs a project: the body's workspacePath (or an x-memmy-project-id header).
PROJECT_SCOPE: dict[str, Any] = {
    "anyOf": [
        {"properties": {"scope": {"enum": ["auto", "pooled", "agent"]}}},
        {"properties": {"workspacePath": {"type": "string", "pattern": "^/"}}, "required": ["workspacePath"]},
    ]
}
_SOURCE = {"description": "the calling agent (wins over the x-memmy-source header)"}
_WORKSPACE = {"description": "the caller's working directory (its repository is the project)"}


def _channels(body: dict[str, Any], key: str) -> tuple[str, ...]:
    requested = opt_list(body, key)
    unknown = [c for c in requested if not isinstance(c, str) or c not in CHANNEL_NAMES]
    if unknown:
        raise InvalidArgument(f"{key}: unknown {unknown!r}; expected any of {', '.join(CHANNEL_NAMES)}")
    return tuple(dict.fromkeys(requested))


def _hints(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = body.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidArgument(f"{key}: expected an object")
    return value


@dataclass(frozen=True)
class RecallOptions(Command):
    """How a recall is narrowed: scope, channels, context hints, required tags (search and turn start)."""

    scope: Scope | None = param(None, doc="auto (default): the project inside a repository, else pooled")
    channels: tuple[str, ...] = param(
        (), read=_channels, schema={"type": "array", "items": {"enum": list(CHANNEL_NAMES)}}
    )
    context_hints: dict[str, Any] | None = param(None, read=_hints, schema={"type": "object"}, redact=False)
    tags: tuple[str, ...] = param((), read=tags_field, schema=TAGS_SCHEMA, doc="only memories carrying all of these")


@dataclass(frozen=True)
class AddMemory(Command):
    """``POST /api/v1/memory/add``: write one memory."""

    summary: ClassVar[str] = "Write a memory"
    content: str = param(schema={**TEXT, "maxLength": MAX_CONTENT_CHARS})
    layer: Layer = param("L1", read=layer_field, schema={"enum": ["L1", "L2", "L3", "Skill"], "default": "L1"})
    title: str = param("")
    tags: tuple[str, ...] = param((), read=tags_field, schema=TAGS_SCHEMA)
    source: str | None = param(None, read=loose_str, schema=_SOURCE)
    workspace_path: str | None = param(None, read=loose_str, schema=_WORKSPACE)
    session_id: str | None = None
    turn_id: str | None = None
    created_at: str | None = param(None, read=iso_time_field, schema={"format": "date-time"})
    project_id: str | None = None
    visibility: Literal["private", "global"] = "private"
    defer_processing: bool = param(False, doc="store now, embed later (ready_text_only)")
    adapter_id: str | None = param(None, doc="with requestId: an idempotency key")
    request_id: str | None = None


@dataclass(frozen=True)
class SearchMemory(Command):
    """``POST /api/v1/memory/search``: the recall pipeline rendered as injectable markdown."""

    summary: ClassVar[str] = "Search memories"
    schema_extra: ClassVar[dict[str, Any]] = PROJECT_SCOPE
    query: str = param(schema={**TEXT, "maxLength": 20_000})
    limit: int = param(10, schema={"minimum": 1, "maximum": 100})
    layers: tuple[Layer, ...] = param((), read=layers_field, schema=LAYERS_SCHEMA)
    verbose: bool = param(False, doc="add the pipeline's debug facts")
    mode: Mode = "search"
    session_id: str | None = None
    source: str | None = param(None, read=loose_str, schema=_SOURCE)
    workspace_path: str | None = param(None, read=loose_str, schema=_WORKSPACE)
    options: RecallOptions = param(RecallOptions(), read=lambda body, _key: RecallOptions.from_json(body))


@dataclass(frozen=True)
class DeleteMemory(Command):
    """``DELETE /api/v1/memory/{id}``: delete (hide) one memory; ``POST …/restore`` undoes it."""

    summary: ClassVar[str] = "Delete a memory (undo with restore)"
    reason: str | None = None


@dataclass(frozen=True)
class RestoreMemory(Command):
    """``POST /api/v1/memory/{id}/restore``: bring a deleted memory back."""

    summary: ClassVar[str] = "Restore a deleted memory"
    reason: str | None = None


@dataclass(frozen=True)
class ArchiveMemory(Command):
    """``POST /api/v1/memory/{id}/archive``: keep a memory but stop recalling it."""

    summary: ClassVar[str] = "Archive a memory"
    reason: str | None = None


def _memory_ids(body: dict[str, Any], key: str) -> tuple[str, ...]:
    ids = opt_list(body, key)
    if len(ids) > 10_000 or not all(isinstance(i, str) for i in ids):
        raise InvalidArgument(f"{key}: expected at most 10000 string ids")
    return tuple(ids)


_MARKER = {"type": "string", "pattern": f"^{CANARY_PREFIX}.{{8,}}$"}
_SESSION_IDS = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 16}


def _canary_marker(body: dict[str, Any], key: str) -> str:
    marker = body.get(key)
    if not isinstance(marker, str) or not re.fullmatch(_MARKER["pattern"], marker):
        raise InvalidArgument(f"{key}: expected a doctor canary marker ({CANARY_PREFIX}<at least 8 characters>)")
    return marker


def _session_ids(body: dict[str, Any], key: str) -> tuple[str, ...]:
    ids = opt_list(body, key)
    if not ids or len(ids) > 16 or not all(isinstance(i, str) and i for i in ids):
        raise InvalidArgument(f"{key}: expected 1 to 16 session ids")
    return tuple(ids)


@dataclass(frozen=True)
class PurgeCanary(Command):
    """``POST /api/v1/admin/canary/purge``: remove every row a ``doctor --canary`` run left (sessions, turns, the
    trace, its vectors, jobs, recall and API log rows); refused unless every turn of those sessions holds the
    marker."""

    summary: ClassVar[str] = "Remove what a doctor canary wrote"
    marker: str = param(read=_canary_marker, schema=_MARKER, redact=False)
    session_ids: tuple[str, ...] = param(read=_session_ids, schema=_SESSION_IDS)


@dataclass(frozen=True)
class ProcessingStatus(Command):
    """``POST /api/v1/memory/processing/status``: processing records of up to 10,000 memories."""

    summary: ClassVar[str] = "Processing state of memories"
    memory_ids: tuple[str, ...] = param((), read=_memory_ids, schema={**STR_LIST, "maxItems": 10_000})
