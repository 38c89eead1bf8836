"""A second, read-only connection to the store, for reads that run beside the main connection.

The process shares one read-write connection behind a lock (:class:`memmy.store.db.Database`). A recall's keyword
channels run in a worker thread while the query is embedded; on their own WAL reader they neither wait for that
lock (held, for example, across an idempotent request) nor block the writer.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from memmy.errors import StoreError
from memmy.store.db import BUSY_TIMEOUT_MS, Database


class ReadOnlyDatabase(Database):
    """The query API of :class:`Database` over a read-only connection (no migrations, no writes)."""

    def __init__(self, path: Path) -> None:  # noqa: D107 - documented on the class
        self.path = path
        self.lock = threading.RLock()
        try:
            self.conn = sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {path} read-only: {exc}") from exc
        self.conn.row_factory = sqlite3.Row
        self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self.conn.execute("PRAGMA query_only=ON")

    def close(self) -> None:
        """Close the connection (nothing to checkpoint)."""
        with self.lock:
            self.conn.close()
