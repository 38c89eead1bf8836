"""The vector channel's contract on both backends: the same top memories, scored with the same cosine, as an exact
scan of the stored vectors (on PostgreSQL the database answers through pgvector's HNSW index; on a store this
small HNSW is exact)."""

from __future__ import annotations

import threading
import time

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

from memmy.commands.memory import AddMemory, ArchiveMemory
from memmy.domain import Memory
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.db import utc_now
from memmy.store.memories import MemoryRepository
from memmy.store.pg import SETUP_DIGEST, PgDatabase
from memmy.store.pgdialect import SETUP_TABLE
from memmy.store.pgvectors import ANN_TABLE, PgVectorIndex, hnsw_index_name
from memmy.store.vectors import VectorRepository, from_blob
from tests.answers import must

TEXTS = (
    "Run the database migrations with alembic upgrade head before starting the API",
    "The staging cluster pulls images from the private registry at registry.internal",
    "Use pnpm, not npm, in the frontend workspace; the lockfile is pnpm-lock.yaml",
    "Postgres connection pool size is 20 in production and 5 in tests",
    "The nightly backup job copies the database dump to the S3 bucket",
    "Flaky test: test_upload_retry times out when the proxy is slow",
    "Deploys go through the GitHub Actions workflow deploy.yml on tag push",
    "The cache invalidation key includes the tenant id and the schema version",
    "Our API rate limit is 100 requests per minute per token",
    "Migrations must be backwards compatible for one release (expand, then contract)",
    "Log lines are JSON with the request id under the key rid",
    "The mobile app reads feature flags from the config service at start-up",
)
QUERY = "how do I apply the database schema migrations"


def add(service: MemoryService, content: str, ns: Namespace) -> str:
    return must(service.add_memory(AddMemory.from_json({"content": content}), ns)["id"])


def exact_top(service: MemoryService, query: np.ndarray, allowed: set[str], k: int) -> list[tuple[str, float]]:
    """The best ``k`` of ``allowed`` by cosine, from the stored blobs (best field per memory)."""
    best: dict[str, float] = {}
    for row in service.store.query("SELECT memory_id, embedding, embedding_dim FROM memory_vector_entries"):
        if row["memory_id"] in allowed:
            score = float(from_blob(row["embedding"], int(row["embedding_dim"])) @ query)
            best[row["memory_id"]] = max(score, best.get(row["memory_id"], -2.0))
    return sorted(best.items(), key=lambda hit: -hit[1])[:k]


def test_the_vector_channel_returns_the_exact_top_memories_on_both_backends(
    service: MemoryService, backend: str
) -> None:
    """Same ranking and same cosine scale as an exact scan, with the project scope and archived rows applied."""
    here, there = Namespace(source="claude_code", project_id="p-here"), Namespace(source="codex", project_id="p-x")
    ids_here = [add(service, text, here) for text in TEXTS[:8]]
    ids_there = [add(service, text, there) for text in TEXTS[8:]]
    archived = ids_here[0]  # the closest text of all: an archived memory is never recalled
    service.indexer.drain()
    service.archive_memory(archived, ArchiveMemory.from_json({}), here)
    index = service.indexer.index
    assert index is not None
    if backend == "postgres":  # the database answers (pgvector), and it has its HNSW index
        assert isinstance(index, PgVectorIndex)
        names = {row[0] for row in service.store.query("SELECT indexname FROM pg_indexes")}
        assert hnsw_index_name(index.dim) in names
    query = service.indexer.embed_query(QUERY)
    assert query is not None
    live = set(ids_here[1:]) | set(ids_there)

    found = index.search(query, 5)
    expected = exact_top(service, query, live, 5)
    assert [mid for mid, _ in found] == [mid for mid, _ in expected]
    assert np.allclose([s for _, s in found], [s for _, s in expected], atol=1e-4)

    scoped = index.search_layers(query, {"L1": 4}, project_id="p-here")["L1"]
    assert [mid for mid, _ in scoped] == [mid for mid, _ in exact_top(service, query, set(ids_here[1:]), 4)]
    by_source = index.search(query, 3, source="codex")
    assert [mid for mid, _ in by_source] == [mid for mid, _ in exact_top(service, query, set(ids_there), 3)]

    scores = index.similarities([ids_there[0], archived, "m_missing"], query)
    assert set(scores) == {ids_there[0]}
    assert abs(scores[ids_there[0]] - dict(exact_top(service, query, {ids_there[0]}, 1))[ids_there[0]]) < 1e-4
    stored = service.store.query_one(
        "SELECT embedding, embedding_dim FROM memory_vector_entries WHERE memory_id = ?", (ids_there[1],)
    )
    assert stored is not None
    vector = index.vector(ids_there[1])
    assert vector is not None and np.allclose(vector, from_blob(stored["embedding"], 384), atol=1e-5)
    assert index.contains(ids_there[1]) and not index.contains("m_missing")
    assert index.having_vectors([ids_there[1], ids_here[2], archived, "m_missing"]) == {ids_there[1], ids_here[2]}
    assert index.vector(archived) is None  # as the in-memory index: an archived memory is not in it
    assert set(index.vectors([ids_there[1], "m_missing"])) == {ids_there[1]}


def memory(number: int) -> Memory:
    """A short L1 note ``m_<number>``."""
    now = utc_now()
    return Memory(id=f"m_{number}", layer="L1", content=f"note {number}", created_at=now, updated_at=now,
                  valid_from=now)  # fmt: skip


def test_a_store_from_before_pgvector_gets_its_vectors_mirrored_on_postgres(postgres_dsn: str) -> None:
    """A PostgreSQL store written before the mirror table existed (the first round's schema) is mirrored once, when
    a daemon opens it; later writes go through the trigger, and a deleted memory's rows go with it."""
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((3, 8)).astype(np.float32)
    db = PgDatabase(postgres_dsn)
    memories, vectors = MemoryRepository(db), VectorRepository(db)
    for n in range(2):
        memories.insert(memory(n), source="test")
        vectors.upsert(f"m_{n}", "vec", "local", "test-model", rows[n])
    with db.pool.connection() as raw:
        raw.execute(f"DROP TABLE {ANN_TABLE}, {SETUP_TABLE}".encode())  # as a store of the first round had none
    db.close()

    db = PgDatabase(postgres_dsn)
    try:
        assert db.has_vector
        memories, vectors = MemoryRepository(db), VectorRepository(db)
        memories.insert(memory(2), source="test")
        vectors.upsert("m_2", "vec", "local", "test-model", rows[2])
        index = PgVectorIndex(db, 8, "local", "test-model")
        found = index.vectors(["m_0", "m_1", "m_2"])
        assert set(found) == {"m_0", "m_1", "m_2"}
        for n in range(3):
            assert np.array_equal(found[f"m_{n}"], rows[n])  # the blob's float32 values, exactly
        vectors.delete_for("m_1")
        assert set(index.vectors(["m_0", "m_1", "m_2"])) == {"m_0", "m_2"}
    finally:
        db.close()


def test_a_daemon_opening_a_set_up_store_runs_no_ddl_while_another_writes(postgres_dsn: str) -> None:
    """A second daemon starting while the first is inside a write (a memory's full-text and vector rows written, not
    yet committed) opens at once: an up-to-date store runs no DDL, which would wait for that write's table locks
    (replacing the triggers deadlocked with such a write). A store set up by another memmy is set up again."""
    rng = np.random.default_rng(5)
    first = PgDatabase(postgres_dsn)
    impatient = make_conninfo(postgres_dsn, options="-c lock_timeout=2000")  # a wait for a lock fails, not hangs
    try:
        with first.transaction():
            MemoryRepository(first).insert(memory(0), source="test")
            VectorRepository(first).upsert("m_0", "vec", "local", "test-model", rng.standard_normal(8).astype("f4"))
            second = PgDatabase(impatient)
            assert second.has_vector and second.migration.applied == ()
            second.close()
        with first.pool.connection() as raw:
            raw.execute(f"UPDATE {SETUP_TABLE} SET digest = 'set up by another memmy'".encode())
        PgDatabase(postgres_dsn).close()
        with first.pool.connection() as raw:
            assert raw.execute(f"SELECT digest FROM {SETUP_TABLE}".encode()).fetchall() == [(SETUP_DIGEST,)]
    finally:
        first.close()


def test_a_vector_for_a_memory_deleted_while_it_is_written_is_not_written(postgres_dsn: str) -> None:
    """A memory deleted before its vector is written gets none (memmy's writers take turns, so the memory's row is
    looked at under the write lock). One deleted by a writer outside that lock (psql, another tool) after the vector's
    statement saw it: the foreign key refuses the row, and the write reports it wrote nothing instead of failing the
    embedding worker's batch."""
    db = PgDatabase(postgres_dsn)
    try:
        MemoryRepository(db).insert(memory(0), source="test")
        MemoryRepository(db).insert(memory(1), source="test")
        with db.transaction() as conn:
            conn.execute("DELETE FROM memories WHERE id = ?", ("m_1",))
        assert not VectorRepository(db).upsert("m_1", "vec", "local", "test-model", np.ones(8, dtype="f4"))
        written: list[bool] = []
        with psycopg.connect(postgres_dsn) as outside, outside.transaction():
            outside.execute("DELETE FROM memories WHERE id = 'm_0'")  # holds the row's lock until commit
            writer = threading.Thread(
                target=lambda: written.append(
                    VectorRepository(db).upsert("m_0", "vec", "local", "test-model", np.ones(8, dtype="f4"))
                )
            )
            writer.start()
            time.sleep(0.5)  # the writer's statement saw the memory and waits on its row lock for the foreign key
        writer.join(10)
        assert written == [False]
        assert db.query("SELECT memory_id FROM memory_vector_entries") == []
    finally:
        db.close()
