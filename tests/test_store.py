"""The SQLite store: schema, migration from the previous version, CJK full-text search, locks, change log."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from memmy.commands.memory import AddMemory, DeleteMemory, SearchMemory
from memmy.commands.panel import PanelItems
from memmy.domain import Layer, Memory, content_hash
from memmy.errors import StoreError
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.db import Database, ServerLock, retry_while_busy, utc_now
from memmy.store.memories import MemoryFilter, MemoryRepository, row_to_memory
from memmy.store.schema import MIGRATION_001, MIGRATIONS, SCHEMA_VERSION
from memmy.store.text import fts_match_expression, query_terms, segment_for_index
from tests.answers import must

EXPECTED_TABLES = {
    "memories",
    "memories_fts",
    "memory_vector_entries",
    "sessions",
    "episodes",
    "raw_turns",
    "feedback",
    "l2_candidate_pool",
    "trace_policy_links",
    "skill_trials",
    "recall_events",
    "api_logs",
    "memory_change_log",
    "audit_logs",
    "idempotency_keys",
    "evolution_jobs",
    "embedding_retry_queue",
    "memory_processing_state",
    "runtime_kv",
    "decision_repairs",
    "artifacts",
    "schema_migrations",
}


def make_memory(content: str, layer: Layer = "L1", **extra: Any) -> Memory:
    now = utc_now()
    return Memory(
        id=f"m_{content_hash(content)[:12]}",
        layer=layer,
        content=content,
        content_hash=content_hash(content),
        created_at=now,
        updated_at=now,
        valid_from=now,
        **extra,
    )


def test_fresh_database_has_every_table_and_pragmas(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    names = {r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type IN ('table')")}
    assert EXPECTED_TABLES <= names
    assert db.query("PRAGMA journal_mode")[0][0] == "wal"
    assert db.query("PRAGMA foreign_keys")[0][0] == 1
    assert db.query("PRAGMA busy_timeout")[0][0] == 5000
    columns = {r[1] for r in db.query("PRAGMA table_info(memories)")}
    assert {"user_id", "project_id", "source_agent", "session_id", "valid_from", "valid_to"} <= columns
    vector_columns = {r[1] for r in db.query("PRAGMA table_info(memory_vector_entries)")}
    assert {"embedding_provider", "embedding_model", "embedding_dim"} <= vector_columns
    assert db.migration.to_version == SCHEMA_VERSION and db.migration.backup_path is None
    db.close()


def test_migrates_a_previous_version_file_with_backup(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATION_001)
    conn.execute(
        "CREATE TABLE schema_migrations (id TEXT PRIMARY KEY, version INTEGER NOT NULL, "
        "applied_at TEXT NOT NULL, checksum TEXT NOT NULL)"
    )
    conn.execute("INSERT INTO schema_migrations VALUES (?, 1, '2026-01-01T00:00:00Z', '1')", (MIGRATIONS[0].id,))
    conn.execute(
        "INSERT INTO memories(id, user_id, agent_id, memory_value, memory_layer, content_hash, created_at, updated_at) "
        "VALUES ('trace_old', 'local-user', 'codex', '部署数据库连接池 and flaky pytest fixtures', 'L1', 'h', "
        "'2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')"
    )
    conn.commit()
    conn.close()

    db = Database(path)
    assert db.migration.from_version == 1 and db.migration.to_version == SCHEMA_VERSION
    assert db.migration.applied == (
        "002_scope_validity_cjk_fts",
        "003_source_import_state",
        "004_key_graph_validity_tombstones",
        "005_dreams",
        "006_evolution_indexes",
        "007_panel_time_indexes",
        "008_drop_unused_memory_indexes",
        "009_fts_rowid_is_memory_rowid",
        "010_team_members",
    )
    backup = db.migration.backup_path
    assert backup is not None and backup.exists()
    with sqlite3.connect(backup) as old:
        assert old.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == 1
    repo = MemoryRepository(db)
    memory = repo.get("trace_old")
    assert memory is not None and memory.source_agent == "codex" and memory.valid_from == "2026-01-01T00:00:00Z"
    assert [m for m, _ in repo.fts_search("数据库", 5, MemoryFilter())] == ["trace_old"]
    assert [m for m, _ in repo.fts_search("pytest fixtures", 5, MemoryFilter())] == ["trace_old"]
    db.close()
    again = Database(path)  # idempotent: nothing left to apply, no second backup
    assert again.migration.applied == ()
    again.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    Database(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES ('999_future', 999, 'x', '0')")
    with pytest.raises(StoreError, match="newer than this memmy supports"):
        Database(path)


def test_cjk_segmentation_and_query_syntax_is_escaped() -> None:
    assert segment_for_index("修复数据库").split() == ["修复", "复数", "数据", "据库"]
    assert segment_for_index("plain english") == "plain english"
    assert query_terms("How do I fix the 数据库 error?") == ["fix", "数据库", "error"]
    expression = fts_match_expression(['NEAR(a b)"', "数据库"])
    assert expression == '"NEAR(a b)""" OR "数据" OR "据库" OR "数据 据库"'
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("INSERT INTO t VALUES (?)", (segment_for_index("NEAR a b 数据库"),))
    assert conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expression,)).fetchone()[0] == 1


def test_full_text_english_and_chinese(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    docs = {
        "en": "The deploy script needs DATABASE_URL before running migrations",
        "zh": "部署脚本在运行迁移之前需要设置数据库连接字符串",
        "zh2": "用户喜欢简洁的回答，不要长篇大论",
        "mixed": "pytest 测试在 CI 上很慢，因为 fixture 每次都重建数据库",
    }
    for key, text in docs.items():
        repo.insert(make_memory(text, title=key), source="test")
    flt = MemoryFilter()

    def ids(query: str) -> list[str]:
        found = repo.get_many([m for m, _ in repo.fts_search(query, 10, flt)])
        return sorted(found[m].title for m in found)

    assert ids("DATABASE_URL migrations") == ["en"]
    assert ids("数据库") == ["mixed", "zh"]  # three characters
    assert ids("部署") == ["zh"]  # two characters: trigram could not match this
    assert ids("简洁") == ["zh2"]
    assert ids("fixture 很慢") == ["mixed"]
    assert ids("nothing-like-this") == []
    db.close()


def test_soft_delete_hides_everywhere_and_logs_changes(service: MemoryService) -> None:
    ns = Namespace(source="cli")
    added = service.add_memory(AddMemory.from_json({"content": "Use uv for Python installs", "tags": ["python"]}), ns)
    memory_id = must(added["id"])
    assert service.search(SearchMemory.from_json({"query": "uv python installs"}), ns)["sourceMemoryIds"] == [memory_id]
    service.delete_memory(memory_id, DeleteMemory.from_json({"reason": "obsolete"}), ns)
    assert service.memories.get(memory_id) is None
    assert service.search(SearchMemory.from_json({"query": "uv python installs"}), ns)["sourceMemoryIds"] == []
    assert service.panel.items(PanelItems.from_json({}))["total"] == 0
    changes = service.logs.changes_for(memory_id)
    assert [c["changeType"] for c in changes] == ["create", "delete"]
    assert changes[1]["before"]["status"] == "activated" and changes[1]["after"]["status"] == "deleted"
    audits = service.logs.audits_for(memory_id)
    assert len(audits) == 1 and audits[0]["action"] == "memory.delete"
    assert json.loads(audits[0]["meta_json"])["reason"] == "obsolete"


def test_content_hash_dedup_is_per_layer(service: MemoryService) -> None:
    ns = Namespace()
    first = service.add_memory(AddMemory.from_json({"content": "Prefer  tabs in Makefiles", "tags": ["make"]}), ns)
    again = service.add_memory(AddMemory.from_json({"content": "prefer tabs in makefiles", "tags": ["build"]}), ns)
    other_layer = service.add_memory(AddMemory.from_json({"content": "Prefer tabs in Makefiles", "layer": "L2"}), ns)
    assert again["id"] == first["id"] and again["deduplicated"] is True
    assert again["tags"] == ["make", "build"]
    assert other_layer["id"] != first["id"] and other_layer["memoryLayer"] == "L2"
    assert [c["changeType"] for c in service.logs.changes_for(must(first["id"]))] == ["create", "merge"]


def test_validity_and_scope_filters(service: MemoryService) -> None:
    repo = service.memories
    repo.insert(make_memory("alpha fact for project one", project_id="/p/one"), source="t")
    repo.insert(make_memory("alpha fact for project two", project_id="/p/two"), source="t")
    superseded = make_memory("alpha fact that was corrected", valid_to="2000-01-01T00:00:00Z")
    repo.insert(superseded, source="t")
    found = {m for m, _ in repo.fts_search("alpha fact", 10, MemoryFilter(project_id="/p/one"))}
    assert found == {make_memory("alpha fact for project one").id}
    everything = {m for m, _ in repo.fts_search("alpha fact", 10, MemoryFilter())}
    assert superseded.id not in everything and len(everything) == 2


def test_server_lock_refuses_live_pid_and_clears_stale(tmp_path: Path) -> None:
    db_path = tmp_path / "m.sqlite"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock_file = db_path.with_name("m.sqlite.server.lock")
        lock_file.write_text(json.dumps({"pid": holder.pid, "host": "127.0.0.1", "port": 1}))
        with pytest.raises(StoreError, match=f"already served by pid {holder.pid}"):
            ServerLock(db_path).acquire("127.0.0.1", 2)
    finally:
        holder.kill()
        holder.wait()
    lock = ServerLock(db_path)
    lock.acquire("127.0.0.1", 2)  # the holder is dead now: the stale lock is replaced
    assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock.path.exists()


def switch_to_wal_together(path: Path, connections: int, retry: bool) -> list[str]:
    """Open ``connections`` to a rollback-journal ``path``, then have them all switch it to WAL at the same
    moment (the step every opening process runs); return the errors."""
    conns = [
        sqlite3.connect(path, timeout=5, isolation_level=None, check_same_thread=False) for _ in range(connections)
    ]
    for conn in conns:
        conn.execute("PRAGMA quick_check").fetchall()  # what opening does first
    start = threading.Barrier(connections)
    errors: list[str] = []

    def switch(conn: sqlite3.Connection) -> None:
        start.wait()
        try:
            if retry:
                retry_while_busy(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchall())
            else:
                conn.execute("PRAGMA journal_mode=WAL").fetchall()
        except sqlite3.OperationalError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=switch, args=(conn,)) for conn in conns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for conn in conns:
        conn.close()
    return errors


def test_connections_switching_one_store_to_wal_at_once_retry_instead_of_failing(tmp_path: Path) -> None:
    """SQLite answers "database is locked" at once, without the busy timeout, to connections that switch a
    rollback-journal file to WAL together (waiting could deadlock): about one in ten did here. Opening a store
    runs that switch through ``retry_while_busy``, and then none fails (without it: 5 errors in 160 here)."""
    for attempt in range(40):
        path = tmp_path / f"rollback-{attempt}.sqlite"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t(x)")
        assert switch_to_wal_together(path, 4, retry=True) == []
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_processes_opening_a_new_store_at_once_migrate_it_once(tmp_path: Path) -> None:
    """`serve` and `init` started together on a fresh HOME both migrate the same new file: neither may fail.

    (The file exists already: a second process that finds it still 0 bytes is refused by the preflight, a
    separate race left open.)"""
    for attempt in range(5):
        path = tmp_path / f"race-{attempt}.sqlite"
        with sqlite3.connect(path) as conn:  # the state right after the first process created the file
            conn.execute(
                "CREATE TABLE schema_migrations "
                "(id TEXT PRIMARY KEY, version INTEGER NOT NULL, applied_at TEXT NOT NULL, checksum TEXT NOT NULL)"
            )
        os.chmod(path, 0o600)
        code = (
            "import sys; from pathlib import Path; from memmy.store.db import Database; "
            "Database(Path(sys.argv[1])).close()"
        )
        procs = [
            subprocess.Popen([sys.executable, "-c", code, str(path)], stderr=subprocess.PIPE, text=True)
            for _ in range(4)
        ]
        errors = [err for proc in procs if (err := proc.communicate(timeout=120)[1]) and proc.returncode != 0]
        assert errors == []
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
        assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]


def test_every_read_by_key_or_hash_still_walks_an_index(tmp_path: Path) -> None:
    """Migration 8 dropped the memories indexes no read needed; the reads by key, hash and user keep theirs."""
    db = Database(tmp_path / "m.sqlite")

    def plan(sql: str, params: tuple[str, ...]) -> str:
        return " | ".join(str(row[3]) for row in db.query("EXPLAIN QUERY PLAN " + sql, params))

    indexes = {r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'memories'")}
    assert not indexes & {"idx_memories_key", "idx_memories_agent"}
    by_key = plan(
        "SELECT id FROM memories WHERE memory_layer = ? AND memory_key = ? AND status != 'deleted'", ("L1", "k")
    )
    live = plan("SELECT memory_key FROM memories WHERE memory_key IN (?, ?) AND status != 'deleted'", ("a", "b"))
    assert "idx_memories_key_only (memory_key=?)" in by_key and "idx_memories_key_only (memory_key=?)" in live
    duplicate = plan(
        "SELECT id FROM memories WHERE user_id = ? AND memory_layer = ? AND content_hash = ? AND status != 'deleted'",
        ("u", "L1", "h"),
    )
    assert "idx_memories_hash (user_id=? AND content_hash=? AND memory_layer=?)" in duplicate
    per_user = plan("SELECT id FROM memories WHERE user_id = ? AND status = 'activated'", ("u",))
    assert "SEARCH memories USING INDEX" in per_user and "(user_id=?)" in per_user
    raw = {r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'raw_turns'")}
    assert "idx_raw_turns_episode" in raw and "idx_raw_turns_episode_created" not in raw  # the same columns twice
    episode = plan("SELECT id FROM raw_turns WHERE episode_id = ? ORDER BY created_at", ("e",))
    assert "idx_raw_turns_episode (episode_id=?)" in episode
    db.close()


def test_bulk_writes_let_the_wal_grow_and_then_restore_the_default(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)

    def threshold() -> int:
        return int(db.query("PRAGMA wal_autocheckpoint")[0][0])

    wal = tmp_path / "m.sqlite-wal"
    assert threshold() == 1000
    with db.bulk_writes():
        assert threshold() == 10_000
        with db.bulk_writes():  # a nested run shares the setting
            pass
        assert threshold() == 10_000
        for batch in range(12):  # ~4,600 WAL pages: past the default threshold, under the bulk one
            repo.insert_many([make_memory(f"bulk {batch} {i} " + "x" * 3000) for i in range(100)], "test")
        assert wal.stat().st_size > 3000 * 4096  # never checkpointed at 1,000 pages (it stays ~1,200 then)
    assert threshold() == 1000
    frames = db.query("PRAGMA wal_checkpoint(PASSIVE)")[0]
    assert frames[1] == frames[2]  # the end of the run checkpointed every frame already
    assert repo.get(make_memory("bulk 11 99 " + "x" * 3000).id) is not None
    db.close()


def test_row_to_memory_reads_any_select_list_and_empty_or_filled_json(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    plain = make_memory("plain memory without tags or properties", title="plain")
    rich = make_memory("rich memory", title="rich")
    rich.tags = ["deploy", "ci"]
    rich.info = {"origin": "test", "n": 2}
    rich.properties = {"summary": "a rich one", "value": 0.5}
    for memory in (plain, rich):
        repo.insert(memory, source="test")
    read_twice = [repo.get(plain.id), repo.get(rich.id), repo.get(plain.id), repo.get(rich.id)]
    assert [m.tags if m else None for m in read_twice] == [[], ["deploy", "ci"], [], ["deploy", "ci"]]
    assert read_twice[1] is not None and read_twice[1].info == {"origin": "test", "n": 2}
    assert read_twice[1].properties == {"summary": "a rich one", "value": 0.5}
    # every read gets its own containers, even for the empty ones that skip the JSON parser
    assert read_twice[0] is not None and read_twice[2] is not None
    read_twice[0].tags.append("changed")
    read_twice[0].properties["x"] = 1
    assert read_twice[2].tags == [] and read_twice[2].properties == {}
    # the same memories through a SELECT list in another order, with extra columns before and after
    db.conn.row_factory = sqlite3.Row
    columns = "m.visibility, 7 AS r, m.*, m.title AS ID"
    rows = db.conn.execute(
        f"SELECT {columns} FROM memories m WHERE m.id IN (?, ?) ORDER BY m.id", sorted([plain.id, rich.id])
    ).fetchall()
    by_select = {m.id: m for m in map(row_to_memory, rows)}
    assert by_select[plain.id] == repo.get(plain.id) and by_select[rich.id] == repo.get(rich.id)
    # a column the row lacks is an error, as a lookup by name is
    with pytest.raises(IndexError):
        row_to_memory(db.conn.execute("SELECT id, title FROM memories LIMIT 1").fetchone())
    db.close()
