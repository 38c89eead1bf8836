"""The one :class:`Store`: every repository over one :class:`Database`, built once, and the unit of work.

Ops groups receive the store instead of a list of repositories, and open their transactions through
:meth:`Store.transaction` (nested use joins the outer transaction, as :meth:`Database.transaction` does).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memmy.store.db import Database
from memmy.store.dreams import DreamRepository
from memmy.store.episodes import EpisodeRepository, FeedbackRepository
from memmy.store.evolution import EvolutionRepository
from memmy.store.imports import ImportStateRepository
from memmy.store.jobs import JobRepository
from memmy.store.keys import KeyRepository
from memmy.store.llm_usage import LLMUsageRepository
from memmy.store.logs import AuditLog, LogRepository
from memmy.store.memories import MemoryRepository
from memmy.store.panel_reads import PanelReads
from memmy.store.queue import EmbeddingQueue
from memmy.store.sessions import SessionRepository
from memmy.store.team import TeamMembers
from memmy.store.tombstones import TombstoneRepository
from memmy.store.vectors import VectorRepository


class Store:
    """Every repository of the process over one database (SQLite, or PostgreSQL), and the unit of work."""

    def __init__(self, db: Database) -> None:
        """Build each repository once over ``db`` (already opened and migrated)."""
        self.db = db
        self.memories = MemoryRepository(db)
        self.logs = LogRepository(db)
        self.audit = AuditLog(db)
        self.sessions = SessionRepository(db)
        self.queue = EmbeddingQueue(db)
        self.vectors = VectorRepository(db)
        self.episodes = EpisodeRepository(db)
        self.feedback = FeedbackRepository(db)
        self.evolution = EvolutionRepository(db)
        self.jobs = JobRepository(db)
        self.keys = KeyRepository(db)
        self.tombstones = TombstoneRepository(db)
        self.dreams = DreamRepository(db)
        self.imports = ImportStateRepository(db)
        self.llm_usage = LLMUsageRepository(db)
        self.panel_reads = PanelReads(db)
        self.team = TeamMembers(db)

    @classmethod
    def open(cls, path: Path) -> Store:
        """Open (creating and migrating if needed) the SQLite file at ``path``."""
        return cls(Database(path))

    @classmethod
    def open_postgres(cls, dsn: str) -> Store:
        """Open (creating the schema and migrating if needed) the PostgreSQL database at ``dsn``."""
        from memmy.store.pg import PgDatabase  # psycopg is loaded only for a PostgreSQL store

        return cls(PgDatabase(dsn))

    @property
    def backend(self) -> str:
        """Which engine holds the store: "sqlite" or "postgres"."""
        return self.db.backend

    @property
    def path(self) -> Path:
        """The SQLite file."""
        return self.db.path

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: commit at the end, roll back on error; nested use joins the outer one."""
        with self.db.transaction() as conn:
            yield conn

    @contextmanager
    def savepoint(self, name: str = "sp") -> Iterator[sqlite3.Connection]:
        """A nested unit inside the current transaction: on error only this part is rolled back."""
        with self.db.savepoint(name) as conn:
            yield conn

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        """Run a read and return all rows."""
        return self.db.query(sql, params)

    def query_one(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> sqlite3.Row | None:
        """Run a read and return the first row (or None)."""
        return self.db.query_one(sql, params)

    def close(self) -> None:
        """Checkpoint the WAL and close the connection."""
        self.db.close()
