"""Copy a whole store from one engine to the other (SQLite <-> PostgreSQL), then prove the copy: every table's
row count and content hash on both sides, compared inside the destination's transaction (a mismatch rolls the copy
back). The source is only read.

Every table is copied with its rowids (the full-text rows and every "newest first" order go by them); the full-text
index is not copied but rebuilt on the destination from ``memories``, as a migration rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from memmy.errors import StoreError
from memmy.store.db import Database
from memmy.store.pgvectors import ANN_TABLE
from memmy.store.schema import refill_fts

#: Not copied: the full-text index (rebuilt from memories) and each side's own migration record.
NOT_COPIED = frozenset({"memories_fts", "schema_migrations"})
BATCH = 1000


@dataclass(frozen=True)
class TableCopy:
    """One table after the copy: rows and content hash on each side."""

    table: str
    source_rows: int
    copied_rows: int
    source_hash: str
    copied_hash: str

    @property
    def equal(self) -> bool:
        """Counts and hashes agree."""
        return self.source_rows == self.copied_rows and self.source_hash == self.copied_hash


def tables(db: Database) -> list[str]:
    """The store's tables, by name (SQLite's FTS5 shadow tables left out)."""
    if db.backend == "postgres":
        rows = db.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' AND table_name <> ? AND table_name NOT LIKE 'memories\\_fts\\_%' "
            "ORDER BY table_name",
            (ANN_TABLE,),  # pgvector's mirror of the vector rows and the postings (store/pgfts.py): kept by triggers
        )
    else:
        rows = db.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name NOT LIKE 'memories_fts%' ORDER BY name"
        )
    return [str(row[0]) for row in rows]


def columns(db: Database, table: str) -> list[str]:
    """The table's columns in order, without PostgreSQL's ``rowid``."""
    with db.transaction() as conn:
        description = conn.execute(f'SELECT * FROM "{table}" LIMIT 0').description
    return [str(column[0]) for column in description or () if column[0] != "rowid"]


def rowid_is_a_column(db: Database, table: str) -> bool:
    """Whether the table's rowid is one of its own columns (an INTEGER PRIMARY KEY), so copying that column
    copies the rowid."""
    if db.backend == "postgres":
        row = db.query_one(
            "SELECT is_generated FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ? AND column_name = 'rowid'",
            (table,),
        )
        return row is not None and str(row[0]) == "ALWAYS"
    info = db.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    keys = [row for row in info if row[5]]
    return len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER"


def parents(db: Database, table: str) -> set[str]:
    """The tables ``table``'s foreign keys point at."""
    if db.backend == "postgres":
        rows = db.query(
            "SELECT DISTINCT c.table_name FROM information_schema.table_constraints t "
            "JOIN information_schema.constraint_column_usage c ON c.constraint_name = t.constraint_name "
            "AND c.table_schema = t.table_schema WHERE t.constraint_type = 'FOREIGN KEY' "
            "AND t.table_schema = current_schema() AND t.table_name = ?",
            (table,),
        )
        return {str(row[0]) for row in rows} - {table}
    return {str(row[2]) for row in db.conn.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()} - {table}


def in_key_order(db: Database, names: list[str]) -> list[str]:
    """``names`` with every table after the tables its foreign keys point at."""
    ordered: list[str] = []
    pending = {name: parents(db, name) & set(names) for name in names}
    while pending:
        ready = sorted(name for name, needs in pending.items() if not needs - set(ordered))
        if not ready:  # a cycle: keep the rest as they are (the copy then fails, naming the key)
            ready = sorted(pending)
        for name in ready:
            ordered.append(name)
            del pending[name]
    return ordered


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def table_digest(db: Database, table: str, names: list[str]) -> tuple[int, str]:
    """(rows, sha256 of every row in rowid order): the same on both engines for the same content."""
    digest = hashlib.sha256()
    count = 0
    listed = ", ".join(f'"{name}"' for name in names)
    for row in db.query(f'SELECT {listed} FROM "{table}" ORDER BY rowid'):
        digest.update(json.dumps([_plain(v) for v in row], ensure_ascii=False, default=str).encode())
        digest.update(b"\n")
        count += 1
    return count, digest.hexdigest()


def copy_store(source: Database, destination: Database) -> list[TableCopy]:
    """Copy every table of ``source`` into the empty, migrated ``destination`` and compare them; raise
    :class:`StoreError` (nothing kept) when the destination holds memories already or a table differs."""
    if source.migration.to_version != destination.migration.to_version:
        raise StoreError("source and destination are at different schema versions: upgrade the older memmy")
    names = in_key_order(source, [t for t in tables(source) if t not in NOT_COPIED])
    missing = sorted(set(names) - set(tables(destination)))
    if missing:
        raise StoreError(f"the destination has no table {missing[0]}: it is not a memmy store of this version")
    results: list[TableCopy] = []
    with destination.transaction() as out:
        if out.execute("SELECT 1 FROM memories LIMIT 1").fetchone() is not None:
            raise StoreError("the destination already holds memories: copy into an empty store")
        for table in names:
            cols = columns(source, table)
            _copy_table(source, out, table, cols, with_rowid=not rowid_is_a_column(source, table))
        out.execute("DELETE FROM memories_fts")
        refill_fts(out)
        if destination.backend == "postgres":
            restart_identities(destination, out, names)
        for table in names:
            cols = columns(source, table)
            rows, digest = table_digest(source, table, cols)
            copied_rows, copied_digest = table_digest(destination, table, cols)
            results.append(TableCopy(table, rows, copied_rows, digest, copied_digest))
        different = [r for r in results if not r.equal]
        if different:
            first = different[0]
            raise StoreError(
                f"the copy of {first.table} differs ({first.source_rows} rows -> {first.copied_rows}): nothing kept"
            )
    return results


def _copy_table(source: Database, out: sqlite3.Connection, table: str, cols: list[str], *, with_rowid: bool) -> None:
    listed = ", ".join(f'"{name}"' for name in cols)
    target = (["rowid"] if with_rowid else []) + [f'"{name}"' for name in cols]
    select = f'SELECT {"rowid AS copy_rowid, " if with_rowid else ""}{listed} FROM "{table}" ORDER BY rowid'
    insert = f'INSERT INTO "{table}"({", ".join(target)}) VALUES ({",".join("?" * len(target))})'
    rows = source.query(select)
    for start in range(0, len(rows), BATCH):
        out.executemany(insert, [tuple(row) for row in rows[start : start + BATCH]])


def restart_identities(destination: Database, out: sqlite3.Connection, names: list[str]) -> None:
    """Move each identity past the copied rows, so the next insert takes the next number."""
    rows = destination.query(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND is_identity = 'YES'"
    )
    for table, column in rows:
        if table in names:
            out.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f'COALESCE((SELECT MAX("{column}") FROM "{table}"), 0) + 1, false)'
            )
