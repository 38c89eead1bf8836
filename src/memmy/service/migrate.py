"""Moving a store between engines (``memmy-memory migrate``): open both ends by address and copy every table,
compared by row counts and content hashes at the end (:func:`memmy.store.copy.copy_store`)."""

from __future__ import annotations

from pathlib import Path

from memmy.store.copy import TableCopy, copy_store
from memmy.store.db import Database


def open_store(where: str) -> Database:
    """A store at ``where``: a ``postgresql://`` URL, or a SQLite file path (created and migrated when new)."""
    if where.startswith(("postgresql://", "postgres://")):
        from memmy.store.pg import PgDatabase  # psycopg only for a PostgreSQL address

        return PgDatabase(where)
    return Database(Path(where).expanduser())


def migrate_store(source: str, target: str) -> list[TableCopy]:
    """Copy the store at ``source`` into the empty one at ``target``; each table's counts and hashes compared (the
    source is only read). Raises :class:`~memmy.errors.StoreError` when the target is not empty or a table differs."""
    src = open_store(source)
    try:
        dst = open_store(target)
        try:
            return copy_store(src, dst)
        finally:
            dst.close()
    finally:
        src.close()
