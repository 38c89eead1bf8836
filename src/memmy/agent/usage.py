"""The agent's usage meter: per day (local) and per slot, the model calls, tokens and cost (where the provider
reports one, as OpenRouter does) of chat turns (``primary``), transcriptions (``asr``) and pictures (``image``).
One small SQLite file, ``$MEMMY_HOME/agent/usage.db``, written by every agent process (the CLI, the TUI,
``memmy serve``). The memory slots (summary, evolution) are metered by the memory daemon, which also enforces
their daily cap; chat is only counted, never stopped."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
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
    """Reads and adds to the per-day, per-slot counters.

    ``keep_open``: one connection for every call until :meth:`close` (a host of many turns, the chat turns' worker:
    opening the file, applying the schema and the checkpoint at close cost ~0.6 ms of CPU a turn, the write itself
    0.08 ms); otherwise a connection per call, nothing held between them."""

    def __init__(self, home: Path, keep_open: bool = False) -> None:
        self.path = home / "agent" / "usage.db"
        self.keep_open = keep_open
        self._kept: contextlib.ExitStack | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # the kept connection is used from the event loop's threads, one at a time

    def _db(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        if not self.keep_open:
            return connect(self.path, SCHEMA, "NORMAL")
        return self._held()

    @contextlib.contextmanager
    def _held(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                stack = contextlib.ExitStack()
                self._conn = stack.enter_context(connect(self.path, SCHEMA, "NORMAL", shared=True))
                self._kept = stack
            yield self._conn

    def close(self) -> None:
        """Close the kept connection (a later call opens it again)."""
        with self._lock:
            if self._kept is not None:
                self._kept.close()
            self._kept = self._conn = None

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
