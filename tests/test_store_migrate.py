"""``memmy-memory migrate``: a SQLite store copied to PostgreSQL and back, every table equal in rows and content,
the source untouched, a copy into a store that holds memories refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.memory import AddMemory, DeleteMemory
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.copy import NOT_COPIED, columns, copy_store, table_digest, tables
from memmy.store.db import Database
from memmy.store.memories import MemoryFilter, MemoryRepository
from memmy.store.pg import PgDatabase
from memmy.store.pgvectors import ANN_TABLE, ANN_TRIGGER, PgVectorIndex, ensure_hnsw, hnsw_index_name
from memmy.store.schema import refill_fts
from memmy.store.vectors import VectorRepository
from tests.answers import must
from tests.conftest import only_sqlite
from tests.test_data_governance import _populate

NS = Namespace(source="codex")


def digests(db: Database) -> dict[str, tuple[int, str]]:
    """Every copied table's (rows, content hash)."""
    return {t: table_digest(db, t, columns(db, t)) for t in tables(db) if t not in NOT_COPIED}


def fill_every_kind_of_row(service: MemoryService) -> None:
    """Memories (English and Chinese), a turn with its episode, vectors, a deleted memory, a forgotten one (a
    tombstone), keys, the change and audit logs."""
    _populate(service)
    doomed = service.add_memory(AddMemory.from_json({"content": "The old staging host was stg-3."}), NS)
    service.delete_memory(must(doomed["id"]), DeleteMemory.from_json({"reason": "gone"}), NS)
    forgotten = service.add_memory(AddMemory.from_json({"content": "The VPN password hint is blue."}), NS)
    service.keys_call(key_args("forget", {"memory_id": forgotten["id"], "reason": "private"}), NS)
    service.keys_call(key_args("remember", {"content": "Grafana lives on port 3000.", "keys": ["grafana"]}), NS)


@only_sqlite
def test_a_sqlite_store_goes_to_postgres_and_back_with_every_table_equal(
    service: MemoryService, postgres_dsn: str, tmp_path: Path
) -> None:
    fill_every_kind_of_row(service)
    source = Path(service.config.storage.sqlite_path)
    before = digests(service.db)
    for kind in ("memories", "raw_turns", "memory_vector_entries", "tombstones", "memory_change_log", "memory_keys"):
        assert before[kind][0] > 0, kind

    there = CliRunner().invoke(cli, ["migrate", "--from", str(source), "--to", postgres_dsn])
    assert there.exit_code == 0, there.output
    assert "every count and content hash matches" in there.output
    back_path = tmp_path / "back" / "memory.sqlite"
    back = CliRunner().invoke(cli, ["migrate", "--from", postgres_dsn, "--to", str(back_path)])
    assert back.exit_code == 0, back.output

    pg = PgDatabase(postgres_dsn)
    returned = Database(back_path)
    try:
        assert digests(pg) == before
        assert digests(returned) == before
        assert digests(service.db) == before  # the source was only read
        # the full-text index was rebuilt on each copy from memories: the same search finds the same memory
        wanted = [m for m, _ in service.memories.fts_search("pnpm web repo", 3, MemoryFilter())]
        assert wanted and [m for m, _ in MemoryRepository(pg).fts_search("pnpm web repo", 3, MemoryFilter())] == wanted
        assert [m for m, _ in MemoryRepository(returned).fts_search("数据库迁移", 3, MemoryFilter())] == [
            m for m, _ in service.memories.fts_search("数据库迁移", 3, MemoryFilter())
        ]
        repeated = CliRunner().invoke(cli, ["migrate", "--from", str(source), "--to", postgres_dsn])
        assert repeated.exit_code != 0 and "already holds memories" in repeated.output
        assert digests(pg) == before  # and the refused copy changed nothing
    finally:
        pg.close()
        returned.close()


def count(db: Database, table: str) -> int:
    """The table's rows."""
    return int(must(db.query_one(f"SELECT COUNT(*) FROM {table}"))[0])


def mirror_differences(raw: Any) -> list[Any]:
    """The mirror rows that differ from what the trigger writes for their vector row (its SQL decode of the blob),
    and the vector rows without a mirror row."""
    rows = raw.execute(
        f"SELECT e.id FROM memory_vector_entries e LEFT JOIN {ANN_TABLE} a ON a.entry_id = e.id "
        "WHERE a.entry_id IS NULL OR a.memory_id <> e.memory_id OR a.vector_field <> e.vector_field "
        "OR a.embedding_provider <> e.embedding_provider OR a.embedding_model <> e.embedding_model "
        "OR a.embedding_dim <> e.embedding_dim "
        "OR a.embedding::real[] IS DISTINCT FROM memmy_blob_vector(e.embedding)::real[]".encode()
    ).fetchall()
    return list(rows)


def trigger_state(raw: Any) -> str:
    """pg_trigger's ``tgenabled`` of the vector mirror's trigger ('O': fires; 'D': disabled)."""
    row = raw.execute(b"SELECT tgenabled FROM pg_trigger WHERE tgname = %s", (ANN_TRIGGER,)).fetchone()
    return str(row[0])


@only_sqlite
def test_the_bulk_copy_fills_the_vector_mirror_as_the_trigger_would_and_turns_the_trigger_back_on(
    service: MemoryService, postgres_dsn: str
) -> None:
    """The copy loads the vector rows with the mirror's trigger off and fills the mirror from the blobs in numpy:
    every mirror row equals the trigger's decode bit for bit (signed zero, a subnormal, the largest float32 among
    them); an HNSW index the destination had is built again; the trigger fires again afterwards; the full-text rows
    are the per-row INSERT's."""
    dsn = postgres_dsn
    fill_every_kind_of_row(service)
    first = str(must(service.db.query_one("SELECT id FROM memories ORDER BY rowid LIMIT 1"))[0])
    edge = np.random.default_rng(5).standard_normal(384).astype(np.float32)
    edge[:5] = [-0.0, 1e-45, -3.4028235e38, 1.1754944e-38, 7.0]
    VectorRepository(service.db).upsert(first, "vec_action", "local", "edge-model", edge)
    entries = count(service.db, "memory_vector_entries")
    assert entries >= 4
    before = PgDatabase(postgres_dsn)
    try:
        ensure_hnsw(before, 384)  # as a daemon opened on the empty store builds it
    finally:
        before.close()

    result = CliRunner().invoke(cli, ["migrate", "--from", str(service.config.storage.sqlite_path), "--to", dsn])
    assert result.exit_code == 0, result.output
    assert "memory_vector_entries" in result.output and "rows/s" in result.output  # the progress lines

    pg = PgDatabase(postgres_dsn)
    try:
        with pg.pool.connection() as raw:
            assert raw.execute(f"SELECT COUNT(*) FROM {ANN_TABLE}".encode()).fetchone()[0] == entries
            assert mirror_differences(raw) == []
            blobs = dict(raw.execute(b"SELECT id, embedding FROM memory_vector_entries").fetchall())
            for entry_id, values in raw.execute(f"SELECT entry_id, embedding::real[] FROM {ANN_TABLE}".encode()):
                copied = np.asarray(values, dtype=np.float32).view(np.uint32)
                assert np.array_equal(copied, np.frombuffer(blobs[entry_id], dtype="<u4")), entry_id
            assert trigger_state(raw) == "O"
            valid = raw.execute(
                b"SELECT x.indisvalid FROM pg_index x WHERE x.indexrelid = to_regclass(%s)", (hnsw_index_name(384),)
            ).fetchone()
            assert valid is not None and valid[0]
        later = np.random.default_rng(6).standard_normal(384).astype(np.float32)
        VectorRepository(pg).upsert(first, "vec_action", "local", "edge-model", later)  # after the copy
        with pg.pool.connection() as raw:
            assert mirror_differences(raw) == []
        found = PgVectorIndex(pg, 384, "local", "edge-model").vectors([first])
        assert np.array_equal(found[first], later)
        # the full-text rows the bulk load wrote are the ones the per-row INSERT writes
        listed = "SELECT rowid, id, identifier, memory_value, tags, tsv::text FROM memories_fts ORDER BY rowid"
        bulk = [tuple(row) for row in pg.query(listed)]
        assert len(bulk) >= 4
        with pg.transaction() as conn:
            conn.execute("DELETE FROM memories_fts")
            refill_fts(conn)
        assert [tuple(row) for row in pg.query(listed)] == bulk
    finally:
        pg.close()


@only_sqlite
def test_a_failed_bulk_copy_leaves_the_destination_and_its_trigger_as_they_were(
    service: MemoryService, postgres_dsn: str
) -> None:
    """A copy that fails half-way (a row the destination already holds) rolls back the load, the trigger's pause
    and the index drop with it: the destination stays empty and its trigger fires."""
    dsn = postgres_dsn
    fill_every_kind_of_row(service)
    tombstone = service.db.query_one("SELECT * FROM tombstones")
    assert tombstone is not None
    pg = PgDatabase(postgres_dsn)
    try:
        ensure_hnsw(pg, 384)
        names = list(tombstone.keys())
        with pg.transaction() as conn:
            conn.execute(
                f"INSERT INTO tombstones({', '.join(names)}) VALUES ({','.join('?' * len(names))})", tuple(tombstone)
            )
    finally:
        pg.close()

    result = CliRunner().invoke(cli, ["migrate", "--from", str(service.config.storage.sqlite_path), "--to", dsn])
    assert result.exit_code != 0 and "copying tombstones failed" in result.output, result.output

    pg = PgDatabase(postgres_dsn)
    try:
        assert count(pg, "memories") == count(pg, "memory_vector_entries") == 0
        with pg.pool.connection() as raw:
            assert trigger_state(raw) == "O"
            assert raw.execute(b"SELECT to_regclass(%s) IS NOT NULL", (hnsw_index_name(384),)).fetchone()[0]
    finally:
        pg.close()


@only_sqlite
def test_the_bulk_copy_goes_to_a_server_without_the_vector_mirror(service: MemoryService, postgres_dsn: str) -> None:
    """On a server without pgvector there is no mirror and no trigger: the copy leaves them alone."""
    fill_every_kind_of_row(service)
    pg = PgDatabase(postgres_dsn)
    try:
        with pg.pool.connection() as raw:  # as install() leaves a server without pgvector
            raw.execute(f"DROP TRIGGER {ANN_TRIGGER} ON memory_vector_entries; DROP TABLE {ANN_TABLE}".encode())
        results = copy_store(service.db, pg)
        assert all(r.equal for r in results) and count(pg, "memory_vector_entries") == count(
            service.db, "memory_vector_entries"
        )
    finally:
        pg.close()
