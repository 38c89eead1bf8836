"""Log rows written together (``LogRepository.together``, ``Database.write_all``): a recall's API log and recall
event go to the store in one transaction at the end (one round trip on PostgreSQL), on both backends; a failing
statement leaves nothing of its batch and the store usable; inside a caller's transaction they are its rows."""

from __future__ import annotations

import sqlite3

import pytest

from memmy.store.db import Database
from memmy.store.logs import LogRepository

API_ROW = "INSERT INTO api_logs(tool_name, source_agent, duration_ms, success, called_at) VALUES (?, ?, ?, ?, ?)"


def counts(db: Database) -> tuple[int, int]:
    api = db.query_one("SELECT count(*) FROM api_logs")
    events = db.query_one("SELECT count(*) FROM recall_events")
    return int(api[0]) if api else -1, int(events[0]) if events else -1


def test_log_rows_written_together_land_at_the_end(database: Database) -> None:
    logs = LogRepository(database)
    with logs.together():
        logs.api_call("memory_search", "bench", {"query": "q"}, {"candidates": 3}, 1.5, True, "u1")
        with logs.together():  # a nested batch is the outer one's
            event_id = logs.recall_event(
                session_id="s1",
                turn_id="t1",
                user_id="u1",
                query="why is the build red",
                query_hash="h",
                layers=["L1"],
                candidate_ids=["m1", "m2"],
                hit_ids=["m1"],
                injected_ids=["m1"],
                request={"limit": 10},
            )
        assert counts(database) == (0, 0)
    assert counts(database) == (1, 1)
    row = database.query_one(
        "SELECT session_id, query, injected_memory_ids_json FROM recall_events WHERE id = ?", [event_id]
    )
    assert row is not None and tuple(row) == ("s1", "why is the build red", '["m1"]')
    api = database.query_one("SELECT tool_name, source_agent, success, user_id FROM api_logs")
    assert api is not None and tuple(api) == ("memory_search", "bench", 1, "u1")


def test_a_failing_write_leaves_nothing_of_its_batch(database: Database) -> None:
    good = (API_ROW, ("memory_add", "x", 1.0, 1, "2026-01-01T00:00:00Z"))
    with pytest.raises(sqlite3.OperationalError):
        database.write_all([good, ("INSERT INTO no_such_table(x) VALUES (?)", (1,))])
    assert counts(database) == (0, 0)
    database.write_all([good, good])  # the store (its pool connection) is usable after the failure
    assert counts(database) == (2, 0)


def test_writes_inside_a_transaction_are_its_own(database: Database) -> None:
    good = (API_ROW, ("memory_add", "x", 1.0, 1, "2026-01-01T00:00:00Z"))
    with pytest.raises(RuntimeError), database.transaction():
        database.write_all([good])
        assert counts(database) == (1, 0)
        raise RuntimeError("the caller fails")
    assert counts(database) == (0, 0)


def test_a_failing_write_inside_a_transaction_fails_the_transaction(database: Database) -> None:
    good = (API_ROW, ("memory_add", "x", 1.0, 1, "2026-01-01T00:00:00Z"))
    with pytest.raises(sqlite3.IntegrityError), database.transaction():
        database.write_all([good])
        database.write_all([(API_ROW, (None, "x", 1.0, 1, "2026-01-01T00:00:00Z"))])  # tool_name is NOT NULL
        database.query("SELECT count(*) FROM api_logs")  # (PostgreSQL sends the writes with this statement)
    assert counts(database) == (0, 0)
    with pytest.raises(sqlite3.IntegrityError), database.transaction():  # the last thing before the COMMIT
        database.write_all([good, (API_ROW, (None, "x", 1.0, 1, "2026-01-01T00:00:00Z"))])
    assert counts(database) == (0, 0)
    database.write_all([good])
    assert counts(database) == (1, 0)


def test_writes_of_a_rolled_back_savepoint_are_undone_and_the_rest_commits(database: Database) -> None:
    row = (API_ROW, ("memory_add", "x", 1.0, 1, "2026-01-01T00:00:00Z"))
    with database.transaction():
        database.write_all([row])
        with pytest.raises(RuntimeError), database.savepoint():
            database.write_all([row, row])
            raise RuntimeError("this part fails")
        database.write_all([row])
    assert counts(database) == (2, 0)
