"""Requests about evolution: explicit feedback, episodes, evolution jobs, running the worker now."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from memmy.commands.base import Command, param
from memmy.commands.fields import TEXT
from memmy.commands.validate import opt_int, opt_list, opt_str, require_object
from memmy.errors import InvalidArgument

POLARITIES = ("positive", "negative", "neutral")


def _target(body: dict[str, Any], key: str) -> str:
    target = opt_str(body, key) or opt_str(body, "memoryId") or opt_str(body, "episodeId")
    if not target:
        raise InvalidArgument("id: expected a memory id (trace_/policy_/skill_…) or an episode id (episode_…)")
    return target


def _polarity(body: dict[str, Any], key: str) -> str:
    polarity = (opt_str(body, key) or "").lower()
    if polarity not in POLARITIES:
        raise InvalidArgument(f"{key}: expected positive, negative or neutral")
    return polarity


@dataclass(frozen=True)
class Feedback(Command):
    """``POST /api/v1/feedback``: explicit feedback on a memory or an episode (reward and guidance follow)."""

    summary: ClassVar[str] = "Explicit feedback on a memory or episode (reward, guidance)"
    alias_keys: ClassVar[dict[str, dict[str, Any]]] = {
        "memoryId": {**TEXT, "description": "another name for id"},
        "episodeId": {**TEXT, "description": "another name for id"},
    }
    id: str = param(read=_target, schema=TEXT, doc="a memory id (trace_/policy_/skill_…) or an episode id (episode_…)")
    polarity: str = param(read=_polarity, schema={"enum": list(POLARITIES)})
    magnitude: float = param(1.0, schema={"minimum": 0, "maximum": 1})
    note: str = param("")

    def audit_json(self) -> dict[str, Any]:
        """The request as the audit row records it."""
        return {"id": self.id, "polarity": self.polarity, "magnitude": self.magnitude, "note": self.note}


@dataclass(frozen=True)
class ListEpisodes(Command):
    """``GET /api/v1/episodes``: recent episodes."""

    summary: ClassVar[str] = "Recent episodes (status, limit)"
    in_query: ClassVar[bool] = True
    limit: int = param(50, schema={"minimum": 1, "maximum": 500})
    status: str | None = param(None, schema={"description": "open or closed"})


@dataclass(frozen=True)
class ListJobs(Command):
    """``GET /api/v1/evolution/jobs``: evolution jobs and per-status counts."""

    summary: ClassVar[str] = "Evolution jobs (status, type, episodeId, limit) and counts"
    in_query: ClassVar[bool] = True
    limit: int = param(100, schema={"minimum": 1, "maximum": 1000})
    status: str | None = None
    job_type: str | None = param(None, key="type")
    episode_id: str | None = None


def _targets(body: dict[str, Any], key: str) -> tuple[str, ...]:
    targets = opt_list(body, key)
    if not all(isinstance(t, str) for t in targets):
        raise InvalidArgument(f"{key}: expected an array of memory ids (strings)")
    return tuple(targets)


@dataclass(frozen=True)
class RunWorker(Command):
    """``POST /api/v1/worker/run``: run due embeddings, then up to ``limit`` evolution jobs, until idle."""

    summary: ClassVar[str] = "Run due embeddings and evolution jobs now"
    limit: int = param(20, schema={"minimum": 1, "maximum": 10_000})
    target_memory_ids: tuple[str, ...] = param((), read=_targets, schema={"type": "array", "items": {"type": "string"}})

    @classmethod
    def from_request(cls, body: object, query: Mapping[str, str], path: Mapping[str, str] | None = None) -> Self:
        """The body, with ``?limit=`` filling in a limit the body does not give."""
        data = require_object(body)
        if query.get("limit") and "limit" not in data:
            data = {**data, "limit": opt_int(dict(query), "limit", 20, minimum=1, maximum=10_000, strings=True)}
        return cls.from_json(data)
