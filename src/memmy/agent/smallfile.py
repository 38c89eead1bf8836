"""One small SQLite file the agent's processes share (the schedules, the usage meter): WAL, one connection per
use, every statement its own transaction unless the caller begins one."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def connect(
    path: Path, schema: str, synchronous: str = "FULL", shared: bool = False
) -> Iterator[sqlite3.Connection]:
    """A connection to ``path`` with ``schema`` applied (``synchronous`` FULL: a commit survives a power cut;
    ``shared``: usable from other threads, the caller holding a lock around each use)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=not shared)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'NORMAL' if synchronous == 'NORMAL' else 'FULL'}")
        db.executescript(schema)
        yield db
    finally:
        db.close()
