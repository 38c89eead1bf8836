"""Index-friendly reads for the Memory panel at 100k memories (counts and newest-first pages without full scans).

The general ``MemoryRepository.page`` counts and sorts the whole visible set; the panel instead walks the
``(user_id, memory_layer, status, updated_at)`` and ``(source_agent, memory_layer, status)`` indexes.
"""

from __future__ import annotations

import heapq
from typing import Any

from memmy.domain import Memory
from memmy.store.db import Database, utc_now
from memmy.store.memories import _COLUMNS, row_to_memory

LAYERS = ("L1", "L2", "L3", "Skill")
STATUSES = ("activated", "resolving", "archived", "deleted")


class PanelReads:
    """Counts and pages the panel shows on every request."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def users(self) -> list[str]:
        """Every user namespace in the store (an index-only scan)."""
        return [r[0] for r in self.db.query("SELECT DISTINCT user_id FROM memories")]

    def counts(self) -> dict[str, dict[str, int]]:
        """layer -> status -> count (index-only)."""
        rows = self.db.query("SELECT memory_layer, status, COUNT(*) FROM memories GROUP BY memory_layer, status")
        out: dict[str, dict[str, int]] = {layer: {} for layer in LAYERS}
        for layer, status, n in rows:
            out.setdefault(layer, {})[status] = int(n)
        return out

    def by_source(self) -> list[tuple[str, int]]:
        """Live memories per source agent, largest first (index-only)."""
        rows = self.db.query(
            "SELECT source_agent, COUNT(*) AS n FROM memories WHERE status = 'activated' "
            "GROUP BY source_agent ORDER BY n DESC"
        )
        return [(str(r[0]), int(r[1])) for r in rows]

    def page(
        self,
        *,
        layers: tuple[str, ...] = (),
        status: str = "activated",
        source_agent: str | None = None,
        offset: int = 0,
        limit: int = 25,
    ) -> tuple[list[Memory], int]:
        """Newest-first page of memories in one status; merged from per-(user, layer) index walks."""
        layers = layers or LAYERS
        wanted = offset + limit
        now = utc_now()
        live = " AND (valid_to IS NULL OR valid_to > ?)" if status == "activated" else ""
        streams: list[list[Memory]] = []
        total = 0
        for layer in layers:
            if source_agent:
                keys: list[tuple[str, list[Any]]] = [
                    ("source_agent = ? AND memory_layer = ? AND status = ?", [source_agent, layer, status])
                ]
            else:
                keys = [
                    ("user_id = ? AND memory_layer = ? AND status = ?", [user, layer, status]) for user in self.users()
                ]
            for where, params in keys:
                extra = [now] if live else []
                rows = self.db.query(
                    f"SELECT {_COLUMNS} FROM memories m WHERE {where}{live} ORDER BY updated_at DESC LIMIT ?",
                    [*params, *extra, wanted],
                )
                streams.append([row_to_memory(r) for r in rows])
                counted = self.db.query_one(f"SELECT COUNT(*) FROM memories WHERE {where}", params)
                total += int(counted[0]) if counted else 0
        merged = heapq.merge(*streams, key=lambda m: m.updated_at, reverse=True)
        return list(merged)[offset:wanted], total

    def daily_created(self, since: str) -> dict[str, dict[str, int]]:
        """Memories created per UTC day and layer since ``since`` (one pass)."""
        rows = self.db.query(
            "SELECT substr(created_at, 1, 10) AS day, memory_layer, COUNT(*) FROM memories WHERE created_at >= ? "
            "GROUP BY day, memory_layer",
            (since,),
        )
        out: dict[str, dict[str, int]] = {}
        for day, layer, n in rows:
            out.setdefault(str(day), {})[str(layer)] = int(n)
        return out

    def pending_review(self, limit: int = 1000) -> list[str]:
        """Ids of derived items waiting for review (evolution writes them, so its source's index narrows it)."""
        rows = self.db.query(
            "SELECT id FROM memories WHERE source_agent = 'memmy-evolution' AND memory_layer IN ('L2','L3','Skill') "
            "AND json_extract(properties_json, '$.review.state') = 'pending' ORDER BY updated_at DESC LIMIT ?",
            (limit,),
        )
        return [str(r[0]) for r in rows]

    def recall_count(self) -> int:
        """Recall events stored."""
        row = self.db.query_one("SELECT COUNT(*) FROM recall_events")
        return int(row[0]) if row else 0
