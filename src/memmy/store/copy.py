"""Copy a whole store from one engine to the other (SQLite <-> PostgreSQL), then prove the copy: every table's
row count and content hash on both sides, compared inside the destination's transaction (a mismatch rolls the copy
back). The source is only read.

Every table is copied with its rowids (the full-text rows and every "newest first" order go by them); the full-text
index is not copied but rebuilt on the destination from ``memories``, as a migration rebuilds it.

Rows stream from the source (a whole table is never held in memory) and go into PostgreSQL with ``COPY ... FROM
STDIN``. The tables a trigger keeps from other tables' rows (:data:`DERIVED`: indexes, not data) are not written
row by row during the load: their triggers are off for the copy's transaction (a rollback turns them back on too),
each derived table is filled once after the load, and its secondary indexes are built after that.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from memmy.errors import StoreError
from memmy.store.db import Database
from memmy.store.pgdialect import SETUP_TABLE
from memmy.store.pgfts import LEXEMES, POSTINGS, STATS
from memmy.store.pgvectors import ANN_TABLE, ANN_TRIGGER, MIRROR_SOURCE, copy_mirror
from memmy.store.schema import refill_fts

#: Not copied: the full-text index (rebuilt from memories) and each side's own migration record.
NOT_COPIED = frozenset({"memories_fts", "schema_migrations"})
BATCH = 1000
#: Where a long copy says how far it got (one line at a time); None: silent.
Progress = Callable[[str], None] | None
#: Seconds between two progress lines within one table.
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True)
class DerivedTable:
    """A PostgreSQL table that a trigger on ``source_table`` keeps (an index, not data: copies leave it out).

    ``fill`` writes it after a bulk load: SQL run on the destination, or a function given the source store and the
    destination's psycopg connection that returns the rows it wrote."""

    table: str
    source_table: str
    trigger: str
    fill: str | Callable[[Database, Any], int]


def _fill_vector_mirror(source: Database, raw: Any) -> int:
    return copy_mirror(raw, source.stream(MIRROR_SOURCE))


#: Every trigger-kept table, filled in this order after the load (and after ``memories_fts`` is refilled).
DERIVED: tuple[DerivedTable, ...] = (
    DerivedTable(ANN_TABLE, "memory_vector_entries", ANN_TRIGGER, _fill_vector_mirror),
)
#: PostgreSQL's tables that are not data: the keyword channel's postings and counts (its triggers fill them as
#: ``memories_fts`` is refilled), the tables of :data:`DERIVED` and the set-up stamp (each side's own).
NOT_DATA_ON_POSTGRES = frozenset({POSTINGS, STATS, LEXEMES, SETUP_TABLE, *(d.table for d in DERIVED)})


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


class Meter:
    """Counts the rows that pass through it and reports their rate (every :data:`PROGRESS_EVERY_S` and at the end)."""

    def __init__(self, label: str, progress: Progress) -> None:  # noqa: D107
        self.label, self.progress = label, progress
        self.rows = 0
        self.started = time.monotonic()

    def count(self, rows: Iterable[Sequence[Any]]) -> Iterator[Sequence[Any]]:
        """``rows``, counted as they pass."""
        last = self.started
        for row in rows:
            self.rows += 1
            yield row
            if self.progress is not None and self.rows % 5000 == 0 and time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                self.progress(f"  {self.label}: {self.rows:,} rows, {self.rate():,.0f} rows/s")

    def rate(self) -> float:
        """Rows a second so far."""
        return self.rows / max(time.monotonic() - self.started, 1e-9)

    def done(self, rows: int | None = None) -> None:
        """Report the total (``rows`` when the meter did not count them itself; an empty table says nothing)."""
        if rows is not None:
            self.rows = rows
        if self.progress is not None and self.rows:
            took = time.monotonic() - self.started
            self.progress(f"  {self.label}: {self.rows:,} rows in {took:.1f} s ({self.rate():,.0f} rows/s)")


def tables(db: Database) -> list[str]:
    """The store's data tables, by name (not SQLite's FTS5 shadow tables, not :data:`NOT_DATA_ON_POSTGRES`)."""
    if db.backend == "postgres":
        rows = db.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        return [str(row[0]) for row in rows if str(row[0]) not in NOT_DATA_ON_POSTGRES]
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


def rowid_order(db: Database, table: str) -> str:
    """The column that orders ``table`` by rowid through an index: ``rowid``, or on PostgreSQL the key column a
    generated ``rowid`` repeats (sorting by the generated column itself would sort the whole table)."""
    if db.backend == "postgres":
        row = db.query_one(
            "SELECT generation_expression FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ? AND column_name = 'rowid'",
            (table,),
        )
        name = str(row[0] or "").strip('()" ') if row is not None else ""
        if name.isidentifier():
            return f'"{name}"'
    return "rowid"


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
    if value is None or type(value) is str or type(value) is int:  # most values: nothing to do
        return value
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def table_digest(db: Database, table: str, names: list[str], progress: Progress = None) -> tuple[int, str]:
    """(rows, sha256 of every row in rowid order): the same on both engines for the same content (read a batch at
    a time; on PostgreSQL inside this thread's transaction when there is one)."""
    digest = hashlib.sha256()
    listed = ", ".join(f'"{name}"' for name in names)
    meter = Meter(f"hash {table} ({db.backend})", progress)
    order = rowid_order(db, table)
    for row in meter.count(db.stream(f'SELECT {listed} FROM "{table}" ORDER BY {order}')):
        digest.update(json.dumps([_plain(v) for v in row], ensure_ascii=False, default=str).encode())
        digest.update(b"\n")
    meter.done()
    return meter.rows, digest.hexdigest()


def copy_store(source: Database, destination: Database, progress: Progress = None) -> list[TableCopy]:
    """Copy every table of ``source`` into the empty, migrated ``destination`` and compare them; raise
    :class:`StoreError` (nothing kept) when the destination holds memories already or a table differs.
    ``progress`` gets a line per table (rows, rows/s) and one every few seconds within a long table."""
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
        bulk = destination.backend == "postgres"
        indexes = _derived_off(out) if bulk else []
        for table in names:
            cols = columns(source, table)
            with_rowid = not rowid_is_a_column(source, table)
            _copy_table(source, out, table, cols, with_rowid=with_rowid, bulk=bulk, progress=progress)
        meter = Meter("memories_fts (rebuilt from memories)", progress)
        out.execute("DELETE FROM memories_fts")
        if bulk:  # the same rows, from the source's memories (the copied ones are compared with them below)
            from memmy.store.pg import refill_fts_bulk

            listed = "rowid, id, memory_key, title, memory_value, tags_json"
            order = rowid_order(source, "memories")
            query = f"SELECT {listed} FROM memories WHERE status != 'deleted' ORDER BY {order}"
            meter.done(refill_fts_bulk(cast(Any, out).raw, source.stream(query)))
        else:
            refill_fts(out)
            meter.done(int(out.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0]))
        if bulk:
            _derived_on(source, out, indexes, progress)
            restart_identities(destination, out, names)
        for table in names:
            cols = columns(source, table)
            rows, digest = table_digest(source, table, cols, progress)
            copied_rows, copied_digest = table_digest(destination, table, cols, progress)
            results.append(TableCopy(table, rows, copied_rows, digest, copied_digest))
        different = [r for r in results if not r.equal]
        if different:
            first = different[0]
            raise StoreError(
                f"the copy of {first.table} differs ({first.source_rows} rows -> {first.copied_rows}): nothing kept"
            )
    if destination.backend == "postgres":  # a bulk load leaves no statistics, and the postings no visibility map
        destination.conn.execute(f"VACUUM (ANALYZE) {POSTINGS}")  # (their ranking reads them by index-only scans)
        destination.conn.execute("ANALYZE")
    return results


def _copy_table(
    source: Database,
    out: sqlite3.Connection,
    table: str,
    cols: list[str],
    *,
    with_rowid: bool,
    bulk: bool,
    progress: Progress,
) -> None:
    listed = ", ".join(f'"{name}"' for name in cols)
    target = (["rowid"] if with_rowid else []) + cols
    order = rowid_order(source, table)
    select = f'SELECT {"rowid AS copy_rowid, " if with_rowid else ""}{listed} FROM "{table}" ORDER BY {order}'
    meter = Meter(table, progress)
    rows = meter.count(source.stream(select, BATCH))
    if bulk:  # PostgreSQL: one COPY
        from memmy.store.pg import copy_in

        try:
            copy_in(cast(Any, out).raw, table, target, rows)
        except sqlite3.Error as exc:
            raise StoreError(f"copying {table} failed ({exc}): nothing kept") from exc
    else:
        quoted = ", ".join(f'"{name}"' for name in target)
        insert = f'INSERT INTO "{table}"({quoted}) VALUES ({",".join("?" * len(target))})'
        batch: list[Sequence[Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= BATCH:
                out.executemany(insert, batch)
                batch = []
        out.executemany(insert, batch)
    meter.done()


def _present(raw: Any) -> list[DerivedTable]:
    """The tables of :data:`DERIVED` this database has with their triggers (a server without pgvector has no
    vector mirror)."""
    return [
        derived
        for derived in DERIVED
        if raw.execute(
            b"SELECT 1 FROM pg_trigger WHERE tgname = %s AND tgrelid = to_regclass(%s)",
            (derived.trigger, derived.source_table),
        ).fetchone()
        and raw.execute(b"SELECT to_regclass(%s) IS NOT NULL", (derived.table,)).fetchone()[0]
    ]


def _derived_off(out: sqlite3.Connection) -> list[tuple[str, str]]:
    """Turn the triggers of :data:`DERIVED` off for this transaction and drop the secondary indexes of their tables
    and of the full-text table (each built again once its table is filled: faster than row by row); the dropped
    indexes' (name, definition)."""
    raw = cast(Any, out).raw
    indexes: list[tuple[str, str]] = []
    present = _present(raw)
    for derived in present:
        raw.execute(f'ALTER TABLE "{derived.source_table}" DISABLE TRIGGER "{derived.trigger}"'.encode())
    for table in ("memories_fts", *(derived.table for derived in present)):
        rows = raw.execute(
            b"SELECT c.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
            b"WHERE x.indrelid = to_regclass(%s) AND NOT x.indisprimary AND NOT x.indisunique",
            (table,),
        ).fetchall()
        for name, definition in rows:
            raw.execute(f'DROP INDEX "{name}"'.encode())
            indexes.append((str(name), str(definition)))
    return indexes


def _derived_on(source: Database, out: sqlite3.Connection, indexes: list[tuple[str, str]], progress: Progress) -> None:
    """Fill each table of :data:`DERIVED` from the loaded rows, build its indexes, turn its trigger back on."""
    raw = cast(Any, out).raw
    for derived in _present(raw):
        meter = Meter(f"{derived.table} (filled after the load)", progress)
        raw.execute(f'DELETE FROM "{derived.table}"'.encode())
        if isinstance(derived.fill, str):
            meter.done(raw.execute(derived.fill.encode()).rowcount)
        else:
            meter.done(derived.fill(source, raw))
        raw.execute(f'ALTER TABLE "{derived.source_table}" ENABLE TRIGGER "{derived.trigger}"'.encode())
    for name, definition in indexes:
        started = time.monotonic()
        raw.execute(definition.encode())
        if progress is not None:
            progress(f"  index {name} built in {time.monotonic() - started:.1f} s")


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
