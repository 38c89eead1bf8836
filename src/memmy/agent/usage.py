"""The agent's usage meter: per day (local) and per slot, the model calls, tokens and cost (where the provider
reports one, as OpenRouter does) of chat turns (``primary``), transcriptions (``asr``) and pictures (``image``).
One small SQLite file, ``$MEMMY_HOME/agent/usage.db``, written by every agent process (the CLI, the TUI,
``memmy serve``). The memory slots (summary, evolution) are metered by the memory daemon, which also enforces
their daily cap; chat is only counted, never stopped."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from memmy.agent.smallfile import connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    day TEXT NOT NULL,
    slot TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (day, slot)
);
"""
LOG = logging.getLogger("memmy.usage")


def today() -> str:
    """The local day, ``YYYY-MM-DD``."""
    return time.strftime("%Y-%m-%d")


class UsageBook:
    """Reads and adds to the per-day, per-slot counters."""

    def __init__(self, home: Path) -> None:
        self.path = home / "agent" / "usage.db"

    def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return connect(self.path, SCHEMA, "NORMAL")

    def record(self, slot: str, tokens: int = 0, cost: float = 0.0, calls: int = 1) -> None:
        """Add one call's tokens and cost to today's row of ``slot`` (a failure is logged, never raised: a meter
        must not stop a turn)."""
        try:
            with self._db() as db:
                db.execute(
                    "INSERT INTO usage (day, slot, calls, tokens, cost) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT(day, slot) DO UPDATE SET calls = calls + excluded.calls, "
                    "tokens = tokens + excluded.tokens, cost = cost + excluded.cost",
                    (today(), slot, calls, max(tokens, 0), max(cost, 0.0)),
                )
        except sqlite3.Error:
            LOG.warning("the usage meter could not write %s", self.path, exc_info=True)

    def day(self, day: str | None = None) -> dict[str, dict[str, Any]]:
        """``slot -> {calls, tokens, cost}`` of one day (today by default)."""
        with self._db() as db:
            rows = db.execute("SELECT slot, calls, tokens, cost FROM usage WHERE day = ?", (day or today(),)).fetchall()
        return {slot: {"calls": calls, "tokens": tokens, "cost": round(cost, 6)} for slot, calls, tokens, cost in rows}
