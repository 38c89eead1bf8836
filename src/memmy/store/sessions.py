"""Sessions and raw turns."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from memmy.store.db import Database, utc_now


def _loads(text: str | None, default: Any) -> Any:
    return json.loads(text) if text else default


def session_dict(row: sqlite3.Row) -> dict[str, Any]:
    """Public shape of a session row."""
    return {
        "sessionId": row["id"],
        "userId": row["user_id"],
        "projectId": row["project_id"],
        "source": row["source"],
        "profileId": row["profile_id"],
        "workspacePath": row["workspace_path"],
        "hostSessionKey": row["host_session_key"],
        "status": row["status"],
        "openedAt": row["opened_at"],
        "lastSeenAt": row["last_seen_at"],
        "closedAt": row["closed_at"],
    }


def raw_turn_dict(row: sqlite3.Row) -> dict[str, Any]:
    """Public shape of a raw turn row."""
    return {
        "rawTurnId": row["id"],
        "sessionId": row["session_id"],
        "episodeId": row["episode_id"],
        "turnId": row["turn_id"],
        "userText": row["user_text"],
        "assistantText": row["assistant_text"],
        "reasoningSummary": row["reasoning_summary"],
        "toolCalls": _loads(row["tool_calls_json"], []),
        "toolResults": _loads(row["tool_results_json"], []),
        "sourceMemoryIds": _loads(row["source_memory_ids_json"], []),
        "status": row["status"],
        "createdAt": row["created_at"],
    }


class SessionRepository:
    """CRUD for sessions and their raw turns."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, session_id: str) -> sqlite3.Row | None:
        """One session row."""
        return self.db.query_one("SELECT * FROM sessions WHERE id = ?", (session_id,))

    def find_open_by_host_key(self, user_id: str, source: str, profile_id: str, host_key: str) -> sqlite3.Row | None:
        """The open session an agent's host session key maps to, if any."""
        return self.db.query_one(
            "SELECT * FROM sessions WHERE user_id = ? AND source = ? AND profile_id = ? AND host_session_key = ? "
            "AND status = 'open' ORDER BY updated_at DESC LIMIT 1",
            (user_id, source, profile_id, host_key),
        )

    def create(
        self,
        session_id: str,
        *,
        user_id: str,
        project_id: str | None,
        source: str,
        profile_id: str,
        workspace_path: str | None,
        host_session_key: str | None,
        meta: dict[str, Any],
    ) -> None:
        """Insert a new open session."""
        now = utc_now()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO sessions(id, user_id, project_id, source, profile_id, workspace_path, host_session_key, "
                "status, meta_json, opened_at, last_seen_at, updated_at) VALUES (?,?,?,?,?,?,?,'open',?,?,?,?)",
                (
                    session_id,
                    user_id,
                    project_id,
                    source,
                    profile_id,
                    workspace_path,
                    host_session_key,
                    json.dumps(meta, ensure_ascii=False),
                    now,
                    now,
                    now,
                ),
            )

    def touch(self, session_id: str) -> None:
        """Update last_seen_at (a write nobody reads back: in the caller's transaction PostgreSQL sends it with the
        next statement or the COMMIT, see :meth:`Database.write_all`)."""
        now = utc_now()
        self.db.write_all([("UPDATE sessions SET last_seen_at=?, updated_at=? WHERE id=?", (now, now, session_id))])

    def close(self, session_id: str) -> None:
        """Mark a session closed and close its open episodes."""
        now = utc_now()
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE sessions SET status='closed', closed_at=?, updated_at=? WHERE id=?", (now, now, session_id)
            )
            conn.execute(
                "UPDATE episodes SET status='closed', closed_at=?, updated_at=? WHERE session_id=? AND status='open'",
                (now, now, session_id),
            )

    def get_raw_turn(self, session_id: str, turn_id: str) -> sqlite3.Row | None:
        """A raw turn by (session, turn id)."""
        return self.db.query_one("SELECT * FROM raw_turns WHERE session_id = ? AND turn_id = ?", (session_id, turn_id))

    def get_raw_turn_by_id(self, raw_turn_id: str) -> sqlite3.Row | None:
        """A raw turn by its own id."""
        return self.db.query_one("SELECT * FROM raw_turns WHERE id = ?", (raw_turn_id,))

    def recent_raw_turn_ids(self, session_id: str, limit: int = 8) -> list[str]:
        """The session's newest raw turn ids."""
        rows = self.db.query(
            "SELECT id FROM raw_turns WHERE session_id = ? ORDER BY created_at DESC LIMIT ?", (session_id, limit)
        )
        return [r["id"] for r in rows]

    def upsert_raw_turn(
        self, raw_turn_id: str, session_id: str, turn_id: str, fields: dict[str, Any], *, only_started: bool = False
    ) -> None:
        """Insert or update a raw turn; ``fields`` maps column names to values (JSON columns pre-encoded).
        ``only_started``: an existing turn is updated only while it is still ``started`` (a turn start that
        arrives after the turn's completion leaves the completed turn as it is)."""
        self.upsert_raw_turns([(raw_turn_id, session_id, turn_id, fields)], only_started=only_started)

    def upsert_raw_turns(
        self, turns: Sequence[tuple[str, str, str, dict[str, Any]]], *, only_started: bool = False
    ) -> None:
        """Insert or update raw turns ``(id, session, turn id, fields)`` whose ``fields`` name the same columns
        (``only_started``: as in :meth:`upsert_raw_turn`)."""
        if not turns:
            return
        names = list(turns[0][3])
        columns = ["id", "session_id", "turn_id", "created_at", *names]
        update = ",".join(f"{name}=excluded.{name}" for name in names) or "turn_id=turn_id"
        guard = " WHERE raw_turns.status = 'started'" if only_started else ""
        now = utc_now()
        rows = [(raw_id, session, turn, now, *(fields[n] for n in names)) for raw_id, session, turn, fields in turns]
        sql = (
            f"INSERT INTO raw_turns({','.join(columns)}) VALUES ({','.join('?' * len(columns))}) "
            f"ON CONFLICT(session_id, turn_id) DO UPDATE SET {update}{guard}"
        )
        self.db.write_all([(sql, row) for row in rows])  # (nothing read back: sent with what follows it)

    def list_recent_turns(self, limit: int, offset: int, text: str | None) -> tuple[list[sqlite3.Row], int]:
        """Raw turns newest first (for the tasks panel)."""
        where = "deleted_at IS NULL"
        params: list[Any] = []
        if text:
            where += " AND (user_text LIKE ? OR assistant_text LIKE ?)"
            params.extend([f"%{text}%", f"%{text}%"])
        total_row = self.db.query_one(f"SELECT COUNT(*) FROM raw_turns WHERE {where}", params)
        rows = self.db.query(
            f"SELECT * FROM raw_turns WHERE {where} ORDER BY created_at DESC LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return rows, int(total_row[0]) if total_row else 0
