"""Requests of the panel's read models: the entry list, captured turns, the memory call logs.

Their numbers are clamped rather than refused (a page below 1 is page 1, a page size over 100 is 100), as the
panel's links have always been read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from memmy.commands.base import Command, param
from memmy.commands.validate import layer_of
from memmy.domain import Layer
from memmy.errors import InvalidArgument

PAGE_SIZE = 20
MAX_PAGE_SIZE = 100


def clamped(default: int, *, minimum: int = 0, maximum: int | None = None) -> Callable[[dict[str, Any], str], int]:
    """An integer clamped into ``[minimum, maximum]`` (absent or empty: ``default``; not a number: 400)."""

    def read(body: dict[str, Any], key: str) -> int:
        raw = body.get(key)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidArgument(f"{key}: expected an integer, got {raw!r}") from None
        value = max(value, 0)
        value = min(value, maximum) if maximum is not None else value
        return max(value, minimum)

    return read


def _csv(body: dict[str, Any], key: str) -> tuple[str, ...]:
    value = body.get(key)
    return tuple(v.strip() for v in str(value or "").split(",") if v.strip())


def _layer(body: dict[str, Any], key: str) -> Layer | None:
    return layer_of(body[key], key) if body.get(key) else None


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    return str(value) if value else None


_INT = {"type": "integer"}
_CSV = {"type": "string", "description": "comma-separated"}


@dataclass(frozen=True)
class PanelItems(Command):
    """``GET /api/v1/panel/items``: a page of memories."""

    summary: ClassVar[str] = "Entry list (page, layer, status, q, sourceAgent)"
    in_query: ClassVar[bool] = True
    page: int = param(1, read=clamped(1, minimum=1), schema=_INT)
    page_size: int = param(PAGE_SIZE, read=clamped(PAGE_SIZE, minimum=1, maximum=MAX_PAGE_SIZE), schema=_INT)
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
    page: int = param(1, read=clamped(1, minimum=1), schema=_INT)
    q: str | None = param(None, read=_text)


@dataclass(frozen=True)
class MemoryLogs(Command):
    """``GET /api/v1/memory/logs``: memory_add / memory_search calls."""

    summary: ClassVar[str] = "memory_add / memory_search call logs"
    in_query: ClassVar[bool] = True
    limit: int = param(50, read=clamped(50, minimum=1, maximum=500), schema=_INT)
    offset: int = param(0, read=clamped(0), schema=_INT)
    tools: tuple[str, ...] = param((), read=_csv, schema=_CSV)
    source_agent: str | None = param(None, read=_text)
    excluded_source_agents: tuple[str, ...] = param((), read=_csv, schema=_CSV)
