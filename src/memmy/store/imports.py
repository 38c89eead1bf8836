"""Import state: per-conversation checkpoints and per-source date-time watermarks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memmy.store.db import Database, utc_now


@dataclass(frozen=True)
class Checkpoint:
    """The last state of a conversation that was imported cleanly."""

    last_message_id: str | None
    last_created_at: str | None
    content_hash: str | None


#: The checkpoint hash of a conversation whose last turn waits for its answer (never a real content hash).
WAITING = "waiting"


@dataclass(frozen=True)
class Watermark:
    """A source's incremental cursor: the newest message seen in any conversation read from it (``baseline_at``, the
    first clean scan's start, is kept for the record only: a source with nothing yet has no cursor)."""

    mode: str
    baseline_at: str | None
    latest_seen_created_at: str | None
    last_sync_at: str | None
    last_stats: dict[str, Any] | None

    @property
    def cursor(self) -> str | None:
        """``since`` for the next incremental scan (inclusive); None until a conversation was read."""
        return self.latest_seen_created_at or None


class ImportStateRepository:
    """Reads and writes checkpoints and watermarks."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def checkpoint(self, source: str, conversation_id: str) -> Checkpoint | None:
        """The stored checkpoint of one conversation."""
        row = self.db.query_one(
            "SELECT last_message_id, last_created_at, content_hash FROM source_checkpoints "
            "WHERE source = ? AND conversation_id = ?",
            (source, conversation_id),
        )
        return Checkpoint(row[0], row[1], row[2]) if row else None

    def checkpoints(self, source: str) -> dict[str, Checkpoint]:
        """Every stored checkpoint of a source, by conversation id."""
        rows = self.db.query(
            "SELECT conversation_id, last_message_id, last_created_at, content_hash FROM source_checkpoints "
            "WHERE source = ?",
            (source,),
        )
        return {row[0]: Checkpoint(row[1], row[2], row[3]) for row in rows}

    def save_checkpoint(self, source: str, conversation_id: str, checkpoint: Checkpoint, origin: str) -> None:
        """Record that a conversation was imported up to ``checkpoint``."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO source_checkpoints(source, conversation_id, last_message_id, last_created_at, "
                "content_hash, origin, updated_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT(source, conversation_id) "
                "DO UPDATE SET last_message_id=excluded.last_message_id, last_created_at=excluded.last_created_at, "
                "content_hash=excluded.content_hash, origin=excluded.origin, updated_at=excluded.updated_at",
                (
                    source,
                    conversation_id,
                    checkpoint.last_message_id,
                    checkpoint.last_created_at,
                    checkpoint.content_hash,
                    origin,
                    utc_now(),
                ),
            )

    def mark_waiting(self, source: str, conversation_id: str, origin: str) -> None:
        """Record that a conversation ends with an unanswered turn: later syncs read it again, whatever the cursor."""
        self.save_checkpoint(source, conversation_id, Checkpoint(None, None, WAITING), origin)

    def waiting(self, source: str) -> set[str]:
        """Conversations of a source whose last turn was still waiting for its answer."""
        rows = self.db.query(
            "SELECT conversation_id FROM source_checkpoints WHERE source = ? AND content_hash = ?", (source, WAITING)
        )
        return {row[0] for row in rows}

    def watermark(self, source: str) -> Watermark | None:
        """A source's watermark, if it was ever synced cleanly."""
        row = self.db.query_one(
            "SELECT mode, baseline_at, latest_seen_created_at, last_sync_at, last_stats_json "
            "FROM source_watermarks WHERE source = ?",
            (source,),
        )
        if row is None:
            return None
        return Watermark(row[0], row[1], row[2], row[3], json.loads(row[4]) if row[4] else None)

    def advance_watermark(
        self, source: str, mode: str, baseline_at: str, latest_seen: str | None, stats: dict[str, Any]
    ) -> None:
        """Move the cursor forward after a clean run (never backwards)."""
        current = self.watermark(source)
        baseline = max(filter(None, [current.baseline_at if current else None, baseline_at]))
        seen_values = [v for v in (current.latest_seen_created_at if current else None, latest_seen) if v]
        seen = max(seen_values) if seen_values else None
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO source_watermarks(source, mode, baseline_at, latest_seen_created_at, last_sync_at, "
                "last_stats_json, updated_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT(source) DO UPDATE SET "
                "mode=excluded.mode, baseline_at=excluded.baseline_at, "
                "latest_seen_created_at=excluded.latest_seen_created_at, last_sync_at=excluded.last_sync_at, "
                "last_stats_json=excluded.last_stats_json, updated_at=excluded.updated_at",
                (source, mode, baseline, seen, utc_now(), json.dumps(stats), utc_now()),
            )

    def record_attempt(self, source: str, stats: dict[str, Any]) -> None:
        """Remember the stats of a run that did not advance the watermark (shown by ``sources``)."""
        current = self.watermark(source)
        if current is None:
            return
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE source_watermarks SET last_sync_at=?, last_stats_json=?, updated_at=? WHERE source=?",
                (utc_now(), json.dumps(stats), utc_now(), source),
            )

    def imported_counts(self) -> dict[str, int]:
        """Imported memories per source (memory keys ``memory.add:agent-source:<src>:turn:...``)."""
        rows = self.db.query(
            # A key range (not LIKE, which is case-insensitive) so the memory_key index answers it.
            "SELECT source_agent, COUNT(*) FROM memories WHERE memory_key >= 'memory.add:agent-source:' "
            "AND memory_key < 'memory.add:agent-source;' AND status != 'deleted' GROUP BY source_agent"
        )
        return {row[0]: int(row[1]) for row in rows}
