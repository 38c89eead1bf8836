"""WAL checkpoints on their own thread (real SQLite, real files): no commit copies the log back, the thread does;
a bulk run keeps its own batching; closing stops the thread and truncates the log."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from memmy.store.checkpoints import SAFETY_NET_PAGES
from memmy.store.db import BULK_CHECKPOINT_PAGES, DEFAULT_CHECKPOINT_PAGES, Database


def write_pages(db: Database, commits: int, rows: int = 20) -> None:
    """``commits`` transactions of ``rows`` 2 KB rows each (about ``commits * rows / 2`` pages of log)."""
    for _ in range(commits):
        with db.transaction() as conn:
            conn.executemany("INSERT INTO filler(blob) VALUES (randomblob(2048))", [()] * rows)


def autocheckpoint(db: Database) -> int:
    row = db.query_one("PRAGMA wal_autocheckpoint")
    assert row is not None
    return int(row[0])


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_the_log_is_copied_back_by_the_thread_not_by_a_commit(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    with db.transaction() as conn:
        conn.execute("CREATE TABLE filler(blob BLOB)")
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    checkpoints = db.checkpoint_in_background(interval_s=0.05)
    assert checkpoints.running and db.checkpoint_in_background() is checkpoints
    assert autocheckpoint(db) == SAFETY_NET_PAGES
    checkpoints.stop()  # hold the thread while the log fills, to see that no commit empties it
    size_before = (tmp_path / "m.sqlite").stat().st_size
    write_pages(db, commits=120)  # ~1,200 pages: past SQLite's default threshold of 1,000
    assert (tmp_path / "m.sqlite").stat().st_size == size_before  # every page still only in the log
    checkpoints.start()
    assert wait_for(lambda: checkpoints.runs >= 1)
    assert (tmp_path / "m.sqlite").stat().st_size > size_before + 2 * 1024 * 1024  # copied back by the thread
    runs = checkpoints.runs
    time.sleep(0.3)
    assert checkpoints.runs == runs  # nothing committed since: nothing to do
    db.close()
    assert not checkpoints.running
    wal = tmp_path / "m.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # closing still checkpoints and truncates the log


def test_a_bulk_run_keeps_its_own_checkpoints_and_the_thread_stands_aside(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    with db.transaction() as conn:
        conn.execute("CREATE TABLE filler(blob BLOB)")
    assert autocheckpoint(db) == DEFAULT_CHECKPOINT_PAGES  # without the thread: SQLite's default
    checkpoints = db.checkpoint_in_background(interval_s=0.05)
    with db.bulk_writes():
        assert autocheckpoint(db) == BULK_CHECKPOINT_PAGES
        write_pages(db, commits=5)
        runs = checkpoints.runs
        time.sleep(0.3)
        assert checkpoints.runs == runs  # an import's batches are not copied back every look
    assert autocheckpoint(db) == SAFETY_NET_PAGES
    assert wait_for(lambda: checkpoints.runs > runs)  # after the run, the thread copies the log back
    db.close()
