"""Append-only logs and small key/value tables: change log, audit log, API log, idempotency, recall events."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from memmy.domain import Memory, new_id, stable_json
from memmy.errors import StorageFullError
from memmy.store.db import Database, utc_now
from memmy.store.jsontext import dumps_json

log = logging.getLogger("memmy.store")


def _json(value: Any) -> str | None:
    return None if value is None else dumps_json(value)


_CHANGE_SQL = (
    "INSERT INTO memory_change_log(memory_id, namespace_id, kind, op, entity_id, user_id, change_type, "
    "version, before_json, after_json, source, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)


def change_row(
    memory: Memory,
    change_type: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    source: str,
    now: str | None = None,
) -> tuple[Any, ...]:
    """The parameters of one memory_change_log row (logged ``now``, default the current time)."""
    return (
        memory.id,
        memory.project_id,
        memory.kind,
        "delete" if change_type == "delete" else ("insert" if change_type == "create" else "update"),
        memory.id,
        memory.user_id,
        change_type,
        memory.version,
        _json(before),
        _json(after),
        source,
        now or utc_now(),
    )


def append_change(
    conn: sqlite3.Connection,
    memory: Memory,
    change_type: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    source: str,
) -> int:
    """Append one memory_change_log row inside the caller's transaction; return its seq."""
    cursor = conn.execute(_CHANGE_SQL, change_row(memory, change_type, before, after, source))
    return int(cursor.lastrowid or 0)


def append_creations(conn: sqlite3.Connection, memories: Sequence[Memory], source: str) -> None:
    """Append the ``create`` rows of many new memories in one statement, inside the caller's transaction."""
    now = utc_now()  # one statement, one time
    conn.executemany(_CHANGE_SQL, [change_row(m, "create", None, m.snapshot(), source, now) for m in memories])


class LogRepository:
    """Writes and reads the service's logs."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._batch = threading.local()

    @contextmanager
    def together(self) -> Iterator[None]:
        """The log rows written inside (:meth:`api_call`, :meth:`recall_event`) go to the store at the end, in one
        transaction: on PostgreSQL one round trip instead of three for each row's own transaction."""
        pending: list[tuple[str, str, tuple[Any, ...]]] | None = getattr(self._batch, "rows", None)
        if pending is not None:  # an outer batch writes them
            yield
            return
        self._batch.rows = pending = []
        try:
            yield
        finally:
            self._batch.rows = None
            if pending:
                self._write(", ".join(dict.fromkeys(what for what, _, _ in pending)), [(s, p) for _, s, p in pending])

    def _best_effort(self, what: str, sql: str, params: tuple[Any, ...]) -> None:
        """A log write of its own that may fail (disk full, read-only store) without failing the call that was
        already committed, whether the write or its ``BEGIN`` fails (inside :meth:`together`: at its end).

        Inside a caller's transaction the failure is the caller's: it is raised, so nothing half-written is
        acknowledged.
        """
        pending: list[tuple[str, str, tuple[Any, ...]]] | None = getattr(self._batch, "rows", None)
        if pending is not None:
            pending.append((what, sql, params))
            return
        self._write(what, [(sql, params)])

    def _write(self, what: str, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self.db.lock:
            nested = self.db.in_transaction()
            try:
                self.db.write_all(statements)
            except (StorageFullError, sqlite3.OperationalError) as exc:
                if nested:
                    raise
                log.warning("%s not recorded: %s", what, exc)

    def latest_change_seq(self) -> int:
        """The newest memory_change_log sequence number (0 when empty)."""
        row = self.db.query_one("SELECT MAX(seq) FROM memory_change_log")
        return int(row[0] or 0) if row else 0

    def changes_for(self, memory_id: str) -> list[dict[str, Any]]:
        """Every change-log row of one memory, oldest first."""
        rows = self.db.query(
            "SELECT seq, change_type, version, before_json, after_json, source, created_at "
            "FROM memory_change_log WHERE memory_id = ? ORDER BY seq",
            (memory_id,),
        )
        return [
            {
                "seq": r["seq"],
                "changeType": r["change_type"],
                "version": r["version"],
                "before": json.loads(r["before_json"]) if r["before_json"] else None,
                "after": json.loads(r["after_json"]) if r["after_json"] else None,
                "source": r["source"],
                "createdAt": r["created_at"],
            }
            for r in rows
        ]

    def audit(
        self,
        action: str,
        target_kind: str,
        target_id: str,
        *,
        user_id: str | None,
        actor: dict[str, Any],
        before: Any = None,
        after: Any = None,
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Record a governance action (delete, archive, restore ...); return the audit id."""
        audit_id = new_id("audit")
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO audit_logs(id, user_id, session_id, actor_json, action, target_kind, target_id, "
                "before_json, after_json, meta_json, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    audit_id,
                    user_id,
                    None,
                    _json(actor),
                    action,
                    target_kind,
                    target_id,
                    _json(before),
                    _json(after),
                    _json(meta or {}),
                    utc_now(),
                ),
            )
        return audit_id

    def audits_for(self, target_id: str) -> list[sqlite3.Row]:
        """Audit rows about one target, oldest first."""
        return self.db.query("SELECT * FROM audit_logs WHERE target_id = ? ORDER BY created_at", (target_id,))

    def api_call(
        self,
        tool_name: str,
        source_agent: str,
        payload: Any,
        result: Any,
        duration_ms: float,
        success: bool,
        user_id: str | None = None,
    ) -> None:
        """Record one memory_add / memory_search call for the logs page and latency analysis (best effort: a full
        disk loses the log line, never the call)."""
        self._best_effort(
            "API log",
            "INSERT INTO api_logs(tool_name, source_agent, input_json, output_json, duration_ms, success, "
            "called_at, user_id) VALUES (?,?,?,?,?,?,?,?)",
            (tool_name, source_agent, _json(payload), _json(result), duration_ms, int(success), utc_now(), user_id),
        )

    def api_logs(
        self,
        tools: list[str],
        source_agent: str | None,
        excluded_sources: list[str],
        limit: int,
        offset: int,
    ) -> tuple[list[dict[str, Any]], int]:
        """Page through API logs, newest first."""
        where = ["1=1"]
        params: list[Any] = []
        if tools:
            where.append(f"tool_name IN ({','.join('?' * len(tools))})")
            params.extend(tools)
        if source_agent:
            where.append("source_agent = ?")
            params.append(source_agent)
        if excluded_sources:
            where.append(f"COALESCE(source_agent,'') NOT IN ({','.join('?' * len(excluded_sources))})")
            params.extend(excluded_sources)
        clause = " AND ".join(where)
        total_row = self.db.query_one(f"SELECT COUNT(*) FROM api_logs WHERE {clause}", params)
        rows = self.db.query(
            f"SELECT * FROM api_logs WHERE {clause} ORDER BY id DESC LIMIT ? OFFSET ?", [*params, limit, offset]
        )
        logs = [
            {
                "id": r["id"],
                "toolName": r["tool_name"],
                "sourceAgent": r["source_agent"],
                "input": json.loads(r["input_json"]) if r["input_json"] else None,
                "output": json.loads(r["output_json"]) if r["output_json"] else None,
                "durationMs": r["duration_ms"],
                "success": bool(r["success"]),
                "calledAt": r["called_at"],
            }
            for r in rows
        ]
        return logs, int(total_row[0]) if total_row else 0

    def tool_latencies(self) -> dict[str, list[float]]:
        """Durations of logged calls per tool, for the analysis panel."""
        rows = self.db.query("SELECT tool_name, duration_ms FROM api_logs ORDER BY id DESC LIMIT 10000")
        out: dict[str, list[float]] = {}
        for row in rows:
            out.setdefault(row["tool_name"], []).append(float(row["duration_ms"] or 0.0))
        return out

    def idempotent_response(self, key: str) -> tuple[str, dict[str, Any]] | None:
        """The stored (request hash, response) for an idempotency key, if any."""
        row = self.db.query_one("SELECT request_hash, response_json FROM idempotency_keys WHERE key = ?", (key,))
        if row is None:
            return None
        return row["request_hash"], json.loads(row["response_json"])

    def store_idempotent_response(self, key: str, request_hash: str, response: dict[str, Any]) -> None:
        """Remember the answer to an idempotent request (first write wins)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO idempotency_keys(key, request_hash, response_json, created_at) VALUES (?,?,?,?)",
                (key, request_hash, stable_json(response), utc_now()),
            )

    def recall_event(
        self,
        *,
        session_id: str | None,
        turn_id: str | None,
        user_id: str | None,
        query: str,
        query_hash: str,
        layers: list[str],
        candidate_ids: list[str],
        hit_ids: list[str],
        injected_ids: list[str],
        request: dict[str, Any],
    ) -> str:
        """Record one recall (search or turn start); return the search event id (best effort, like the API log)."""
        event_id = new_id("recall")
        self._best_effort(
            "recall event",
            "INSERT INTO recall_events(id, session_id, turn_id, user_id, query, query_hash, layers_json, "
            "candidate_memory_ids_json, injected_memory_ids_json, hit_memory_ids_json, request_json, "
            "created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                event_id,
                session_id,
                turn_id,
                user_id,
                query,
                query_hash,
                _json(layers),
                _json(candidate_ids),
                _json(injected_ids),
                _json(hit_ids),
                _json(request),
                utc_now(),
            ),
        )
        return event_id

    def recall_stats(self) -> tuple[int, float, float]:
        """(number of recall events, mean hits per event, mean relevance of the best hit)."""
        row = self.db.query_one(
            "SELECT COUNT(*), AVG(json_array_length(hit_memory_ids_json)), "
            "AVG(json_extract(request_json, '$.topScore')) FROM recall_events"
        )
        if row is None:
            return 0, 0.0, 0.0
        return int(row[0] or 0), float(row[1] or 0.0), float(row[2] or 0.0)

    def kv_get(self, key: str) -> Any:
        """A runtime_kv value (decoded JSON) or None."""
        row = self.db.query_one("SELECT value_json FROM runtime_kv WHERE key = ?", (key,))
        return json.loads(row["value_json"]) if row else None

    def kv_set(self, key: str, value: Any) -> None:
        """Upsert a runtime_kv value."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO runtime_kv(key, value_json, updated_at) VALUES (?,?,?) "
                "ON CONFLICT(key) DO UPDATE SET value_json = excluded.value_json, updated_at = excluded.updated_at",
                (key, stable_json(value), utc_now()),
            )


def _row_json(value: str | None) -> Any:
    return json.loads(value) if value else None


class AuditLog:
    """Reads of the audit, change and recall logs for ``memmy-memory logs`` and the panel; explicit pruning only."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def audits(
        self, *, action: str | None = None, since_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[dict[str, Any]], int]:
        """Audit rows newest first (``action`` may end in ``*`` for a prefix); with the total count."""
        where: list[str] = ["1=1"]
        params: list[Any] = []
        if action:
            if action.endswith("*"):
                where.append("action LIKE ?")
                params.append(action[:-1] + "%")
            else:
                where.append("action = ?")
                params.append(action)
        clause = " AND ".join(where)
        total = self.db.query_one(f"SELECT COUNT(*) FROM audit_logs WHERE {clause}", params)
        rows = self.db.query(
            f"SELECT rowid AS n, * FROM audit_logs WHERE {clause} "
            "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [self._audit(r) for r in rows], int(total[0]) if total else 0

    def audits_after(self, rowid: int, limit: int = 500) -> list[dict[str, Any]]:
        """Audit rows written after ``rowid``, oldest first (``logs --follow``)."""
        rows = self.db.query(
            "SELECT rowid AS n, * FROM audit_logs WHERE rowid > ? ORDER BY rowid LIMIT ?", (rowid, limit)
        )
        return [self._audit(r) for r in rows]

    def audits_of(self, target_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """Audit rows about one target, newest first."""
        rows = self.db.query(
            "SELECT rowid AS n, * FROM audit_logs WHERE target_id = ? ORDER BY created_at DESC LIMIT ?",
            (target_id, limit),
        )
        return [self._audit(r) for r in rows]

    @staticmethod
    def _audit(r: sqlite3.Row) -> dict[str, Any]:
        return {
            "n": r["n"],
            "id": r["id"],
            "action": r["action"],
            "actor": _row_json(r["actor_json"]) or {},
            "targetKind": r["target_kind"],
            "targetId": r["target_id"],
            "userId": r["user_id"],
            "before": _row_json(r["before_json"]),
            "after": _row_json(r["after_json"]),
            "meta": _row_json(r["meta_json"]) or {},
            "createdAt": r["created_at"],
        }

    def changes(self, *, after_seq: int = 0, limit: int = 100, newest_first: bool = True) -> list[dict[str, Any]]:
        """Memory change-log rows (newest first, or oldest first after ``after_seq`` for ``--follow``)."""
        if newest_first:
            rows = self.db.query(
                "SELECT seq, memory_id, kind, change_type, version, source, created_at FROM memory_change_log "
                "ORDER BY seq DESC LIMIT ?",
                (limit,),
            )
        else:
            rows = self.db.query(
                "SELECT seq, memory_id, kind, change_type, version, source, created_at FROM memory_change_log "
                "WHERE seq > ? ORDER BY seq LIMIT ?",
                (after_seq, limit),
            )
        return [
            {
                "seq": r["seq"],
                "memoryId": r["memory_id"],
                "kind": r["kind"],
                "changeType": r["change_type"],
                "version": r["version"],
                "source": r["source"],
                "createdAt": r["created_at"],
            }
            for r in rows
        ]

    def api_after(self, row_id: int, limit: int = 500) -> list[dict[str, Any]]:
        """API log rows after ``row_id``, oldest first (``logs --api --follow``)."""
        rows = self.db.query(
            "SELECT id, tool_name, source_agent, duration_ms, success, called_at FROM api_logs WHERE id > ? "
            "ORDER BY id LIMIT ?",
            (row_id, limit),
        )
        return [
            {
                "id": r["id"],
                "toolName": r["tool_name"],
                "sourceAgent": r["source_agent"],
                "durationMs": r["duration_ms"],
                "success": bool(r["success"]),
                "calledAt": r["called_at"],
            }
            for r in rows
        ]

    def recalls(self, limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Recall events (turn start and search) newest first, with what they injected."""
        total = self.db.query_one("SELECT COUNT(*) FROM recall_events")
        rows = self.db.query(
            "SELECT * FROM recall_events ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?", (limit, offset)
        )
        return [self._recall(r) for r in rows], int(total[0]) if total else 0

    def recall(self, event_id: str) -> dict[str, Any] | None:
        """One recall event by id."""
        row = self.db.query_one("SELECT * FROM recall_events WHERE id = ?", (event_id,))
        return self._recall(row) if row is not None else None

    def recalls_of(self, memory_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """Recall events that injected or hit one memory, newest first."""
        pattern = f'%"{memory_id}"%'
        rows = self.db.query(
            "SELECT * FROM recall_events WHERE injected_memory_ids_json LIKE ? OR hit_memory_ids_json LIKE ? "
            "ORDER BY created_at DESC LIMIT ?",
            (pattern, pattern, limit),
        )
        return [self._recall(r) for r in rows]

    @staticmethod
    def _recall(r: sqlite3.Row) -> dict[str, Any]:
        return {
            "id": r["id"],
            "sessionId": r["session_id"],
            "turnId": r["turn_id"],
            "query": r["query"],
            "layers": _row_json(r["layers_json"]) or [],
            "candidateIds": _row_json(r["candidate_memory_ids_json"]) or [],
            "injectedIds": _row_json(r["injected_memory_ids_json"]) or [],
            "hitIds": _row_json(r["hit_memory_ids_json"]) or [],
            "request": _row_json(r["request_json"]) or {},
            "createdAt": r["created_at"],
        }

    def prune_audits(self, before: str) -> int:
        """Delete audit rows older than ``before`` (ISO time); return how many (the caller audits the prune)."""
        with self.db.transaction() as conn:
            cursor = conn.execute("DELETE FROM audit_logs WHERE created_at < ?", (before,))
        return int(cursor.rowcount or 0)
