"""Store checks for front ends that must not import the store layer: the offline ``doctor`` checks and repair,
and whether a server lock's holder is still the daemon that wrote it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memmy.store.db import ServerLock, lock_holder_alive
from memmy.store.integrity import Finding, check_store, repair_store
from memmy.store.pg import redact_dsn
from memmy.store.pgfts import LEXEMES, POSTINGS, POSTINGS_BACKFILL, STATS, STATS_ROWS
from memmy.store.pgvectors import ANN_BACKFILL, ANN_TABLE
from memmy.store.schema import SCHEMA_VERSION

__all__ = [
    "Finding",
    "check_postgres",
    "check_store",
    "lock_holder_alive",
    "repair",
    "repair_postgres",
    "serving_daemon",
]

_UNREACHABLE_FIX = "start the PostgreSQL server, or correct storage.postgresDsn (MEMMY_POSTGRES_DSN)"
#: Live memories without a vector, and the vectors per embedding model (the same SQL on both backends).
MISSING_VECTORS = (
    "SELECT COUNT(*) FROM memories m WHERE m.status = 'activated' AND m.superseded_by IS NULL "
    "AND NOT EXISTS (SELECT 1 FROM memory_vector_entries v WHERE v.memory_id = m.id)"
)
VECTORS_PER_MODEL = "SELECT embedding_model, embedding_dim, COUNT(*) FROM memory_vector_entries GROUP BY 1, 2"


def vector_findings(where: str, missing: int, models: list[tuple[str, int, int]]) -> list[Finding]:
    """Live memories without a vector (search misses them), and vectors made by more than one model."""
    findings = []
    if missing:
        findings.append(
            Finding(
                "vectors_missing",
                "warning",
                f"{missing} live memories in {where} have no vector yet: semantic search cannot find them",
                "memmy-memory worker run  # with the daemon running; it embeds what is queued",
            )
        )
    if len(models) > 1:
        seen = ", ".join(f"{model} ({dim} dims): {n}" for model, dim, n in models)
        findings.append(
            Finding(
                "vectors_mixed",
                "warning",
                f"the vector index mixes embedding models ({seen}); vectors of another model are not compared",
                "restart the daemon (memmy-memory service restart, or serve): it re-embeds stale vectors at start",
            )
        )
    return findings


def check_postgres(dsn: str) -> list[Finding]:
    """The offline checks of a store on PostgreSQL (read only): the server answers and holds memmy's schema at a
    version this memmy serves, the keyword channel's counts and the vector mirror agree with the rows they index,
    and every live memory has a vector. The file checks (quick_check, the FTS5 index) are SQLite's; PostgreSQL
    checks its own files."""
    import psycopg

    where = redact_dsn(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
            if row is None or row[0] is None:
                fix = "memmy-memory serve  # creates the store on its first start"
                return [Finding("missing", "info", f"{where} holds no memmy store yet", fix)]
            return _store_findings(conn, where)
    except psycopg.OperationalError as exc:
        return [Finding("unreachable", "error", f"cannot connect to PostgreSQL at {where}: {exc}", _UNREACHABLE_FIX)]
    except psycopg.Error as exc:
        return [Finding("damaged", "error", f"{where}: a check failed ({exc})", "memmy-memory doctor --repair")]


def _store_findings(conn: Any, where: str) -> list[Finding]:
    version = int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0])
    if version > SCHEMA_VERSION:
        message = f"{where} has schema version {version}, newer than this memmy serves ({SCHEMA_VERSION})"
        return [Finding("too_new", "error", message, "pip install -U memmy  # on this machine too")]
    if version < SCHEMA_VERSION:
        message = f"{where} has schema version {version}; this memmy migrates it to {SCHEMA_VERSION} at its start"
        return [Finding("migration_pending", "info", message, "memmy-memory serve  # or service restart")]
    findings: list[Finding] = []
    indexed = int(conn.execute("SELECT COUNT(*) FROM memories_fts").fetchone()[0])
    counted = conn.execute(STATS_ROWS.encode()).fetchone() if _has(conn, STATS) else None
    words_off = _has(conn, LEXEMES) and _has(conn, POSTINGS)
    if words_off:  # each lexeme's document count sums to the postings (one per lexeme and document)
        summed, postings = conn.execute(
            f"SELECT (SELECT COALESCE(sum(docs), 0) FROM {LEXEMES}), (SELECT count(*) FROM {POSTINGS})".encode()
        ).fetchone()
        words_off = int(summed) != int(postings)
    if counted is None or int(counted[0]) != indexed or words_off:
        docs = "no counts" if counted is None else f"counts of {int(counted[0])} documents"
        docs += " and words' counts off their postings" if words_off else ""
        findings.append(
            Finding(
                "fts_counts_off",
                "error",
                f"{where}: the keyword index has {docs} for {indexed} full-text rows; keyword ranking is off",
                "memmy-memory doctor --repair  # the daemons may keep running",
                repairable=True,
            )
        )
    if _has(conn, ANN_TABLE):
        mirrored, stored = conn.execute(
            f"SELECT (SELECT COUNT(*) FROM {ANN_TABLE}), (SELECT COUNT(*) FROM memory_vector_entries)".encode()
        ).fetchone()
        if int(mirrored) != int(stored):
            findings.append(
                Finding(
                    "vector_mirror_off",
                    "error",
                    f"{where}: pgvector's mirror has {mirrored} of {stored} vectors; semantic search misses the rest",
                    "memmy-memory doctor --repair  # the daemons may keep running",
                    repairable=True,
                )
            )
    missing = int(conn.execute(MISSING_VECTORS.encode()).fetchone()[0])
    models = [(str(m), int(d), int(n)) for m, d, n in conn.execute(VECTORS_PER_MODEL.encode()).fetchall()]
    return findings + vector_findings(where, missing, models)


def _has(conn: Any, table: str) -> bool:
    return bool(conn.execute(b"SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])


def repair_postgres(dsn: str, findings: Sequence[Finding]) -> list[str]:
    """Rebuild what :func:`check_postgres` found off (``findings``, not counted again), in place, one transaction
    each (a daemon's write waits for it: the table that fires the index's trigger is locked first); one line per
    action."""
    import psycopg

    where, done = redact_dsn(dsn), []
    codes = {f.code for f in findings}
    with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
        if "fts_counts_off" in codes:
            with conn.transaction():
                conn.execute(b"LOCK TABLE memories_fts IN SHARE ROW EXCLUSIVE MODE")
                for statement in POSTINGS_BACKFILL:
                    conn.execute(statement.encode())
            conn.execute(b"ANALYZE memories_fts_postings")
            done.append(f"rebuilt the keyword index's postings and counts of {where}")
        if "vector_mirror_off" in codes:
            with conn.transaction():
                conn.execute(b"LOCK TABLE memory_vector_entries IN SHARE ROW EXCLUSIVE MODE")
                conn.execute(ANN_BACKFILL.encode())
            done.append(f"mirrored the missing vectors of {where} into pgvector")
    return done


def serving_daemon(db_path: Path) -> str | None:
    """``pid N on host:port`` when a live daemon holds the store's server lock, else None."""
    holder = ServerLock(db_path).read()
    if holder is None or not lock_holder_alive(holder):
        return None
    return f"the memmy daemon pid {holder.get('pid')} on {holder.get('host')}:{holder.get('port')}"


def repair(db_path: Path) -> list[str]:
    """Repair what can be repaired in place (refused while a daemon serves the file); one line per action."""
    return repair_store(db_path, lambda: serving_daemon(db_path))


def holder_if_alive(holder: dict[str, Any]) -> dict[str, Any] | None:
    """``holder`` when the process that wrote that lock is still running, else None."""
    return holder if lock_holder_alive(holder) else None
