"""``memmy-memory doctor`` on a PostgreSQL store: the keyword counts and pgvector's mirror checked against the rows
they index, rebuilt in place by ``--repair`` while the store stays in use, and live memories without a vector."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.domain import Memory
from memmy.store.db import utc_now
from memmy.store.memories import MemoryRepository
from memmy.store.pg import PgDatabase
from memmy.store.pgfts import LEXEMES, STATS
from memmy.store.pgvectors import ANN_TABLE
from memmy.store.vectors import VectorRepository


def doctor(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["--json", "doctor", "--offline", *args])
    report: dict[str, object] = json.loads(result.output)
    return report


def codes(report: dict[str, object]) -> list[str]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return sorted(str(f["code"]) for f in findings)


def test_doctor_finds_and_rebuilds_postgres_indexes(monkeypatch: pytest.MonkeyPatch, postgres_dsn: str) -> None:
    monkeypatch.setenv("MEMMY_MEMORY_BACKEND", "postgres")
    monkeypatch.setenv("MEMMY_POSTGRES_DSN", postgres_dsn)
    db = PgDatabase(postgres_dsn)
    try:
        now, rng = utc_now(), np.random.default_rng(7)
        memories, vectors = MemoryRepository(db), VectorRepository(db)
        for n in range(4):
            memories.insert(
                Memory(id=f"m_{n}", layer="L1", content=f"deploy note {n}", created_at=now, updated_at=now,
                       valid_from=now),  # fmt: skip
                source="test",
            )
            if n < 3:  # the fourth waits for its vector
                vectors.upsert(f"m_{n}", "vec", "local", "test-model", rng.standard_normal(8).astype(np.float32))
        assert codes(doctor()) == ["vectors_missing"]

        with db.pool.connection() as raw:  # counts that say three more documents, a vector the mirror lost
            raw.execute(f"INSERT INTO {STATS}(docs, tokens) VALUES (3, 30)".encode())
            raw.execute(f"DELETE FROM {ANN_TABLE} WHERE memory_id = 'm_1'".encode())
        broken = doctor()
        assert broken["ok"] is False
        assert codes(broken) == ["fts_counts_off", "vector_mirror_off", "vectors_missing"]

        with db.pool.connection() as raw:  # and a word whose document count lost a row
            raw.execute(f"DELETE FROM {LEXEMES} WHERE lexeme = (SELECT min(lexeme) FROM {LEXEMES})".encode())
            raw.execute(f"DELETE FROM {STATS} WHERE docs = 3".encode())
        assert codes(doctor()) == ["fts_counts_off", "vector_mirror_off", "vectors_missing"]
        with db.pool.connection() as raw:
            raw.execute(f"INSERT INTO {STATS}(docs, tokens) VALUES (3, 30)".encode())

        repaired = doctor("--repair")
        assert len(repaired["repaired"]) == 2  # type: ignore[arg-type]
        assert codes(repaired) == ["vectors_missing"] and repaired["ok"] is True
        with db.pool.connection() as raw:
            assert raw.execute(f"SELECT count(*) FROM {ANN_TABLE}".encode()).fetchone() == (3,)
    finally:
        db.close()


def test_doctor_says_a_postgres_server_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMY_MEMORY_BACKEND", "postgres")
    monkeypatch.setenv("MEMMY_POSTGRES_DSN", "postgresql://memmy@127.0.0.1:1/none?connect_timeout=2")
    report = doctor()
    assert codes(report) == ["unreachable"] and report["ok"] is False
