"""Per-day LLM call and token counters in ``runtime_kv`` (key ``llm_usage:<YYYY-MM-DD>``, UTC).

The value is ``{calls, tokens, refused, slots: {summary: {calls, tokens}, evolution: {...}}}``. Counters
survive restarts so the daily budget holds across daemon runs, and every update is one IMMEDIATE transaction,
so concurrent writers (threads or processes) never lose a count.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

from memmy.domain import stable_json
from memmy.store.db import Database, utc_now

KEY_PREFIX = "llm_usage:"


def _empty() -> dict[str, Any]:
    return {"calls": 0, "tokens": 0, "refused": 0, "slots": {}}


def _normalised(value: Any) -> dict[str, Any]:
    """A stored value with every counter present (tolerates older or hand-edited rows)."""
    record = _empty()
    if isinstance(value, dict):
        for key in ("calls", "tokens", "refused"):
            if isinstance(value.get(key), int):
                record[key] = value[key]
        slots = value.get("slots")
        if isinstance(slots, dict):
            for slot, counts in slots.items():
                if isinstance(counts, dict):
                    record["slots"][str(slot)] = {
                        "calls": int(counts.get("calls") or 0),
                        "tokens": int(counts.get("tokens") or 0),
                    }
    return record


class LLMUsageRepository:
    """Reads and atomically updates the per-day LLM counters (a ``memmy.llm.budget.UsageMeter``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def usage_of(self, day: str) -> dict[str, Any]:
        """The full counters of ``day`` (zeros when nothing was recorded)."""
        row = self.db.query_one("SELECT value_json FROM runtime_kv WHERE key = ?", (KEY_PREFIX + day,))
        return _normalised(json.loads(row["value_json"]) if row else None)

    def used_today(self, day: str) -> tuple[int, int]:
        """(calls, tokens) spent on ``day``."""
        record = self.usage_of(day)
        return int(record["calls"]), int(record["tokens"])

    def record(self, day: str, slot: str, calls: int, tokens: int, refused: int = 0) -> None:
        """Add to ``day``'s counters and to ``slot``'s share in one transaction."""
        key = KEY_PREFIX + day
        with self.db.transaction() as conn:
            row = conn.execute("SELECT value_json FROM runtime_kv WHERE key = ?", (key,)).fetchone()
            record = _normalised(json.loads(row["value_json"]) if row else None)
            record["calls"] += calls
            record["tokens"] += tokens
            record["refused"] += refused
            if calls or tokens:
                share = record["slots"].setdefault(slot, {"calls": 0, "tokens": 0})
                share["calls"] += calls
                share["tokens"] += tokens
            conn.execute(
                "INSERT INTO runtime_kv(key, value_json, updated_at) VALUES (?,?,?) "
                "ON CONFLICT(key) DO UPDATE SET value_json = excluded.value_json, updated_at = excluded.updated_at",
                (key, stable_json(record), utc_now()),
            )

    def report(self, days: int = 7, today: str | None = None) -> list[dict[str, Any]]:
        """The last ``days`` UTC days, newest first, zero-filled: ``[{day, calls, tokens, refused, slots}]``."""
        last = date.fromisoformat(today) if today else datetime.now(UTC).date()
        wanted = [(last - timedelta(days=i)).isoformat() for i in range(max(days, 0))]
        if not wanted:
            return []
        placeholders = ",".join("?" for _ in wanted)
        rows = self.db.query(
            f"SELECT key, value_json FROM runtime_kv WHERE key IN ({placeholders})",
            [KEY_PREFIX + day for day in wanted],
        )
        stored = {str(row["key"])[len(KEY_PREFIX) :]: json.loads(row["value_json"]) for row in rows}
        return [{"day": day, **_normalised(stored.get(day))} for day in wanted]
