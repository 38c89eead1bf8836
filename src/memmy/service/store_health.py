"""Store checks for front ends that must not import the store layer: the offline ``doctor`` checks and repair,
and whether a server lock's holder is still the daemon that wrote it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memmy.store.db import ServerLock, lock_holder_alive
from memmy.store.integrity import Finding, check_store, repair_store
from memmy.store.pg import redact_dsn

__all__ = ["Finding", "check_postgres", "check_store", "lock_holder_alive", "repair", "serving_daemon"]


def check_postgres(dsn: str) -> list[Finding]:
    """The offline checks of a store on PostgreSQL (read only): the server answers and holds memmy's schema. The
    file checks (quick_check, the FTS5 index) are SQLite's; PostgreSQL checks its own files."""
    import psycopg

    where = redact_dsn(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
    except psycopg.Error as exc:
        fix = "start the PostgreSQL server, or correct storage.postgresDsn (MEMMY_POSTGRES_DSN)"
        return [Finding("unreachable", "error", f"cannot connect to PostgreSQL at {where}: {exc}", fix)]
    if row is None or row[0] is None:
        fix = "memmy-memory serve  # creates the store on its first start"
        return [Finding("missing", "info", f"{where} holds no memmy store yet", fix)]
    return []


def serving_daemon(db_path: Path) -> str | None:
    """``pid N on host:port`` when a live daemon holds the store's server lock, else None."""
    holder = ServerLock(db_path).read()
    if holder is None or not lock_holder_alive(holder):
        return None
    return f"the memmy daemon pid {holder.get('pid')} on {holder.get('host')}:{holder.get('port')}"


def repair(db_path: Path) -> list[str]:
    """Repair what can be repaired in place (refused while a daemon serves the file); one line per action."""
    return repair_store(db_path, lambda: serving_daemon(db_path))


def holder_if_alive(holder: dict[str, Any]) -> dict[str, Any] | None:
    """``holder`` when the process that wrote that lock is still running, else None."""
    return holder if lock_holder_alive(holder) else None
