"""Requests about governance: tombstones, the logs page, the review queue and review decisions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from memmy.commands.base import Command, param
from memmy.commands.fields import loose_str
from memmy.commands.validate import opt_str
from memmy.errors import InvalidArgument

LOG_KINDS = ("audit", "api", "changes", "recalls")
#: The furthest a page may start (far beyond any real store; a bound keeps SQLite's 64-bit OFFSET in range).
MAX_OFFSET = 1_000_000_000


@dataclass(frozen=True)
class ListTombstones(Command):
    """``GET /api/v1/tombstones``: forgotten values, newest first."""

    summary: ClassVar[str] = "Forgotten values (content hash + memory key)"
    in_query: ClassVar[bool] = True
    limit: int = param(100, schema={"minimum": 1, "maximum": 10_000})
    offset: int = param(0, schema={"minimum": 0, "maximum": MAX_OFFSET})


@dataclass(frozen=True)
class RestoreTombstone(Command):
    """``POST /api/v1/tombstones/{id}/restore``: the value may be written again."""

    summary: ClassVar[str] = "Remove a tombstone so the value may come back"
    reason: str | None = None


@dataclass(frozen=True)
class ListLogs(Command):
    """``GET /api/v1/logs``: audit, API, change and recall logs."""

    summary: ClassVar[str] = "Audit, API, change and recall logs (kind, limit, offset)"
    in_query: ClassVar[bool] = True
    kind: Literal["audit", "api", "changes", "recalls"] = "audit"
    limit: int = param(50, schema={"minimum": 1, "maximum": 1000})
    offset: int = param(0, schema={"minimum": 0, "maximum": MAX_OFFSET})
    action: str | None = param(None, doc="only audit rows of this action")
    after: int | None = param(None, doc="rows after this id (follow)")


@dataclass(frozen=True)
class ReviewQueue(Command):
    """``GET /api/v1/review``: induced L2/L3/Skills by review state."""

    summary: ClassVar[str] = "The review queue of induced L2/L3/Skills (state)"
    in_query: ClassVar[bool] = True
    state: str = param("pending", schema={"description": "pending, approved or rejected"})
    limit: int = param(100, schema={"minimum": 1, "maximum": 1000})


def _decision(body: dict[str, Any], key: str) -> str:
    decision = opt_str(body, key)
    if decision not in ("approve", "reject"):
        raise InvalidArgument(f"{key}: expected 'approve' or 'reject'")
    return decision


@dataclass(frozen=True)
class ReviewDecision(Command):
    """``POST /api/v1/review/{id}``: approve (optionally edited) or reject one pending item."""

    summary: ClassVar[str] = "Approve (optionally edited) or reject a review item"
    decision: str = param(read=_decision, schema={"enum": ["approve", "reject"]})
    content: str | None = param(None, read=loose_str, doc="approve with this text instead (edit, then approve)")
    reason: str | None = None
