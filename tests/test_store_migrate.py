"""``memmy-memory migrate``: a SQLite store copied to PostgreSQL and back, every table equal in rows and content,
the source untouched, a copy into a store that holds memories refused."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.memory import AddMemory, DeleteMemory
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.copy import NOT_COPIED, columns, table_digest, tables
from memmy.store.db import Database
from memmy.store.memories import MemoryFilter, MemoryRepository
from memmy.store.pg import PgDatabase
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
