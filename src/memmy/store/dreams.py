"""Dream's tables (``dreams``, ``dream_changes``) and the raw ``memories`` row access a verbatim restore needs.

A dream records every memory it changes as two full rows (every column, exactly as SQLite holds them), so
that a restore can write the "before" row back byte for byte. The candidate queries that feed a pass live
here too; they read raw rows (``SELECT *``) rather than :class:`~memmy.domain.Memory` objects for the same
reason.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memmy.kinds import memory as stored
from memmy.kinds import policy, trace
from memmy.store.db import Database
from memmy.store.text import FTS_DELETE, FTS_INSERT, fts_row
from memmy.store.vectors import Vector, VectorMeta, from_blob, meta_of

#: Memory statuses a pass may change (archived and deleted rows are left alone).
LIVE_STATUSES = ("activated", "resolving")
ACTIONS = ("merge", "supersede", "archive_stale", "archive_contradicted")
_CHUNK = 500

Row = dict[str, Any]


@dataclass(frozen=True)
class DreamRecord:
    """One ``dreams`` row."""

    id: str
    started_at: str
    finished_at: str | None
    status: str
    trigger: str
    stats: dict[str, Any]
    restored_at: str | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        """The API shape."""
        return {
            "id": self.id,
            "status": self.status,
            "trigger": self.trigger,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "restoredAt": self.restored_at,
            "stats": self.stats,
            "error": self.error,
        }


@dataclass(frozen=True)
class DreamChange:
    """One ``dream_changes`` row: a memory's full row before and after the change."""

    dream_id: str
    seq: int
    memory_id: str
    action: str
    before: Row
    after: Row
    reason: str


def _record(row: sqlite3.Row) -> DreamRecord:
    return DreamRecord(
        id=row["id"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        status=row["status"],
        trigger=row["trigger"],
        stats=json.loads(row["stats_json"] or "{}"),
        restored_at=row["restored_at"],
        error=row["error"],
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class DreamRepository:
    """Reads and writes dreams, their changes, and raw memories rows."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- dreams -----------------------------------------------------------------------------------
    def start(self, dream_id: str, trigger: str, started_at: str) -> None:
        """Record a pass that has begun (status ``running``)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreams(id, started_at, status, trigger, stats_json) VALUES (?,?,'running',?,'{}')",
                (dream_id, started_at, trigger),
            )

    def finish(
        self,
        conn: sqlite3.Connection,
        dream_id: str,
        status: str,
        stats: dict[str, Any],
        finished_at: str,
        error: str | None = None,
    ) -> None:
        """Close a pass inside the caller's transaction."""
        conn.execute(
            "UPDATE dreams SET status = ?, stats_json = ?, finished_at = ?, error = ? WHERE id = ?",
            (status, _dumps(stats), finished_at, error, dream_id),
        )

    def fail_interrupted(self, finished_at: str) -> int:
        """Mark passes left ``running`` by a process that died as failed; returns how many."""
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE dreams SET status = 'failed', finished_at = ?, error = 'interrupted (the process stopped)' "
                "WHERE status = 'running'",
                (finished_at,),
            )
            return int(cursor.rowcount or 0)

    def mark_restored(self, conn: sqlite3.Connection, dream_id: str, restored_at: str, stats: dict[str, Any]) -> None:
        """Flag a dream as undone."""
        conn.execute(
            "UPDATE dreams SET status = 'restored', restored_at = ?, stats_json = ? WHERE id = ?",
            (restored_at, _dumps(stats), dream_id),
        )

    def get(self, dream_id: str) -> DreamRecord | None:
        """One dream by id."""
        row = self.db.query_one("SELECT * FROM dreams WHERE id = ?", (dream_id,))
        return _record(row) if row is not None else None

    def page(self, limit: int, offset: int = 0) -> tuple[list[DreamRecord], int]:
        """Dreams newest first, and how many there are."""
        rows = self.db.query("SELECT * FROM dreams ORDER BY started_at DESC, id LIMIT ? OFFSET ?", (limit, offset))
        total = self.db.query_one("SELECT COUNT(*) FROM dreams")
        return [_record(r) for r in rows], int(total[0]) if total else 0

    def last_started_at(self) -> str | None:
        """When the newest pass (any trigger, any outcome) began."""
        row = self.db.query_one("SELECT MAX(started_at) FROM dreams")
        return str(row[0]) if row and row[0] else None

    # -- changes ----------------------------------------------------------------------------------
    def add_change(self, conn: sqlite3.Connection, change: DreamChange) -> None:
        """Append one change inside the caller's transaction."""
        conn.execute(
            "INSERT INTO dream_changes(dream_id, seq, memory_id, action, before_json, after_json, reason) "
            "VALUES (?,?,?,?,?,?,?)",
            (
                change.dream_id,
                change.seq,
                change.memory_id,
                change.action,
                _dumps(change.before),
                _dumps(change.after),
                change.reason,
            ),
        )

    def changes(self, dream_id: str) -> list[DreamChange]:
        """Every change of a dream in the order it was made."""
        rows = self.db.query("SELECT * FROM dream_changes WHERE dream_id = ? ORDER BY seq", (dream_id,))
        return [
            DreamChange(
                dream_id=r["dream_id"],
                seq=r["seq"],
                memory_id=r["memory_id"],
                action=r["action"],
                before=json.loads(r["before_json"]),
                after=json.loads(r["after_json"]),
                reason=r["reason"] or "",
            )
            for r in rows
        ]

    # -- raw memories rows --------------------------------------------------------------------------
    def memory_row(self, memory_id: str) -> Row | None:
        """Every column of one memories row, exactly as stored."""
        row = self.db.query_one("SELECT * FROM memories WHERE id = ?", (memory_id,))
        return dict(row) if row is not None else None

    def memory_rows(self, ids: Sequence[str]) -> dict[str, Row]:
        """Raw rows by id."""
        found: dict[str, Row] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            rows = self.db.query(f"SELECT * FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            found.update({r["id"]: dict(r) for r in rows})
        return found

    def memory_columns(self) -> list[str]:
        """The columns the memories table has now."""
        return [r[1] for r in self.db.query("PRAGMA table_info(memories)")]

    def write_memory_row(self, conn: sqlite3.Connection, row: Row, columns: Sequence[str]) -> None:
        """Overwrite every column of a memories row with ``row`` and rebuild its full-text entry."""
        names = [c for c in columns if c != "id" and c in row]
        conn.execute(
            f"UPDATE memories SET {', '.join(f'{c} = ?' for c in names)} WHERE id = ?",
            [*(row[c] for c in names), row["id"]],
        )
        conn.execute(FTS_DELETE, (row["id"],))
        if row.get("status") != "deleted":
            conn.execute(
                FTS_INSERT,
                (*fts_row(row.get("memory_key"), row.get("title"), row["memory_value"], row["tags_json"]), row["id"]),
            )

    # -- candidates ---------------------------------------------------------------------------------
    def recent(self, layers: Sequence[str], since: str, limit: int) -> list[Row]:
        """Live rows of ``layers`` updated at or after ``since``, newest first."""
        rows = self.db.query(
            f"SELECT * FROM memories WHERE memory_layer IN ({','.join('?' * len(layers))}) "
            f"AND status IN ({','.join('?' * len(LIVE_STATUSES))}) AND updated_at >= ? "
            "ORDER BY updated_at DESC, id LIMIT ?",
            [*layers, *LIVE_STATUSES, since, limit],
        )
        return [dict(r) for r in rows]

    def live_by_hash(self, layers: Sequence[str], hashes: Sequence[str]) -> list[Row]:
        """Live rows of ``layers`` whose stored content hash is one of ``hashes`` (older twins included)."""
        found: list[Row] = []
        for start in range(0, len(hashes), _CHUNK):
            chunk = list(hashes[start : start + _CHUNK])
            rows = self.db.query(
                f"SELECT * FROM memories WHERE memory_layer IN ({','.join('?' * len(layers))}) "
                f"AND status IN ({','.join('?' * len(LIVE_STATUSES))}) "
                f"AND content_hash IN ({','.join('?' * len(chunk))})",
                [*layers, *LIVE_STATUSES, *chunk],
            )
            found.extend(dict(r) for r in rows)
        return found

    def contradicted(self, layers: Sequence[str], now: str, limit: int) -> list[Row]:
        """Live rows whose validity ended (``valid_to`` passed) or that another memory superseded."""
        rows = self.db.query(
            f"SELECT * FROM memories WHERE memory_layer IN ({','.join('?' * len(layers))}) "
            f"AND status IN ({','.join('?' * len(LIVE_STATUSES))}) "
            "AND ((valid_to IS NOT NULL AND valid_to <= ?) OR superseded_by IS NOT NULL) "
            "ORDER BY updated_at, id LIMIT ?",
            [*layers, *LIVE_STATUSES, now, limit],
        )
        return [dict(r) for r in rows]

    def stale_traces(self, untouched_since: str, max_priority: float, limit: int) -> list[Row]:
        """Live L1 rows untouched since ``untouched_since`` whose priority is at most ``max_priority``."""
        rows = self.db.query(
            "SELECT * FROM memories WHERE memory_layer = 'L1' "
            f"AND status IN ({','.join('?' * len(LIVE_STATUSES))}) AND updated_at < ? AND created_at < ? "
            f"AND COALESCE(json_extract(properties_json, '{stored.path(stored.PRIORITY)}'), "
            f"json_extract(properties_json, '{trace.path(trace.PRIORITY)}')) <= ? ORDER BY updated_at, id LIMIT ?",
            [*LIVE_STATUSES, untouched_since, untouched_since, max_priority, limit],
        )
        return [dict(r) for r in rows]

    def stale_policies(self, archive_gain: float, limit: int) -> list[Row]:
        """Live L2 rows whose policy was archived by evolution or whose gain fell below ``archive_gain``."""
        rows = self.db.query(
            "SELECT * FROM memories WHERE memory_layer = 'L2' "
            f"AND status IN ({','.join('?' * len(LIVE_STATUSES))}) "
            f"AND (json_extract(properties_json, '{policy.path(policy.STATUS)}') = 'archived' "
            f"OR json_extract(properties_json, '{policy.path(policy.GAIN)}') < ?) ORDER BY updated_at, id LIMIT ?",
            [*LIVE_STATUSES, archive_gain, limit],
        )
        return [dict(r) for r in rows]

    def recalled(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` a recall ever returned or injected (``recall_events``)."""
        found: set[str] = set()
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            marks = ",".join("?" * len(chunk))
            rows = self.db.query(
                "SELECT DISTINCT j.value FROM recall_events r, json_each(r.hit_memory_ids_json) j "
                f"WHERE j.value IN ({marks}) UNION SELECT DISTINCT j.value FROM recall_events r, "
                f"json_each(r.injected_memory_ids_json) j WHERE j.value IN ({marks})",
                [*chunk, *chunk],
            )
            found.update(str(r[0]) for r in rows)
        return found

    def vectors_for(
        self, ids: Iterable[str], provider: str, model: str, dim: int
    ) -> list[tuple[str, str, Vector, VectorMeta]]:
        """Stored vectors of these memories made by this fingerprint, with their index metadata."""
        wanted = list(ids)
        found: list[tuple[str, str, Vector, VectorMeta]] = []
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            rows = self.db.query(
                "SELECT v.memory_id, v.vector_field, v.embedding, m.memory_layer, m.project_id, m.visibility, "
                "m.source_agent FROM memory_vector_entries v JOIN memories m ON m.id = v.memory_id "
                f"WHERE v.memory_id IN ({','.join('?' * len(chunk))}) AND v.embedding_provider = ? "
                "AND v.embedding_model = ? AND v.embedding_dim = ? ORDER BY v.id",
                [*chunk, provider, model, dim],
            )
            for r in rows:
                meta = meta_of(r["memory_layer"], r["project_id"], r["visibility"], r["source_agent"])
                found.append((r["memory_id"], r["vector_field"], from_blob(r["embedding"], dim), meta))
        return found
