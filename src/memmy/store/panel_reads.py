"""Index-friendly reads for the Memory panel at 100k memories (counts and newest-first pages without full scans).

The general ``MemoryRepository.page`` counts and sorts the whole visible set; the panel instead walks the
``(user_id, memory_layer, status, updated_at)`` and ``(source_agent, memory_layer, status)`` indexes. Counting
100k index entries still takes tens of milliseconds, so the per-(user, layer, status) counts are computed in one
covering-index pass and kept for ``COUNTS_TTL_S`` seconds, then refreshed behind the next request: the panel's
totals may lag that long (plus one refresh) behind agents' writes; the panel's own changes clear the cache.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from memmy.domain import Memory
from memmy.kinds import memory as stored
from memmy.store.db import Database, utc_now
from memmy.store.memories import _COLUMNS, row_to_memory

LAYERS = ("L1", "L2", "L3", "Skill")
STATUSES = ("activated", "resolving", "archived", "deleted")
COUNTS_TTL_S = 10.0
log = logging.getLogger("memmy.panel")
T = TypeVar("T")


class PanelReads:
    """Counts and pages the panel shows on every request."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}
        self._refreshing: set[str] = set()

    def cached(self, key: str, ttl_s: float, compute: Callable[[], T], refresh_behind: bool = False) -> T:
        """``compute()`` at most once per ``ttl_s`` seconds for ``key``.

        With ``refresh_behind`` an expired value is still answered while one background thread computes the next
        (so only the first request after a start or an ``invalidate`` waits for an expensive aggregate).
        """
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < ttl_s:
                return hit[1]  # type: ignore[no-any-return]
            if hit is not None and refresh_behind:
                if key not in self._refreshing:
                    self._refreshing.add(key)
                    threading.Thread(target=self._refresh, args=(key, compute), daemon=True).start()
                return hit[1]  # type: ignore[no-any-return]
        value = compute()
        with self._lock:
            self._cache[key] = (now, value)
        return value

    def _refresh(self, key: str, compute: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            value = compute()
        except Exception:  # noqa: BLE001 - the next request computes it again (e.g. the store was closed)
            log.debug("panel cache refresh of %s failed", key, exc_info=True)
        else:
            with self._lock:
                if key in self._cache:  # not invalidated meanwhile
                    self._cache[key] = (started, value)
        finally:
            with self._lock:
                self._refreshing.discard(key)

    def invalidate(self) -> None:
        """Drop cached counts (after the panel itself changed something)."""
        with self._lock:
            self._cache.clear()

    def grouped_counts(self) -> dict[tuple[str, str, str], int]:
        """(user, layer, status) -> count, from one covering-index pass, cached briefly."""

        def compute() -> dict[tuple[str, str, str], int]:
            rows = self.db.query(
                "SELECT user_id, memory_layer, status, COUNT(*) FROM memories GROUP BY user_id, memory_layer, status"
            )
            return {(str(u), str(layer), str(st)): int(n) for u, layer, st, n in rows}

        return self.cached("counts", COUNTS_TTL_S, compute, refresh_behind=True)

    def users(self) -> list[str]:
        """Every user namespace in the store."""
        return sorted({user for user, _, _ in self.grouped_counts()})

    def counts(self) -> dict[str, dict[str, int]]:
        """layer -> status -> count."""
        out: dict[str, dict[str, int]] = {layer: {} for layer in LAYERS}
        for (_, layer, status), n in self.grouped_counts().items():
            bucket = out.setdefault(layer, {})
            bucket[status] = bucket.get(status, 0) + n
        return out

    def by_source(self) -> list[tuple[str, int]]:
        """Live memories per source agent, largest first (index-only, cached briefly)."""

        def compute() -> list[tuple[str, int]]:
            rows = self.db.query(
                "SELECT source_agent, COUNT(*) AS n FROM memories WHERE status = 'activated' "
                "GROUP BY source_agent ORDER BY n DESC"
            )
            return [(str(r[0]), int(r[1])) for r in rows]

        return self.cached("sources", COUNTS_TTL_S, compute)

    def last_seen_by_source(self) -> dict[str, str]:
        """Each agent's newest session activity (hooks, plugins and MCP open sessions; imports do not), cached."""

        def compute() -> dict[str, str]:
            rows = self.db.query("SELECT source, MAX(last_seen_at) FROM sessions GROUP BY source")
            return {str(r[0]): str(r[1]) for r in rows if r[1]}

        return self.cached("last_seen", COUNTS_TTL_S, compute)

    def injected_today(self, today: str) -> dict[str, int]:
        """Recall events since ``today`` (ISO date) that injected something, and their injected tokens (a range on
        ``idx_recall_events_created``; cached like the counts)."""

        def compute() -> dict[str, int]:
            row = self.db.query_one(
                "SELECT COUNT(*), SUM(COALESCE(json_extract(request_json, '$.tokens'), 0)) FROM recall_events "
                "WHERE created_at >= ? AND json_array_length(injected_memory_ids_json) > 0",
                (today,),
            )
            return {"events": int(row[0] or 0) if row else 0, "tokens": int(row[1] or 0) if row else 0}

        return self.cached(f"injected:{today}", COUNTS_TTL_S, compute, refresh_behind=True)

    def page(
        self,
        *,
        layers: tuple[str, ...] = (),
        status: str = "activated",
        source_agent: str | None = None,
        project_id: str | None = None,
        changed_from: str | None = None,
        changed_before: str | None = None,
        offset: int = 0,
        limit: int = 25,
    ) -> tuple[list[Memory], int]:
        """Newest-first page of memories in one status; merged from per-(user, layer) index walks.

        ``changed_from`` / ``changed_before`` (ISO timestamps or dates) keep memories last changed in
        ``[changed_from, changed_before)``: a range on the ``updated_at`` column the indexes already order by.
        """
        layers = layers or LAYERS
        wanted = offset + limit
        now = utc_now()
        live = " AND (valid_to IS NULL OR valid_to > ?)" if status == "activated" else ""
        dated = ""
        date_params: list[Any] = []
        if changed_from:
            dated += " AND updated_at >= ?"
            date_params.append(changed_from)
        if changed_before:
            dated += " AND updated_at < ?"
            date_params.append(changed_before)
        streams: list[list[Memory]] = []
        total = 0
        for layer in layers:
            if project_id:
                both = " AND source_agent = ?" if source_agent else ""
                keys: list[tuple[str, list[Any]]] = [
                    (
                        f"project_id = ? AND memory_layer = ? AND status = ?{both}",
                        [project_id, layer, status, *([source_agent] if source_agent else [])],
                    )
                ]
            elif source_agent:
                keys = [("source_agent = ? AND memory_layer = ? AND status = ?", [source_agent, layer, status])]
            else:
                keys = [
                    ("user_id = ? AND memory_layer = ? AND status = ?", [user, layer, status]) for user in self.users()
                ]
            for where, params in keys:
                extra = [now] if live else []
                rows = self.db.query(
                    f"SELECT {_COLUMNS} FROM memories m WHERE {where}{dated}{live} ORDER BY updated_at DESC LIMIT ?",
                    [*params, *date_params, *extra, wanted],
                )
                streams.append([row_to_memory(r) for r in rows])
                if source_agent or project_id or dated:
                    counted = self.db.query_one(
                        f"SELECT COUNT(*) FROM memories WHERE {where}{dated}", [*params, *date_params]
                    )
                    total += int(counted[0]) if counted else 0
                else:
                    total += self.grouped_counts().get((params[0], layer, status), 0)
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
            f"AND json_extract(properties_json, '{stored.path(stored.REVIEW, stored.REVIEW_STATE)}') = 'pending' "
            "ORDER BY updated_at DESC LIMIT ?",
            (limit,),
        )
        return [str(r[0]) for r in rows]

    def recall_count(self) -> int:
        """Recall events stored."""
        row = self.db.query_one("SELECT COUNT(*) FROM recall_events")
        return int(row[0]) if row else 0
