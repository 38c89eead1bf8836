"""``memmy-memory migrate``'s work: open the two stores named by the command line and copy one into the other."""

from __future__ import annotations

from pathlib import Path

from memmy.store.copy import Progress, TableCopy, copy_store
from memmy.store.db import Database


def open_store(where: str) -> Database:
    """A store at ``where``: a ``postgresql://`` URL, or a SQLite file path (created and migrated when new)."""
    if where.startswith(("postgresql://", "postgres://")):
        from memmy.store.pg import PgDatabase  # psycopg only for a PostgreSQL store

        return PgDatabase(where)
    return Database(Path(where).expanduser())


def migrate_store(source: str, target: str, progress: Progress = None) -> list[TableCopy]:
    """Copy the store at ``source`` into the empty store at ``target`` (see :func:`memmy.store.copy.copy_store`;
    ``progress`` gets its lines: rows and rows/s per table)."""
    src = open_store(source)
    try:
        dst = open_store(target)
        try:
            return copy_store(src, dst, progress)
        finally:
            dst.close()
    finally:
        src.close()
