"""Governance: the audit trail (who did what, when), its retention, the log readers, and the review queue.

Every governance action the facade runs (delete, forget, restore, correct, review, feedback, Dream run/restore,
export, import, wipe, config reload) is recorded here with the actor: the calling agent, ``cli`` or ``panel``.
Audit rows are kept forever unless ``audit.retentionDays`` is set; pruning is explicit and is itself audited.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from memmy.commands.answers import Analytics, LogsPage, ReviewDecided, ReviewPage, StatusSet
from memmy.commands.governance import ListLogs, ReviewDecision, ReviewQueue
from memmy.config import Configured, Settings
from memmy.domain import Memory, content_hash, summarise
from memmy.errors import Conflict, InvalidArgument, NotFound
from memmy.indexing import Indexer, embedding_text
from memmy.kinds import memory as stored
from memmy.namespace import Namespace
from memmy.service.memories import memory_item
from memmy.store.db import utc_now
from memmy.store.unit import Store

REVIEWED_LAYERS = ("L2", "L3", "Skill")
LOG_KINDS = ("audit", "api", "changes", "recalls")
ANALYTICS_TTL_S = 60.0


def brief(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result without its bulky lists, for an audit row's meta."""
    return {k: v for k, v in result.items() if not isinstance(v, list) or len(v) <= 20}


def actor_of(ns: Namespace) -> dict[str, Any]:
    """The audit ``actor``: which agent (or ``cli`` / ``panel``) and user."""
    return {"source": ns.source, "userId": ns.user_id}


class GovernanceOps(Configured):
    """Audit rows, log pages and the review queue over the service's store."""

    def __init__(self, settings: Settings, store: Store, indexer: Indexer) -> None:
        self.settings = settings
        self.store = store
        self.logs = store.logs
        self.audit_log = store.audit
        self.reads = store.panel_reads
        self.memories = store.memories
        self.indexer = indexer

    # -- audit ------------------------------------------------------------------------------------
    def record(
        self,
        action: str,
        target_kind: str,
        target_id: str,
        ns: Namespace,
        *,
        before: Any = None,
        after: Any = None,
        meta: Mapping[str, Any] | None = None,
    ) -> str:
        """Write one audit row; return its id."""
        return self.logs.audit(
            action,
            target_kind,
            target_id,
            user_id=ns.user_id,
            actor=actor_of(ns),
            before=before,
            after=after,
            meta=dict(meta) if meta is not None else None,
        )

    def retention_days(self) -> int:
        """``audit.retentionDays`` (0 = keep forever)."""
        return self.config.audit.retention_days

    def prune_if_due(self) -> int:
        """Apply the configured retention (the evolution worker calls this periodically); the prune is audited."""
        days = self.retention_days()
        if days <= 0:
            return 0
        cutoff = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        removed = self.audit_log.prune_audits(cutoff)
        if removed:
            self.logs.audit(
                "audit.prune",
                "audit_log",
                "audit_logs",
                user_id=None,
                actor={"source": "memmy-retention"},
                meta={"removed": removed, "before": cutoff, "retentionDays": days},
            )
        return removed

    def logs_page(self, cmd: ListLogs) -> LogsPage:
        """``GET /api/v1/logs?kind=audit|api|changes|recalls&limit=&offset=&action=&after=``."""
        kind, limit, offset, after_n = cmd.kind, cmd.limit, cmd.offset, cmd.after
        items: list[dict[str, Any]]
        total: int | None = None
        if kind == "audit":
            if after_n is not None:
                items = self.audit_log.audits_after(after_n, limit)
            else:
                items, total = self.audit_log.audits(action=cmd.action, limit=limit, offset=offset)
        elif kind == "changes":
            if after_n is not None:
                items = self.audit_log.changes(after_seq=after_n, limit=limit, newest_first=False)
            else:
                items = self.audit_log.changes(limit=limit)
        elif kind == "api":
            if after_n is not None:
                items = self.audit_log.api_after(after_n, limit)
            else:
                logs, total = self.logs.api_logs([], None, [], limit, offset)
                items = logs
        else:
            items, total = self.audit_log.recalls(limit, offset)
        return {
            "kind": kind,
            "items": items,
            "total": total,
            "retentionDays": self.retention_days(),
            "serverTime": utc_now(),
        }

    # -- review queue -----------------------------------------------------------------------------
    def review_required(self) -> bool:
        """``evolution.review: required`` in config."""
        return self.config.evolution.review == "required"

    def review_queue(self, cmd: ReviewQueue) -> ReviewPage:
        """Derived items (L2/L3/Skill) by review state (``?state=pending|approved|rejected``), newest first."""
        state, limit = cmd.state or "pending", cmd.limit
        if state == "pending":
            ids = self.reads.pending_review(limit)
        else:
            rows = self.store.query(
                "SELECT id FROM memories WHERE source_agent = 'memmy-evolution' "
                "AND memory_layer IN ('L2','L3','Skill') "
                f"AND json_extract(properties_json, '{stored.path(stored.REVIEW, stored.REVIEW_STATE)}') = ? "
                "ORDER BY updated_at DESC LIMIT ?",
                (state, limit),
            )
            ids = [str(row["id"]) for row in rows]
        items = []
        for memory_id in ids:
            memory = self.memories.get(memory_id)
            if memory is not None:
                items.append(
                    {**memory_item(memory), "content": memory.content, "review": stored.review(memory.properties)}
                )
        return {"state": state, "required": self.review_required(), "items": items, "serverTime": utc_now()}

    def _pending(self, memory_id: str) -> Memory:
        memory = self.memories.get(memory_id)
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        if memory.layer not in REVIEWED_LAYERS:
            raise InvalidArgument(f"memory {memory_id} is {memory.layer}; only L2, L3 and Skills are reviewed")
        review = stored.review(memory.properties) or {}
        if review.get("state") != "pending":
            raise Conflict(f"memory {memory_id} is not waiting for review (review state: {review.get('state')})")
        return memory

    def review(self, memory_id: str, cmd: ReviewDecision, ns: Namespace) -> ReviewDecided:
        """Approve (optionally with edited text: edit-then-approve) or reject one pending item; audited."""
        decision = cmd.decision
        memory = self._pending(memory_id)
        before = memory.snapshot()
        now = utc_now()
        review = stored.review(memory.properties) or {}
        review.update({"state": "approved" if decision == "approve" else "rejected", "decidedAt": now, "by": ns.source})
        note = cmd.reason
        if note:
            review["reason"] = note[:2000]
        edited = cmd.content
        if decision == "approve" and isinstance(edited, str) and edited.strip() and edited.strip() != memory.content:
            memory.content = edited.strip()[:20_000]
            memory.content_hash = content_hash(memory.content)
            memory.properties.pop(stored.EMBEDDING_TEXT, None)
            memory.properties = stored.with_values(memory.properties, **{stored.SUMMARY: summarise(memory.content)})
            review["edited"] = True
        memory.properties = stored.with_values(memory.properties, **{stored.REVIEW: review})
        memory.status = "activated" if decision == "approve" else "archived"
        memory.version += 1
        memory.updated_at = now
        with self.store.transaction():
            self.memories.update(memory, before, f"review.{decision}", ns.source)
            audit_id = self.record(
                f"review.{decision}", memory.kind, memory.id, ns, before=before, after=memory.snapshot(), meta=review
            )
        if memory.status == "activated":
            text = embedding_text(memory.layer, memory.title, memory.content, memory.properties)
            self.indexer.enqueue(memory.id, memory.layer, text[:3000])
        else:
            self.indexer.unindex(memory.id)
        return {"id": memory.id, "status": memory.status, "review": review, "auditId": audit_id, "serverTime": now}

    # -- status changes and analytics for the panel ------------------------------------------------
    def set_status(self, memory_id: str, status: str, ns: Namespace) -> StatusSet:
        """Archive or re-activate a memory (L2/L3/Skill archive/activate in the panel); audited."""
        if status not in ("activated", "archived"):
            raise InvalidArgument("status: expected 'activated' or 'archived'")
        memory = self.memories.get(memory_id)
        if memory is None:
            raise NotFound(f"memory {memory_id} not found")
        if memory.superseded_by:
            raise Conflict(f"memory {memory_id} was replaced by {memory.superseded_by}; change that version")
        review = stored.review(memory.properties) or {}
        if status == "activated" and review.get("state") in ("pending", "rejected"):
            raise Conflict(f"memory {memory_id} is {review['state']} in the review queue; decide it there")
        before = memory.snapshot()
        memory.status = status
        memory.version += 1
        memory.updated_at = utc_now()
        with self.store.transaction():
            self.memories.update(memory, before, "activate" if status == "activated" else "archive", ns.source)
            audit_id = self.record(
                "memory.activate" if status == "activated" else "memory.archive",
                memory.kind,
                memory.id,
                ns,
                before=before,
                after=memory.snapshot(),
            )
        if status == "activated":
            text = embedding_text(memory.layer, memory.title, memory.content, memory.properties)
            self.indexer.enqueue(memory.id, memory.layer, text[:3000])
        else:
            self.indexer.unindex(memory.id)
        return {"id": memory.id, "status": status, "auditId": audit_id, "serverTime": utc_now()}

    def analytics(self, days: int = 30) -> Analytics:
        """Injections and memories per day, hit rate, latency, top projects and agents (cached for a minute and
        refreshed behind the request after that)."""
        return self.reads.cached(
            f"analytics:{days}", ANALYTICS_TTL_S, lambda: self._analytics(days), refresh_behind=True
        )

    def _analytics(self, days: int) -> Analytics:
        start = (datetime.now(UTC) - timedelta(days=days - 1)).date().isoformat()
        per_day = self.store.query(
            "SELECT substr(created_at, 1, 10) AS day, COUNT(*) AS events, "
            "SUM(CASE WHEN json_array_length(injected_memory_ids_json) > 0 THEN 1 ELSE 0 END) AS hits, "
            "SUM(COALESCE(json_extract(request_json, '$.tokens'), 0)) AS tokens "
            "FROM recall_events WHERE created_at >= ? GROUP BY day ORDER BY day",
            (start,),
        )
        events = sum(int(r["events"]) for r in per_day)
        hits = sum(int(r["hits"] or 0) for r in per_day)
        # Grouped by the bare column: SQLite walks the (project_id, ...) index in order, no temporary b-tree.
        per_project = self.store.query(
            "SELECT project_id, COUNT(*) AS n FROM memories WHERE status != 'deleted' GROUP BY project_id"
        )
        projects = sorted(((r["project_id"] or "(none)", int(r["n"])) for r in per_project), key=lambda p: -p[1])
        agents = self.store.query(
            "SELECT source_agent, COUNT(*) AS n FROM memories WHERE status != 'deleted' "
            "GROUP BY source_agent ORDER BY n DESC LIMIT 10"
        )
        created = self.reads.daily_created(start)
        latencies = [v for values in self.logs.tool_latencies().values() for v in values]
        today = datetime.now(UTC).date().isoformat()
        today_row = next((r for r in per_day if r["day"] == today), None)
        return {
            "injectionsPerDay": [
                {"date": r["day"], "events": int(r["events"]), "hits": int(r["hits"] or 0), "tokens": int(r["tokens"])}
                for r in per_day
            ],
            "hitRate": round(hits / events, 4) if events else 0.0,
            "recallEvents": events,
            "injectedToday": {
                "events": int(today_row["hits"] or 0) if today_row else 0,
                "tokens": int(today_row["tokens"]) if today_row else 0,
            },
            "memoriesPerDay": [
                {"date": day, "count": sum(layers.values()), "layers": layers}
                for day, layers in sorted(created.items())
            ],
            "avgApiLatencyMs": round(sum(latencies) / len(latencies), 2) if latencies else 0.0,
            "p95ApiLatencyMs": round(sorted(latencies)[int(0.95 * (len(latencies) - 1))], 2) if latencies else 0.0,
            "topProjects": [{"project": project, "count": n} for project, n in projects[:10]],
            "topAgents": [{"agent": r["source_agent"], "count": int(r["n"])} for r in agents],
            "serverTime": utc_now(),
        }
