"""How the PostgreSQL store sends its statements: a statement with bound parameters is prepared on its connection
(parsed and planned once) and runs with server-side parameters; one that PostgreSQL cannot type that way runs with
its values inlined, inside a transaction without disturbing it; integers are bound as SQLite's INTEGER (bigint);
a prepared statement whose table changed shape is prepared again. On a real server."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from memmy.store.pg import PgConnection, PgDatabase
from memmy.store.pgdialect import translate

PUT = "INSERT INTO runtime_kv(key, value_json, updated_at) VALUES (?, ?, 'now')"
GET = "SELECT value_json FROM runtime_kv WHERE key = ?"


def keys(db: PgDatabase) -> list[str]:
    return [str(row[0]) for row in db.query("SELECT key FROM runtime_kv ORDER BY key")]


def test_a_statement_run_again_on_its_connection_is_prepared_there(postgres_dsn: str) -> None:
    db = PgDatabase(postgres_dsn)
    try:
        with db.transaction() as conn:
            conn.execute(PUT, ("a", "1"))
            first = conn.execute(GET, ("a",)).fetchone()
            second = conn.execute(GET, ("b",)).fetchone()  # other literals: the same statement
            prepared = [str(row[0]) for row in conn.execute("SELECT statement FROM pg_prepared_statements")]
        assert first is not None and first[0] == "1" and second is None
        assert translate(GET).sql.replace("%s", "$1") in prepared
    finally:
        db.close()


def test_a_statement_postgres_cannot_type_with_bound_parameters_runs_with_its_values_inlined(
    postgres_dsn: str,
) -> None:
    db = PgDatabase(postgres_dsn)
    untyped = "SELECT ? IS NULL AS missing"  # PostgreSQL: "could not determine data type of parameter $1"
    try:
        with db.transaction() as conn:
            conn.execute(PUT, ("before", "1"))
            answers = [conn.execute(untyped, (value,)).fetchone() for value in (None, "x", None)]
            conn.execute(PUT, ("after", "1"))  # the transaction goes on: the first try did not abort it
        assert [row[0] if row is not None else None for row in answers] == [True, False, True]
        assert keys(db) == ["after", "before"]
        assert [row[0] for row in db.query(untyped, ("y",))] == [False]  # outside a transaction too
    finally:
        db.close()


def test_integers_are_bound_as_bigints_whatever_their_size(postgres_dsn: str) -> None:
    db = PgDatabase(postgres_dsn)
    try:
        # bound by their size, 30000 + 30000 would be a smallint sum, and overflow
        assert [row[0] for row in db.query("SELECT ? + ? AS total", (30_000, 30_000))] == [60_000]
        assert [row[0] for row in db.query("SELECT ? * ? AS total", (2**31, 2))] == [2**32]
    finally:
        db.close()


def test_a_prepared_statement_whose_table_changed_shape_is_prepared_again(postgres_dsn: str) -> None:
    db = PgDatabase(postgres_dsn, pool_max=1)  # one connection: the statement is prepared on it
    select = "SELECT * FROM runtime_kv WHERE key = ?"
    try:
        db.write_all([(PUT, ("a", "1"))])
        before: list[Any] = [db.query(select, ("a",)) for _ in range(3)]
        with psycopg.connect(postgres_dsn, autocommit=True) as other:  # another daemon's migration
            other.execute("ALTER TABLE runtime_kv ADD COLUMN note TEXT DEFAULT 'new'")
        rows = db.query(select, ("a",))
        assert len(before[-1][0]) + 1 == len(rows[0]) and rows[0]["note"] == "new"
    finally:
        db.close()


def test_writes_deferred_in_a_transaction_go_before_the_next_statement(postgres_dsn: str) -> None:
    db = PgDatabase(postgres_dsn)
    try:
        with db.transaction() as conn:
            db.write_all([(PUT, ("a", "1")), ("UPDATE runtime_kv SET value_json = ? WHERE key = ?", ("2", "a"))])
            assert isinstance(conn, PgConnection) and len(conn.pending) == 3  # the BEGIN and both: none sent yet
            row = conn.execute(GET, ("a",)).fetchone()  # sent first, in order
            assert row is not None and row[0] == "2" and not conn.pending
            db.write_all([(PUT, ("b", "1"))])  # sent with the COMMIT
        assert keys(db) == ["a", "b"]
    finally:
        db.close()


def test_a_transaction_goes_with_its_first_statement_and_a_failed_one_leaves_nothing(postgres_dsn: str) -> None:
    db = PgDatabase(postgres_dsn)
    try:
        with db.transaction() as conn:
            assert isinstance(conn, PgConnection) and conn.in_transaction and conn.pending  # BEGIN not sent yet
            assert conn.execute(GET, ("a",)).fetchone() is None  # BEGIN, the write lock and this: one text
            assert conn.in_transaction and not conn.pending
            locks = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
            row = locks.fetchone()
            assert row is not None and row[0] == 1  # the write lock is held
        with pytest.raises(RuntimeError), db.transaction():
            db.write_all([(PUT, ("a", "1"))])  # never sent: nothing to roll back on the server
            raise RuntimeError("the caller fails")
        with db.transaction():
            pass  # nothing run: nothing sent
        assert keys(db) == []
    finally:
        db.close()


def listed(conn: Any, column: str, values: list[Any], negated: bool = False) -> list[str]:
    """The keys whose ``column`` is (not) in ``values``, as an IN list of that many placeholders."""
    marks = ",".join("?" * len(values))
    sql = f"SELECT key FROM runtime_kv WHERE {column} {'NOT IN' if negated else 'IN'} ({marks}) ORDER BY key"
    return [str(row[0]) for row in conn.execute(sql, values).fetchall()]


def test_an_in_list_of_any_length_is_one_statement_prepared_once(postgres_dsn: str) -> None:
    """``IN (?, ?, …)`` is sent as ``= ANY(one array)`` (``NOT IN``: ``<> ALL``): the same text for every length,
    prepared once on its connection; texts and bigints, the same rows as the list."""
    db = PgDatabase(postgres_dsn)
    try:
        with db.transaction() as conn:
            for key in "abcde":
                conn.execute(PUT, (key, "1"))
            rowids = {str(row[0]): int(row[1]) for row in conn.execute("SELECT key, rowid FROM runtime_kv")}
            assert listed(conn, "key", ["a"]) == ["a"]
            assert listed(conn, "key", ["a", "c", "zz"]) == ["a", "c"]
            assert listed(conn, "key", ["b", "c", "d", "e", "x", "y"]) == ["b", "c", "d", "e"]
            assert listed(conn, "key", ["a", "b"], negated=True) == ["c", "d", "e"]
            assert listed(conn, "rowid", [rowids["d"], rowids["a"], 2**40]) == ["a", "d"]
            prepared = [str(row[0]) for row in conn.execute("SELECT statement FROM pg_prepared_statements")]
        assert sum("key = ANY($1)" in text for text in prepared) == 1, prepared
        assert translate("SELECT 1 WHERE 1 IN (?)").sql == translate("SELECT 1 WHERE 1 IN (?, ?,?)").sql
        assert translate("SELECT 1 WHERE 1 IN (?, 2)").sql.endswith("IN (%s, 2)")  # not a list of placeholders only
    finally:
        db.close()
