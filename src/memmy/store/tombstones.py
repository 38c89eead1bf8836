"""Value-keyed tombstones: what the user deleted stays deleted, whichever path tries to write it again.

A tombstone records the normalised content hash of the value (:func:`value_hash`, built on
``memmy.domain.content_hash``) and the memory key of a deleted memory. Every write path (memory add, turn
capture, history import, key-graph remember/correct) asks :meth:`TombstoneRepository.match` before writing
and refuses a value that matches either one. Restoring a tombstone deletes the row, so the value may come
back (a re-import then brings it back).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memmy.domain import content_hash, new_id
from memmy.store.db import Database, utc_now

_ENVELOPE = re.compile(r"^RawTurn: \S*$", re.MULTILINE)


def value_hash(content: str) -> str:
    """The content hash of a value without its capture envelope (the per-turn ``RawTurn:`` line of a trace),
    so the same exchange captured or imported under another turn id is the same value."""
    return content_hash(_ENVELOPE.sub("", content))


_COLUMNS = "id, user_id, content_hash, memory_key, memory_id, memory_layer, reason, preview, created_at"


@dataclass(frozen=True)
class Tombstone:
    """One forgotten value."""

    id: str
    user_id: str
    content_hash: str | None
    memory_key: str | None
    memory_id: str | None
    layer: str | None
    reason: str | None
    preview: str | None
    created_at: str

    def to_json(self) -> dict[str, Any]:
        """The API shape (``GET /api/v1/tombstones``)."""
        return {
            "id": self.id,
            "contentHash": self.content_hash,
            "memoryKey": self.memory_key,
            "memoryId": self.memory_id,
            "memoryLayer": self.layer,
            "reason": self.reason,
            "preview": self.preview,
            "createdAt": self.created_at,
        }


def _row(row: sqlite3.Row) -> Tombstone:
    return Tombstone(
        id=row["id"],
        user_id=row["user_id"],
        content_hash=row["content_hash"],
        memory_key=row["memory_key"],
        memory_id=row["memory_id"],
        layer=row["memory_layer"],
        reason=row["reason"],
        preview=row["preview"],
        created_at=row["created_at"],
    )


class TombstoneRepository:
    """Write, match, list and remove tombstones."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        *,
        user_id: str,
        content_hash: str | None,
        memory_key: str | None,
        memory_id: str | None,
        layer: str | None,
        reason: str | None,
        preview: str | None,
    ) -> str:
        """Record a forgotten value; returns the tombstone id."""
        tombstone_id = new_id("tomb")
        with self.db.transaction() as conn:
            conn.execute(
                f"INSERT INTO tombstones ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                (tombstone_id, user_id, content_hash, memory_key, memory_id, layer, reason, preview, utc_now()),
            )
        return tombstone_id

    def match(self, user_id: str, content_hash: str | None, memory_key: str | None = None) -> Tombstone | None:
        """The tombstone that forbids this value (same user and content hash, or the same memory key), if any."""
        if content_hash:
            row = self.db.query_one(
                f"SELECT {_COLUMNS} FROM tombstones WHERE user_id = ? AND content_hash = ? LIMIT 1",
                (user_id, content_hash),
            )
            if row is not None:
                return _row(row)
        if memory_key:
            row = self.db.query_one(f"SELECT {_COLUMNS} FROM tombstones WHERE memory_key = ? LIMIT 1", (memory_key,))
            if row is not None:
                return _row(row)
        return None

    def matched(
        self, user_id: str, content_hashes: Sequence[str], memory_keys: Sequence[str]
    ) -> tuple[set[str], set[str]]:
        """Which of these content hashes (this user's) and memory keys a tombstone forbids: two queries for many."""
        hashes: set[str] = set()
        keys: set[str] = set()
        for start in range(0, max(len(content_hashes), len(memory_keys)), 400):
            chunk = list(content_hashes[start : start + 400])
            if chunk:
                rows = self.db.query(
                    f"SELECT content_hash FROM tombstones WHERE user_id = ? AND content_hash IN "
                    f"({','.join('?' * len(chunk))})",
                    [user_id, *chunk],
                )
                hashes.update(row[0] for row in rows)
            chunk = list(memory_keys[start : start + 400])
            if chunk:
                rows = self.db.query(
                    f"SELECT memory_key FROM tombstones WHERE memory_key IN ({','.join('?' * len(chunk))})", chunk
                )
                keys.update(row[0] for row in rows)
        return hashes, keys

    def get(self, tombstone_id: str) -> Tombstone | None:
        """One tombstone by id."""
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM tombstones WHERE id = ?", (tombstone_id,))
        return _row(row) if row is not None else None

    def page(self, user_id: str | None = None, *, limit: int = 100, offset: int = 0) -> tuple[list[Tombstone], int]:
        """Tombstones newest first (optionally one user's) and the total count."""
        where, params = ("WHERE user_id = ?", [user_id]) if user_id else ("", [])
        total = self.db.query_one(f"SELECT COUNT(*) FROM tombstones {where}", params)
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM tombstones {where} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [_row(r) for r in rows], int(total[0]) if total else 0

    def remove(self, tombstone_id: str) -> Tombstone | None:
        """Delete a tombstone (restore); returns what was removed, or None when it did not exist."""
        with self.db.transaction() as conn:
            found = self.get(tombstone_id)
            if found is not None:
                conn.execute("DELETE FROM tombstones WHERE id = ?", (tombstone_id,))
        return found

    def count(self) -> int:
        """How many tombstones exist."""
        row = self.db.query_one("SELECT COUNT(*) FROM tombstones")
        return int(row[0]) if row else 0
