"""The store on PostgreSQL: :class:`PgDatabase` gives the repositories the interface of
:class:`memmy.store.db.Database` over a psycopg connection pool.

The repositories keep their SQL; :mod:`memmy.store.pgdialect` rewrites it. A transaction takes the pool's
connection for its thread, and first a transaction-level advisory lock shared by every daemon on the database:
writes are serialised as SQLite's one writer serialises them (the repositories' read-then-write steps were written
for that), while reads outside a transaction run concurrently on the pool. Job leasing adds ``FOR UPDATE SKIP
LOCKED``. A statement's failure surfaces as the ``sqlite3`` DB-API class of the same kind (``IntegrityError``,
``OperationalError``), so the repositories' handling is one code path for both backends.

psycopg is imported here only: a SQLite store never loads it.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memmy.errors import StoreError
from memmy.store import pgvectors
from memmy.store.db import Database, MigrationResult, _split_sql, utc_now
from memmy.store.pgdialect import FTS_FROM_LOAD, PRELUDE, SETUP_TABLE, Statement, fts_text, pg_ddl, translate
from memmy.store.pgfts import (
    FTS_DDL,
    HAS_DOCLEN,
    HAS_LEXEMES,
    HAS_TRIGGERS,
    HAS_TSV_FUNCTION,
    LEXEMES,
    LEXEMES_BACKFILL,
    POSTINGS,
    POSTINGS_BACKFILL,
    SPLIT_BY_PARSER,
    TRIGGER_DDL,
)
from memmy.store.schema import MIGRATIONS, SCHEMA_VERSION, refill_fts
from memmy.store.text import FTS_INSERT_AT, fts_row

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

log = logging.getLogger("memmy.store")
#: The advisory lock every write transaction holds (one writer at a time, across daemons, as on SQLite).
WRITE_LOCK_KEY = 0x6D656D6D79
MIGRATE_LOCK_KEY = WRITE_LOCK_KEY + 1
#: How a write transaction begins: its BEGIN and the write lock, in one round trip.
BEGIN_WRITE = f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})"
POOL_MAX = 8


class PgRow(tuple[Any, ...]):
    """A row addressable by position and by (case-insensitive) column name, like ``sqlite3.Row``."""

    _names: tuple[str, ...] = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            index = self._index.get(key)
            if index is None:
                index = self._index.get(key.lower())
                if index is None:
                    raise IndexError(f"No item with that key: {key!r}")
            return tuple.__getitem__(self, index)
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        """The column names, in order."""
        return list(self._names)


_ROW_CLASSES: dict[tuple[str, ...], type[PgRow]] = {}


def _row_class(names: tuple[str, ...]) -> type[PgRow]:
    cls = _ROW_CLASSES.get(names)
    if cls is None:
        index: dict[str, int] = {}
        for i, name in reversed(list(enumerate(names))):  # the first of a name wins, as in sqlite3.Row
            index[name] = i
            index.setdefault(name.lower(), i)
        cls = type("PgRow", (PgRow,), {"_names": names, "_index": index})
        _ROW_CLASSES[names] = cls
    return cls


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):  # SUM/AVG of integers: SQLite answers an int or a float
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


#: PostgreSQL's ``numeric`` (what SUM and AVG of integers answer): the one type whose values need converting.
NUMERIC_OID = 1700


def _has_rows(cursor: Any) -> bool:
    """Whether the statement answered rows (what ``cursor.description`` says, without building its column objects:
    ~40 us a statement of a 17-column table, each time it was asked)."""
    from psycopg.pq import ExecStatus

    result = cursor.pgresult
    return result is not None and (result.nfields > 0 or result.status == ExecStatus.TUPLES_OK)


def _row_factory(drop_rowid: bool) -> Callable[[Any], Callable[[Sequence[Any]], PgRow]]:
    def factory(cursor: Any) -> Callable[[Sequence[Any]], PgRow]:
        result = cursor.pgresult
        fields = range(result.nfields if result is not None else 0)
        names = tuple((result.fname(i) or f"column_{i + 1}".encode()).decode() for i in fields)
        keep = [i for i, name in enumerate(names) if not (drop_rowid and name == "rowid")]
        cls = _row_class(tuple(names[i] for i in keep))
        numeric = any(result.ftype(i) == NUMERIC_OID for i in keep)
        if len(keep) == len(names):
            return (lambda values: cls(_plain(v) for v in values)) if numeric else cls
        return lambda values: cls(_plain(values[i]) for i in keep)

    return factory


def _as_sqlite_error(exc: Exception) -> sqlite3.Error:
    import psycopg

    kind: type[sqlite3.Error] = sqlite3.OperationalError
    if isinstance(exc, psycopg.errors.IntegrityError):
        kind = sqlite3.IntegrityError
    error = kind(str(exc).strip())
    return error


class PgCursor:
    """What the repositories read off a cursor: rows, ``rowcount``, ``lastrowid``."""

    def __init__(self, cursor: Any, statement: Statement) -> None:  # noqa: D107
        self._cursor = cursor
        self._statement = statement

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""
        return int(self._cursor.rowcount)

    @property
    def lastrowid(self) -> int | None:
        """The rowid of the row an INSERT added (its table's identity), as sqlite3's."""
        if not self._statement.is_insert or self._statement.into == "memories_fts":
            return None
        row = self._cursor.connection.execute("SELECT lastval()").fetchone()
        return int(row[0]) if row else None

    @property
    def description(self) -> Any:
        """The columns of the result."""
        return self._cursor.description

    def fetchone(self) -> PgRow | None:
        """The next row, or None."""
        return cast(PgRow | None, self._cursor.fetchone() if _has_rows(self._cursor) else None)

    def fetchall(self) -> list[PgRow]:
        """Every row left."""
        return cast(list[PgRow], self._cursor.fetchall() if _has_rows(self._cursor) else [])

    def fetchmany(self, size: int) -> list[PgRow]:
        """Up to ``size`` rows."""
        return cast(list[PgRow], self._cursor.fetchmany(size) if _has_rows(self._cursor) else [])

    def __iter__(self) -> Iterator[PgRow]:
        return iter(self.fetchall())


#: ``PRAGMA table_info(t)``'s rows (cid, name, type, notnull, dflt_value, pk) from PostgreSQL's catalog.
TABLE_INFO = (
    "SELECT c.ordinal_position - 1 AS cid, c.column_name AS name, upper(c.data_type) AS type, "
    "CASE WHEN c.is_nullable = 'NO' THEN 1 ELSE 0 END AS notnull, c.column_default AS dflt_value, "
    "COALESCE((SELECT k.ordinal_position FROM information_schema.key_column_usage k "
    "JOIN information_schema.table_constraints t ON t.constraint_name = k.constraint_name "
    "AND t.table_schema = k.table_schema WHERE t.constraint_type = 'PRIMARY KEY' AND k.table_name = c.table_name "
    "AND k.table_schema = c.table_schema AND k.column_name = c.column_name), 0) AS pk "
    "FROM information_schema.columns c WHERE c.table_schema = current_schema() AND c.table_name = ? "
    "AND c.column_name <> 'rowid' ORDER BY c.ordinal_position"
)


#: A translated statement and the Python types of its parameters (what PostgreSQL types its parameters by).
_BindKey = tuple[str, tuple[type, ...]]
#: Statements known to run with server-side parameters, and those that need their values inlined (see
#: :meth:`PgConnection._first_bound`); per process, as the statements' text is the process's code.
_BOUND: set[_BindKey] = set()
_CLIENT_SIDE: set[_BindKey] = set()
_BIND_SAVEPOINT = "memmy_bind"
#: How many statements :data:`_BOUND` remembers before it starts again (IN lists of every length are statements of
#: their own: a bound on what a long-running daemon keeps; a forgotten one is only tried again).
_BOUND_MAX = 8192


def _int8(value: Any) -> Any:
    """An int (or a list of them: an IN list) bound as SQLite's INTEGER, bigint, not int2 or int4 by its size."""
    from psycopg.types.numeric import Int8

    if type(value) is int:
        return Int8(value)
    if type(value) is list:
        return [Int8(v) if type(v) is int else v for v in value]
    return value


class PgConnection:
    """A pool connection with sqlite3's ``execute``/``executemany``, taking SQLite's SQL (see module doc)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:  # noqa: D107
        self._raw = conn
        #: What is to run before anything else on the connection, in order, as PostgreSQL text and its values:
        #: the transaction's BEGIN (:meth:`begin`) and the writes :meth:`defer` queued. It goes in the same text
        #: as the next statement (or the COMMIT), in one round trip.
        self.pending: list[tuple[str, list[Any]]] = []
        self._begin_pending = False

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The psycopg connection, what is pending sent first (whatever runs on it comes after it)."""
        self.flush()
        return self._raw

    def begin(self, text: str) -> None:
        """Begin a transaction with ``text`` (PostgreSQL: BEGIN and the write lock), sent with its first
        statement; a transaction that runs none sends nothing."""
        self.pending.append((text, []))
        self._begin_pending = True

    def defer(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Queue writes whose results nobody reads (SQLite dialect) to go with the next statement on this
        connection, or its COMMIT, in its round trip. A failure of one of them surfaces there, inside the same
        transaction, which it fails as it would have failed it here."""
        for sql, given in statements:
            statement = translate(sql)
            self.pending.append((statement.text(tuple(given)), statement.params(tuple(given))))

    def flush(self) -> None:
        """Send what is pending (one round trip), if anything is."""
        if self.pending:
            self.execute_all(())

    def commit(self) -> None:
        """COMMIT, with what is pending in the same round trip (nothing at all when the transaction ran
        nothing)."""
        if self._begin_pending and len(self.pending) == 1:
            self.pending, self._begin_pending = [], False
        elif self.pending:
            self.execute_all((), after="COMMIT")
        else:
            self.raw_execute("COMMIT")

    @property
    def in_transaction(self) -> bool:
        """Inside BEGIN … COMMIT (a BEGIN not sent yet included)."""
        from psycopg.pq import TransactionStatus

        return self._begin_pending or self._raw.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        """Run one statement (SQLite dialect, ``?`` placeholders), after what is pending (in its round trip)."""
        head = sql.lstrip()[:24].upper()
        if head.startswith("PRAGMA"):  # SQLite's settings: nothing to set on PostgreSQL, bar table_info
            info = re.match(r"\s*PRAGMA\s+table_info\(\s*['\"]?(\w+)['\"]?\s*\)\s*$", sql, re.IGNORECASE)
            if info is None:
                return PgCursor(self._raw.cursor(), translate("SELECT 1 WHERE false"))
            sql, params = TABLE_INFO, (info.group(1),)
        if not params and head.startswith(("CREATE TABLE", "CREATE INDEX", "CREATE UNIQUE INDEX", "CREATE VIRTUAL")):
            for ddl in pg_ddl(sql):  # DDL as the migrations translate it (a rowid on every table)
                self.raw_execute(ddl)
            return PgCursor(self._raw.cursor(), translate("SELECT 1 WHERE false"))
        statement = translate(sql)
        given = tuple(params)
        values = statement.params(given)
        bound = statement.bound(given) if statement.inline and not self.pending else None
        if bound is not None:  # full text whose words are a parameter: one text, prepared
            return self._bound(statement, bound[1], bound[0])
        if statement.inline or self.pending:  # text written per call (full text), or one text with the pending
            return self._client_side(statement, statement.text(given), values)
        key = (statement.sql, tuple(map(type, values)))
        if key in _CLIENT_SIDE:
            return self._client_side(statement, statement.sql, values)
        if key in _BOUND:
            return self._bound(statement, values)
        return self._first_bound(statement, values, key)

    def _client_side(self, statement: Statement, text: str, values: list[Any]) -> PgCursor:
        """Run ``text`` with its values inlined as literals (a simple-protocol text, parsed every time), after
        what is pending, in the same text: the cursor is left on this statement's result."""
        import psycopg

        pending, self.pending, self._begin_pending = self.pending, [], False
        cursor = psycopg.ClientCursor(self._raw, row_factory=_row_factory(statement.drops_rowid))
        try:
            cursor.execute(
                "; ".join([*(t for t, _v in pending), text]).encode(), [*(v for _t, vs in pending for v in vs), *values]
            )
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc) from exc
        while cursor.nextset():  # past the pending statements' results
            pass
        return PgCursor(cursor, statement)

    def _bound(self, statement: Statement, values: list[Any], text: str | None = None) -> PgCursor:
        """Run the statement (or ``text``, its full-text form with bound words) with server-side parameters:
        prepared on this connection from its :data:`PREPARE_THRESHOLD`-th run there (parsed and planned once, not
        each time its literals change)."""
        import psycopg

        cursor = self._raw.cursor(row_factory=_row_factory(statement.drops_rowid))
        bound = [_int8(v) for v in values]
        sent = (text or statement.sql).encode()
        try:
            try:
                cursor.execute(sent, bound)
            except psycopg.errors.FeatureNotSupported as exc:
                # A table's columns changed under a prepared statement (DDL on another connection): PostgreSQL
                # refuses to answer rows of another shape. Prepare it again; inside a transaction, which that
                # error aborted, the ROLLBACK that follows drops this connection's prepared statements.
                if self.in_transaction or "cached plan" not in str(exc):
                    raise
                self._raw.execute(b"DEALLOCATE ALL", prepare=False)  # (psycopg forgets its names with them)
                cursor.execute(sent, bound)
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc) from exc
        return PgCursor(cursor, statement)

    def _first_bound(self, statement: Statement, values: list[Any], key: _BindKey) -> PgCursor:
        """The first run in this process of a statement with these parameter types, server-side: a statement
        PostgreSQL cannot type with bound parameters (``? IS NULL``: an error of class 42 when it is parsed) runs
        with inlined literals from then on. Inside a transaction the try runs under a savepoint, so such a failure
        leaves the transaction as it was; any other failure is the statement's own, and surfaces as it would."""
        import psycopg

        guarded = self.in_transaction
        if guarded:
            self.raw_execute(f"SAVEPOINT {_BIND_SAVEPOINT}")
        try:
            cursor = self._bound(statement, values)
        except sqlite3.Error as exc:
            cause = exc.__cause__
            if not (isinstance(cause, psycopg.Error) and (cause.sqlstate or "").startswith("42")):
                _BOUND.add(key)  # it parsed: the failure is the statement's (a key taken, a constraint)
                raise
            if guarded:
                self.raw_execute(f"ROLLBACK TO SAVEPOINT {_BIND_SAVEPOINT}; RELEASE SAVEPOINT {_BIND_SAVEPOINT}")
            _CLIENT_SIDE.add(key)
            log.debug("statement runs with inlined literals (%s): %s", cause.sqlstate, statement.sql[:200])
            return self._client_side(statement, statement.sql, values)
        if guarded:
            self.raw_execute(f"RELEASE SAVEPOINT {_BIND_SAVEPOINT}")
        if len(_BOUND) >= _BOUND_MAX:
            _BOUND.clear()
        _BOUND.add(key)
        return cursor

    def executemany(self, sql: str, seq: Any) -> PgCursor:
        """Run one statement for each parameter tuple, after the deferred writes."""
        import psycopg

        self.flush()
        statement = translate(sql)
        cursor = psycopg.ClientCursor(self._raw, row_factory=_row_factory(statement.drops_rowid))
        try:
            cursor.executemany(statement.sql.encode(), [statement.params(tuple(p)) for p in seq])  # (no MATCH)
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc) from exc
        return PgCursor(cursor, statement)

    def execute_all(self, statements: Sequence[tuple[str, Sequence[Any]]], before: str = "", after: str = "") -> None:
        """Run statements (SQLite dialect, no results read) as one text, one round trip: ``before`` and ``after``
        (PostgreSQL text) around them, what is pending first; a failure rolls back the transaction the text
        began (``before``), and leaves one it did not begin to its owner."""
        import psycopg

        self.defer(statements)  # after what is pending, in order
        pending, self.pending, self._begin_pending = self.pending, [], False
        texts = [*([before] if before else []), *(text for text, _values in pending), *([after] if after else [])]
        params = [value for _text, values in pending for value in values]
        try:
            psycopg.ClientCursor(self._raw).execute("; ".join(texts).encode(), params)
        except psycopg.Error as exc:
            if before and self.in_transaction:  # the transaction it began (the caller's own rolls back its own)
                self.raw_execute("ROLLBACK")
            raise _as_sqlite_error(exc) from exc

    def raw_execute(self, sql: str) -> None:
        """Run PostgreSQL text as it is (no parameters, no rewrite), after what is pending; a ROLLBACK (to a
        savepoint, which was set before them) drops the pending writes instead (and a transaction whose BEGIN was
        not sent has nothing to roll back)."""
        import psycopg

        if sql.lstrip().upper().startswith("ROLLBACK"):
            begun, self.pending, self._begin_pending = not self._begin_pending, [], False
            if not begun:
                return
        self.flush()
        try:
            self._raw.execute(sql.encode())
        except psycopg.Error as exc:
            raise _as_sqlite_error(exc) from exc


#: What a daemon installs at start besides the migrations (see :data:`memmy.store.pgdialect.SETUP_TABLE`): the
#: store runs it again when any of it changes.
SETUP_DIGEST = hashlib.sha256(
    "\0".join(
        (
            str(SCHEMA_VERSION),
            *PRELUDE,
            *FTS_DDL,
            *POSTINGS_BACKFILL,
            *TRIGGER_DDL,
            pgvectors.BLOB_TO_VECTOR,
            *pgvectors.ANN_DDL,
            pgvectors.ANN_BACKFILL,
        )
    ).encode()
).hexdigest()
_SETUP_DDL = (
    f"CREATE TABLE IF NOT EXISTS {SETUP_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), digest TEXT NOT NULL, "
    "has_vector BOOLEAN NOT NULL, set_up_at TEXT NOT NULL)"
)
_SETUP_STAMP = (
    f"INSERT INTO {SETUP_TABLE}(id, digest, has_vector, set_up_at) VALUES (1, %s, %s, %s) ON CONFLICT (id) DO "
    "UPDATE SET digest = EXCLUDED.digest, has_vector = EXCLUDED.has_vector, set_up_at = EXCLUDED.set_up_at"
)


def set_up_already(raw: Any, target: int = SCHEMA_VERSION) -> tuple[int, bool] | None:
    """The store's schema version and whether it has pgvector, when it is at ``target`` and set up by this
    memmy's :data:`SETUP_DIGEST` (nothing to run then: no DDL, no lock taken); None when something is to do."""
    row = raw.execute(
        b"SELECT to_regclass('schema_migrations') IS NOT NULL AND to_regclass(%s) IS NOT NULL", (SETUP_TABLE,)
    ).fetchone()
    if not (row and row[0]):
        return None
    row = raw.execute(
        f"SELECT s.digest, s.has_vector, (SELECT MAX(version) FROM schema_migrations), "
        "EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') "
        f"FROM {SETUP_TABLE} s WHERE s.id = 1".encode()
    ).fetchone()
    if row is None or row[0] != SETUP_DIGEST or int(row[2] or 0) != target:
        return None
    if not row[1] and row[3]:  # pgvector was installed on the server since: create the extension and its mirror
        return None
    return int(row[2]), bool(row[1])


def install_fts(conn: PgConnection, parsed_tsv: bool = False) -> None:
    """The keyword channel's postings, counts and triggers (:mod:`memmy.store.pgfts`), in one transaction.

    Where ``memories_fts`` has no postings triggers yet (a new store, a table a migration recreated, a store made
    before the postings) the postings are filled from it in one statement (postings made before the lexemes'
    document counts get those counted from them); a store made before them (its
    tsvectors stemmed by Snowball English, no document lengths) has its full-text rows written again first.
    ``parsed_tsv``: the store's tsvectors were made by PostgreSQL's parser (before :data:`TSV_FUNCTION`); the rows
    whose stems it split are written again (:data:`SPLIT_BY_PARSER`).
    """
    conn.raw_execute("BEGIN")
    filled = False
    try:
        # First the table whose writes fire the triggers, as a writer locks them: waiting for a daemon's write
        # here, rather than holding the postings while it waits for us, is what keeps this from a deadlock.
        conn.raw_execute("LOCK TABLE memories_fts IN SHARE ROW EXCLUSIVE MODE")
        row = conn.raw.execute(HAS_DOCLEN.encode()).fetchone()
        before_postings = not (row and row[0])
        row = conn.raw.execute(HAS_LEXEMES.encode()).fetchone()
        before_lexemes = not (row and row[0])
        for statement in FTS_DDL:
            conn.raw_execute(statement)
        row = conn.raw.execute(HAS_TRIGGERS.encode()).fetchone()
        if row and row[0] and before_lexemes:  # postings made before the lexemes' counts: counted from them
            for statement in LEXEMES_BACKFILL:
                conn.raw_execute(statement)
            filled = True
        elif not (row and row[0]):
            if before_postings:
                conn.raw_execute("DELETE FROM memories_fts")
                refill_fts(cast(sqlite3.Connection, conn))
            for statement in POSTINGS_BACKFILL:
                conn.raw_execute(statement)
            filled = True
        for statement in TRIGGER_DDL:
            conn.raw_execute(statement)
        if parsed_tsv and not before_postings:
            filled = rewrite_split_rows(conn) > 0 or filled
    except BaseException:
        conn.raw_execute("ROLLBACK")
        raise
    conn.raw_execute("COMMIT")
    if filled:  # ranking reads the postings by index-only scans: they want the visibility map set and statistics
        conn.raw_execute(f"VACUUM (ANALYZE) {POSTINGS}")
        conn.raw_execute(f"ANALYZE memories_fts, {LEXEMES}")


def rewrite_split_rows(conn: PgConnection) -> int:
    """Write again the full-text rows whose tsvector PostgreSQL's parser made from split stems (the triggers
    follow with the postings and counts); how many. Inside the caller's transaction."""
    rows = conn.raw.execute(SPLIT_BY_PARSER.encode()).fetchall()
    for rowid, memory_id, identifier, value, tags in rows:
        conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))
        conn.execute(FTS_INSERT_AT, (rowid, memory_id, identifier or "", value or "", tags or ""))
    if rows:
        log.info("rewrote %d full-text rows whose words PostgreSQL's parser had split", len(rows))
    return len(rows)


class _Done:
    """A finished statement's rows and counts, read before its pool connection went back."""

    def __init__(self, rows: list[PgRow], rowcount: int, lastrowid: int | None) -> None:  # noqa: D107
        self.rows, self.rowcount, self.lastrowid = rows, rowcount, lastrowid

    def fetchone(self) -> PgRow | None:
        """The next row, or None."""
        return self.rows.pop(0) if self.rows else None

    def fetchall(self) -> list[PgRow]:
        """Every row left."""
        rows, self.rows = self.rows, []
        return rows

    def __iter__(self) -> Iterator[PgRow]:
        return iter(self.fetchall())


class _Detached:
    """``db.conn`` outside a transaction: each statement on a pool connection of its own, committed at once."""

    in_transaction = False

    def __init__(self, db: PgDatabase) -> None:  # noqa: D107
        self.db = db

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Done:
        """Run one statement in autocommit."""
        with self.db.pool.connection() as raw:
            cursor = PgConnection(raw).execute(sql, params)
            return _Done(cursor.fetchall(), cursor.rowcount, cursor.lastrowid)


_CURSORS = itertools.count(1)


def _named_cursor(raw: psycopg.Connection[Any], sql: str, batch: int) -> Iterator[tuple[Any, ...]]:
    with raw.cursor(name=f"memmy_stream_{next(_CURSORS)}", binary=True) as cursor:
        cursor.itersize = batch
        cursor.execute(sql.encode())
        yield from cursor  # a table's own columns: bytes, text, numbers (no numeric to convert)


def copy_in(raw: psycopg.Connection[Any], table: str, names: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Write ``rows`` into ``table``'s columns ``names`` with one ``COPY ... FROM STDIN`` (text format: each value
    as its Python type dumps it, read by the column's type, as an INSERT would); the number of rows."""
    import psycopg

    listed = ", ".join(f'"{name}"' for name in names)
    count = 0
    try:
        with raw.cursor() as cursor, cursor.copy(f'COPY "{table}" ({listed}) FROM STDIN'.encode()) as copy:
            for row in rows:
                copy.write_row(row)
                count += 1
    except psycopg.Error as exc:
        raise _as_sqlite_error(exc) from exc
    return count


def refill_fts_bulk(raw: psycopg.Connection[Any], memories: Iterable[Sequence[Any]]) -> int:
    """Fill the empty ``memories_fts`` from ``memories`` rows (rowid, id, memory_key, title, memory_value,
    tags_json; the ones not deleted) in one ``COPY`` and one ``INSERT ... SELECT``: the rows and tsvectors the
    per-row INSERT writes, without a statement per row. ``raw``: inside the transaction; returns the rows."""
    import psycopg

    columns = ("rowid", "id", "identifier", "memory_value", "tags", "identifier_tokens", "value_tokens", "tags_tokens")
    raw.execute(
        b"CREATE TEMPORARY TABLE memmy_fts_load (rowid BIGINT, id TEXT, identifier TEXT, memory_value TEXT, "
        b"tags TEXT, identifier_tokens TEXT, value_tokens TEXT, tags_tokens TEXT) ON COMMIT DROP"
    )

    def rows() -> Iterator[tuple[Any, ...]]:
        for rowid, memory_id, key, title, value, tags_json in memories:
            identifier, text, tags = fts_row(key, title, value, tags_json)
            yield rowid, memory_id, identifier, text, tags, fts_text(identifier), fts_text(text), fts_text(tags)

    copy_in(raw, "memmy_fts_load", columns, rows())
    try:
        filled = int(raw.execute(FTS_FROM_LOAD.encode()).rowcount)
        raw.execute(b"DROP TABLE memmy_fts_load")
    except psycopg.Error as exc:
        raise _as_sqlite_error(exc) from exc
    return filled


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password (for messages and logs)."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)


#: A statement with bound parameters is prepared on a connection when it runs there the second time (one-off
#: texts, such as an IN list of a length seen once, stay unprepared); a connection keeps the most recent
#: :data:`PREPARED_MAX` (psycopg deallocates the oldest).
PREPARE_THRESHOLD = 1
PREPARED_MAX = 256


#: Every pool connection runs its statements without parallel workers. A ranked keyword statement of many words
#: was planned with two (Gather Merge over partial sums): on a busy machine their start and their share of the
#: cores cost more than they saved, and the bm25() sums, added per worker and then combined as the workers finished,
#: differed in their last bits (4 of 229 statements replayed at 100k); without them each row's terms are summed in
#: the order of the query's parts, as FTS5 sums them, every time.
SESSION_SETTINGS = "SET max_parallel_workers_per_gather = 0"


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute(f"{pgvectors.SESSION_SETTINGS}; {SESSION_SETTINGS}".encode())
    conn.prepare_threshold = PREPARE_THRESHOLD
    conn.prepared_max = PREPARED_MAX


class PgDatabase(Database):
    """The store on PostgreSQL (see the module doc): the same query/transaction/savepoint API as SQLite's."""

    backend = "postgres"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def __init__(self, dsn: str, pool_max: int = POOL_MAX) -> None:  # noqa: D107 - documented on the class
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - the extra is not installed
            raise StoreError("storage.backend postgres needs `pip install memmy[postgres]` (psycopg)") from exc
        self.dsn = dsn
        self.path = Path(f"postgres-{abs(hash(dsn))}.unavailable")  # no file: file-level tools say so
        self.lock = threading.RLock()
        self.last_write_error = None
        self._probe = None
        self._bulk_depth = 0
        self.commits = 0
        self._checkpoints = None
        self._local = threading.local()
        try:
            self.pool: ConnectionPool[Any] = ConnectionPool(
                dsn,
                min_size=1,
                max_size=pool_max,
                kwargs={"autocommit": True},
                configure=_configure,
                open=True,
                timeout=30.0,
            )
            self.pool.wait(timeout=30.0)
        except Exception as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {exc}") from None
        try:
            self.migration = self._migrate()
        except sqlite3.Error as exc:
            self.pool.close()
            raise StoreError(f"{redact_dsn(dsn)} cannot be used ({exc})") from None

    def __repr__(self) -> str:
        return f"PgDatabase({redact_dsn(self.dsn)})"

    # --- migrations ---------------------------------------------------------------------------------------------

    def _migrate(self, target: int = SCHEMA_VERSION) -> MigrationResult:
        """The migration list of :mod:`memmy.store.schema`, each statement as :func:`pg_ddl` writes it for
        PostgreSQL, under an advisory lock (daemons starting at once migrate once)."""
        applied: list[str] = []
        with self.pool.connection() as raw:
            done = self._already_set_up(raw, target)
            if done is not None:
                return done
            conn = PgConnection(raw)
            conn.raw_execute(f"SELECT pg_advisory_lock({MIGRATE_LOCK_KEY})")
            try:
                done = self._already_set_up(raw, target)  # another daemon set it up while this one waited
                if done is not None:
                    return done
                row = raw.execute(HAS_TSV_FUNCTION.encode()).fetchone()
                parsed_tsv = not (row and row[0])  # its tsvectors (if any) came from PostgreSQL's parser
                for statement in PRELUDE:
                    conn.raw_execute(statement)
                version = self._version(conn)
                if version > target:
                    raise StoreError(
                        f"{redact_dsn(self.dsn)}: schema version {version} is newer than this memmy supports "
                        f"({target}); upgrade memmy"
                    )
                for migration in MIGRATIONS:
                    if migration.version <= version or migration.version > target:
                        continue
                    conn.raw_execute("BEGIN")
                    try:
                        for sqlite_statement in _split_sql(migration.sql):
                            for pg_statement in pg_ddl(sqlite_statement):
                                conn.raw_execute(pg_statement)
                        if migration.after is not None:
                            migration.after(cast(sqlite3.Connection, conn))
                        conn.execute(
                            "INSERT INTO schema_migrations(id, version, applied_at, checksum) VALUES (?,?,?,?)",
                            (migration.id, migration.version, utc_now(), str(len(migration.sql))),
                        )
                    except sqlite3.Error as exc:
                        conn.raw_execute("ROLLBACK")
                        raise StoreError(f"{redact_dsn(self.dsn)}: migration {migration.id} failed: {exc}") from exc
                    conn.raw_execute("COMMIT")
                    applied.append(migration.id)
                install_fts(conn, parsed_tsv)
                #: Whether the server has pgvector: the vector channel then asks the database (store/pgvectors.py).
                self.has_vector = pgvectors.install(raw)  # under the lock: daemons starting at once install once
                conn.raw_execute(_SETUP_DDL)
                raw.execute(_SETUP_STAMP.encode(), (SETUP_DIGEST, self.has_vector, utc_now()))
            finally:
                conn.raw_execute(f"SELECT pg_advisory_unlock({MIGRATE_LOCK_KEY})")
        return MigrationResult(version, target, tuple(applied), None)

    def _already_set_up(self, raw: Any, target: int) -> MigrationResult | None:
        """Nothing to run (:func:`set_up_already`): the store as it is, with whether it has pgvector."""
        done = set_up_already(raw, target)
        if done is None:
            return None
        self.has_vector = done[1]
        return MigrationResult(done[0], target, (), None)

    @staticmethod
    def _version(conn: PgConnection) -> int:
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0) if row else 0

    # --- the unit of work ---------------------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's transaction connection, or one that runs each statement on its own."""
        current = self._current()
        return cast(sqlite3.Connection, current if current is not None else _Detached(self))

    @conn.setter
    def conn(self, value: sqlite3.Connection) -> None:
        raise AttributeError("a PostgreSQL store has no single connection to replace")

    def _current(self) -> PgConnection | None:
        conn: PgConnection | None = getattr(self._local, "conn", None)
        return conn

    def in_transaction(self) -> bool:
        """Whether this thread is inside a transaction of this store."""
        return self._current() is not None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction holding the store's write lock (nested calls join the outer one)."""
        with self.lock:
            current = self._current()
            if current is not None:
                yield cast(sqlite3.Connection, current)
                return
            with self.pool.connection() as raw:
                conn = PgConnection(raw)
                conn.begin(BEGIN_WRITE)  # sent with the first statement
                self._local.conn = conn
                try:
                    yield cast(sqlite3.Connection, conn)
                except BaseException:
                    self._local.conn = None
                    if conn.in_transaction:
                        conn.raw_execute("ROLLBACK")
                    raise
                self._local.conn = None
                try:
                    conn.commit()
                except sqlite3.Error:
                    if conn.in_transaction:
                        conn.raw_execute("ROLLBACK")
                    raise
                self.commits += 1

    def write_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run writes whose results nobody reads in one transaction that holds the write lock, sent with its
        ``BEGIN`` and ``COMMIT`` as one text: one round trip where a transaction of its own took one per statement
        and two more. Inside the caller's transaction they are deferred (:meth:`PgConnection.defer`): sent in the
        round trip of the next statement on its connection, or of its COMMIT."""
        with self.lock:
            current = self._current()
            if current is not None:
                current.defer(statements)
                return
            with self.pool.connection() as raw:
                PgConnection(raw).execute_all(statements, before=BEGIN_WRITE, after="COMMIT")
            self.commits += 1

    @contextmanager
    def savepoint(self, name: str = "sp") -> Iterator[sqlite3.Connection]:
        """A nested unit inside the current transaction: on error only this part is rolled back."""
        with self.transaction() as conn:
            pg = cast(PgConnection, conn)
            pg.raw_execute(f"SAVEPOINT {name}")
            try:
                yield conn
            except BaseException:
                pg.raw_execute(f"ROLLBACK TO SAVEPOINT {name}")
                pg.raw_execute(f"RELEASE SAVEPOINT {name}")
                raise
            pg.raw_execute(f"RELEASE SAVEPOINT {name}")

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        """Run a read and return all rows (on this thread's transaction, else on a pool connection)."""
        current = self._current()
        if current is not None:
            return cast(list[sqlite3.Row], current.execute(sql, params).fetchall())
        with self.pool.connection() as raw:
            return cast(list[sqlite3.Row], PgConnection(raw).execute(sql, params).fetchall())

    def query_one(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> sqlite3.Row | None:
        """Run a read and return the first row (or None)."""
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def stream(self, sql: str, batch: int = 2000) -> Iterator[tuple[Any, ...]]:
        """The rows of a read (PostgreSQL text, no parameters) through a server-side cursor, ``batch`` at a time:
        on this thread's transaction (so it sees its uncommitted rows), else on a pool connection of its own."""
        current = self._current()
        if current is not None:
            yield from _named_cursor(current.raw, sql, batch)
            return
        with self.pool.connection() as raw, raw.transaction():
            yield from _named_cursor(raw, sql, batch)

    # --- what SQLite's file needs and PostgreSQL does not -------------------------------------------------------

    @contextmanager
    def bulk_writes(self, checkpoint_pages: int = 0) -> Iterator[None]:
        """Nothing to tune: PostgreSQL has no WAL checkpoint threshold per connection."""
        yield

    def checkpoint_in_background(self, interval_s: float = 0.0) -> Any:
        """Nothing to do: the server checkpoints its own WAL."""
        return None

    def recover(self, exc: BaseException) -> str | None:
        """Nothing to repair in place (there is no FTS5 file to rebuild)."""
        return None

    def _low_disk(self) -> str | None:
        return None

    def close(self) -> None:
        """Close the pool."""
        self.pool.close()
