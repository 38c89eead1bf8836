"""The embedding retry queue and per-memory processing state.

A write never waits for its embedding: it enqueues the text here (durably, in the same store) and a
background worker embeds due rows in batches. Failures back off exponentially and, after
``max_attempts``, leave the memory ``failed`` (still found by full-text search) with a retry action.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memmy.store.db import Database, utc_now

BASE_BACKOFF_MS = 60 * 1000
MAX_BACKOFF_MS = 60 * 60 * 1000
LEASE_MS = 5 * 60 * 1000


def now_ms() -> int:
    """Wall clock in integer milliseconds (the queue's time unit)."""
    return int(time.time() * 1000)


def backoff_ms(attempts: int) -> int:
    """Delay before the next try after ``attempts`` failures: 60 s * 2^(n-1), capped at one hour."""
    return int(min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** max(0, min(attempts - 1, 16))))


@dataclass(frozen=True)
class QueueItem:
    """One embedding job."""

    id: int
    target_kind: str
    target_id: str
    vector_field: str
    source_text: str
    role: str
    attempts: int
    max_attempts: int


_STATE_SQL = (
    "INSERT INTO memory_processing_state(memory_id, state, stage, attempt_count, updated_at) "
    "SELECT ?,?,?,?,? WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?) "  # a deleted memory has no state
    "ON CONFLICT(memory_id) DO UPDATE SET state=excluded.state, stage=excluded.stage, "
    "attempt_count=COALESCE(?, attempt_count), error_code=CASE WHEN excluded.state='failed' "
    "THEN error_code ELSE NULL END, error_message=CASE WHEN excluded.state='failed' THEN error_message "
    "ELSE NULL END, updated_at=excluded.updated_at"
)


class EmbeddingQueue:
    """Durable queue of texts waiting for an embedding, plus the memory_processing_state rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def enqueue(self, target_kind: str, target_id: str, field: str, text: str, role: str = "document") -> None:
        """Queue (or re-queue) one text; resets attempts when it was already there."""
        self.enqueue_many([(target_kind, target_id, field, text)], role)

    def enqueue_many(self, items: Sequence[tuple[str, str, str, str]], role: str = "document") -> None:
        """Queue (or re-queue) texts ``(target kind, target id, field, text)`` in two statements."""
        now = now_ms()
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO embedding_retry_queue(target_kind, target_id, vector_field, source_text, embed_role, "
                "status, attempts, next_attempt_at, created_at, updated_at) VALUES (?,?,?,?,?,'pending',0,?,?,?) "
                "ON CONFLICT(target_kind, target_id, vector_field) DO UPDATE SET source_text=excluded.source_text, "
                "embed_role=excluded.embed_role, status='pending', attempts=0, "
                "next_attempt_at=excluded.next_attempt_at, "
                "last_error=NULL, updated_at=excluded.updated_at",
                [(kind, target, fld, text, role, now, now, now) for kind, target, fld, text in items],
            )
            stamp = utc_now()
            conn.executemany(
                _STATE_SQL,
                [(target, "embedding_pending", "embedding", 0, stamp, target, None) for _k, target, _f, _t in items],
            )

    def claim_due(self, limit: int, worker: str, lease_ms: int = LEASE_MS) -> list[QueueItem]:
        """Lease up to ``limit`` due rows (pending, or in_progress with an expired lease)."""
        now = now_ms()
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT id, target_kind, target_id, vector_field, source_text, embed_role, attempts, max_attempts "
                "FROM embedding_retry_queue WHERE (status = 'pending' AND next_attempt_at <= ?) "
                "OR (status = 'in_progress' AND lease_until < ?) ORDER BY next_attempt_at, id LIMIT ?",
                (now, now, limit),
            ).fetchall()
            items = [QueueItem(*tuple(r)) for r in rows]
            for item in items:
                conn.execute(
                    "UPDATE embedding_retry_queue SET status='in_progress', claimed_by=?, lease_until=?, "
                    "updated_at=? WHERE id=?",
                    (worker, now + lease_ms, now, item.id),
                )
                self._set_state(conn, item.target_id, "embedding", "embedding")
        return items

    def release_leases(self) -> int:
        """Return rows leased by a previous process to ``pending`` (called at start-up under the server lock)."""
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE embedding_retry_queue SET status='pending', claimed_by=NULL, lease_until=NULL "
                "WHERE status='in_progress'"
            )
            return int(cursor.rowcount)

    def succeed(self, item: QueueItem) -> None:
        """Remove a finished row and mark the memory ready."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM embedding_retry_queue WHERE id = ?", (item.id,))
            self._set_state(conn, item.target_id, "ready", None)

    def fail(self, item: QueueItem, error: str) -> bool:
        """Record a failure; back off or give up. Returns True when the row is now permanently failed."""
        attempts = item.attempts + 1
        now = now_ms()
        final = attempts >= item.max_attempts
        backoff = backoff_ms(attempts)
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE embedding_retry_queue SET status=?, attempts=?, next_attempt_at=?, last_error=?, "
                "claimed_by=NULL, lease_until=NULL, updated_at=? WHERE id=?",
                ("failed" if final else "pending", attempts, now + backoff, error[:500], now, item.id),
            )
            if final:
                conn.execute(
                    "INSERT INTO memory_processing_state(memory_id, state, stage, attempt_count, retry_action, "
                    "error_code, error_message, failed_at, updated_at) SELECT ?,?,?,?,?,?,?,?,? "
                    "WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?) "
                    "ON CONFLICT(memory_id) DO UPDATE SET state=excluded.state, stage=excluded.stage, "
                    "attempt_count=excluded.attempt_count, retry_action=excluded.retry_action, "
                    "error_code=excluded.error_code, error_message=excluded.error_message, "
                    "failed_at=excluded.failed_at, updated_at=excluded.updated_at",
                    (
                        item.target_id,
                        "failed",
                        "embedding",
                        attempts,
                        "retry",
                        "embedding_failed",
                        error[:500],
                        utc_now(),
                        utc_now(),
                        item.target_id,
                    ),
                )
            else:
                self._set_state(conn, item.target_id, "embedding_pending", "embedding", attempts=attempts)
        return final

    def retry_failed(self, memory_id: str | None = None) -> int:
        """Put failed rows (all, or one memory's) back in the queue; returns how many."""
        now = now_ms()
        with self.db.transaction() as conn:
            if memory_id:
                cursor = conn.execute(
                    "UPDATE embedding_retry_queue SET status='pending', attempts=0, next_attempt_at=?, updated_at=? "
                    "WHERE status='failed' AND target_id=?",
                    (now, now, memory_id),
                )
            else:
                cursor = conn.execute(
                    "UPDATE embedding_retry_queue SET status='pending', attempts=0, next_attempt_at=?, updated_at=? "
                    "WHERE status='failed'",
                    (now, now),
                )
            conn.execute(
                "UPDATE memory_processing_state SET state='embedding_pending', manual_retry_count="
                "manual_retry_count+1, updated_at=? WHERE state='failed'" + (" AND memory_id=?" if memory_id else ""),
                (utc_now(), memory_id) if memory_id else (utc_now(),),
            )
            return int(cursor.rowcount)

    def drop(self, memory_id: str) -> None:
        """Forget queued work for a deleted memory."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM embedding_retry_queue WHERE target_id = ?", (memory_id,))

    def counts(self) -> dict[str, int]:
        """Rows per queue status."""
        rows = self.db.query("SELECT status, COUNT(*) FROM embedding_retry_queue GROUP BY status")
        return {row[0]: int(row[1]) for row in rows}

    def set_state(self, memory_id: str, state: str, stage: str | None = None) -> None:
        """Set the processing state of one memory."""
        with self.db.transaction() as conn:
            self._set_state(conn, memory_id, state, stage)

    def states(self, memory_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Processing records for the given memories."""
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(memory_ids), 500):
            chunk = memory_ids[start : start + 500]
            rows = self.db.query(
                f"SELECT * FROM memory_processing_state WHERE memory_id IN ({','.join('?' * len(chunk))})", chunk
            )
            for r in rows:
                out[r["memory_id"]] = {
                    "memoryId": r["memory_id"],
                    "state": r["state"],
                    "stage": r["stage"],
                    "attemptCount": r["attempt_count"],
                    "manualRetryCount": r["manual_retry_count"],
                    "retryAction": r["retry_action"] or "none",
                    "errorCode": r["error_code"],
                    "errorMessage": r["error_message"],
                    "failedAt": r["failed_at"],
                    "updatedAt": r["updated_at"],
                }
        return out

    @staticmethod
    def _set_state(conn: Any, memory_id: str, state: str, stage: str | None, attempts: int | None = None) -> None:
        conn.execute(_STATE_SQL, (memory_id, state, stage, attempts or 0, utc_now(), memory_id, attempts))
