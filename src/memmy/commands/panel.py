"""Requests of the panel's read models: the entry list, captured turns, the memory call logs.

Their numbers are bounded like every other request's: a page below 1, a page size outside 1-100 or a negative
offset is a 400 naming the field (they were clamped once; a caller's bad number now says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from memmy.commands.base import Command, param
from memmy.commands.validate import layer_of
from memmy.domain import Layer

PAGE_SIZE = 20
MAX_PAGE_SIZE = 100


MAX_PAGE = 1_000_000
MAX_OFFSET = 1_000_000_000


def _csv(body: dict[str, Any], key: str) -> tuple[str, ...]:
    value = body.get(key)
    return tuple(v.strip() for v in str(value or "").split(",") if v.strip())


def _layer(body: dict[str, Any], key: str) -> Layer | None:
    return None if body.get(key) is None else layer_of(body[key], key)


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    return str(value) if value else None


_CSV = {"type": "string", "description": "comma-separated"}


@dataclass(frozen=True)
class PanelItems(Command):
    """``GET /api/v1/panel/items``: a page of memories."""

    summary: ClassVar[str] = "Entry list (page, layer, status, q, sourceAgent)"
    in_query: ClassVar[bool] = True
    page: int = param(1, schema={"minimum": 1, "maximum": MAX_PAGE})
    page_size: int = param(PAGE_SIZE, schema={"minimum": 1, "maximum": MAX_PAGE_SIZE})
    layer: Layer | None = param(None, read=_layer, schema={"enum": ["L1", "L2", "L3", "Skill"]})
    status: str | None = param(None, read=_text)
    q: str | None = param(None, read=_text, doc="text the memory contains")
    source_agent: str | None = param(None, read=_text)
    excluded_source_agents: tuple[str, ...] = param((), read=_csv, schema=_CSV)


@dataclass(frozen=True)
class PanelTasks(Command):
    """``GET /api/v1/panel/tasks``: captured turns, newest first."""

    summary: ClassVar[str] = "Captured turns"
    in_query: ClassVar[bool] = True
    page: int = param(1, schema={"minimum": 1, "maximum": MAX_PAGE})
    q: str | None = param(None, read=_text)


@dataclass(frozen=True)
class MemoryLogs(Command):
    """``GET /api/v1/memory/logs``: memory_add / memory_search calls."""

    summary: ClassVar[str] = "memory_add / memory_search call logs"
    in_query: ClassVar[bool] = True
    limit: int = param(50, schema={"minimum": 1, "maximum": 500})
    offset: int = param(0, schema={"minimum": 0, "maximum": MAX_OFFSET})
    tools: tuple[str, ...] = param((), read=_csv, schema=_CSV)
    source_agent: str | None = param(None, read=_text)
    excluded_source_agents: tuple[str, ...] = param((), read=_csv, schema=_CSV)
