"""The keyword stage's SQL at its floor: bm25 top window by rowid, filtered in rank order only until ``limit``
pass, and the scoring budget of selective terms in a large store (real SQLite, real FTS5)."""

from __future__ import annotations

from pathlib import Path

from memmy.domain import Memory, content_hash
from memmy.store.db import Database, utc_now
from memmy.store.memories import MemoryFilter, MemoryRepository, TermStats, _first_new_rowid
from memmy.store.text import fts_match_expression


def memory(number: int, text: str, project_id: str | None = None) -> Memory:
    now = utc_now()
    body = f"{text} note {number}"
    return Memory(
        id=f"m_{number:05d}",
        layer="L1",
        content=body,
        content_hash=content_hash(body),
        created_at=now,
        updated_at=now,
        valid_from=now,
        project_id=project_id,
    )


def reference(repo: MemoryRepository, terms: list[str], flt: MemoryFilter, limit: int) -> list[tuple[str, float]]:
    """Every match scored and joined at once: what the windowed, batched search must reproduce."""
    where, params = flt.sql(utc_now())
    rows = repo.db.query(
        "SELECT f.id AS id, bm25(memories_fts, 0.0, 2.0, 1.0, 1.5) AS rank FROM memories_fts f "
        f"JOIN memories m ON m.id = f.id WHERE memories_fts MATCH ? AND {where} ORDER BY rank LIMIT ?",
        [fts_match_expression(terms), *params, limit],
    )
    return [(row["id"], -float(row["rank"])) for row in rows]


def test_fts_hits_are_the_first_visible_rows_in_bm25_order(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    # 400 matches of varying strength; seven in eight belong to other projects, so filtering only the first
    # batch of the window cannot be enough, and a limit above what one window holds makes the window widen.
    repo.insert_many(
        [
            memory(n, " ".join(["deploy"] * (1 + n % 5)) + (" rollback" if n % 7 == 0 else ""), f"/p/{n % 8}")
            for n in range(400)
        ],
        source="test",
    )
    for limit in (5, 20, 45):
        flt = MemoryFilter(project_id="/p/1")
        hits = repo.fts_search_terms(["deploy", "rollback"], limit, flt)
        assert hits == reference(repo, ["deploy", "rollback"], flt, limit)
        assert len(hits) == limit
        assert all(int(memory_id[2:]) % 8 == 1 for memory_id, _ in hits)
    everything = repo.fts_search_terms(["deploy"], 500, MemoryFilter())
    assert len(everything) == 400
    db.close()


def test_recent_token_search_returns_the_newest_visible_matches(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    repo.insert_many([memory(n, "ci flaky", f"/p/{n % 3}") for n in range(300)], source="test")
    found = repo.token_search(["ci"], 10, MemoryFilter(project_id="/p/2"), order="recent")
    newest = [f"m_{n:05d}" for n in range(299, -1, -1) if n % 3 == 2][:10]
    assert found == newest
    db.close()


def test_ranked_token_search_scores_only_the_newest_matches(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    # The oldest memory says the phrase three times, so BM25 puts it first when every match is scored; 199 newer
    # ones say it once.
    texts = ["ECONNRESET ECONNRESET ECONNRESET peer reset"] + ["ECONNRESET peer reset"] * 199
    repo.insert_many([memory(n, text) for n, text in enumerate(texts)], source="test")
    every = repo.token_search(["ECONNRESET"], 5, MemoryFilter(), phrases=True, rank_pool=1000)
    assert every[0] == "m_00000"
    newest = repo.token_search(["ECONNRESET"], 5, MemoryFilter(), phrases=True, rank_pool=100)
    assert len(newest) == 5
    assert all(int(memory_id[2:]) >= 200 - 100 for memory_id in newest)
    db.close()


def test_selective_terms_keep_the_rarest_within_the_scoring_budget(database: Database) -> None:
    """On both backends (on PostgreSQL the terms are counted in one statement: TermStats.prefetch)."""
    db = database
    repo = MemoryRepository(db)
    words = {"zeta": 2, "kappa": 5, "omega": 12, "delta": 40}  # documents that contain each word, of 100
    repo.insert_many(
        [memory(n, " ".join(w for w, df in words.items() if n < df) or "filler") for n in range(100)], source="test"
    )
    terms = ["delta", "omega", "kappa", "zeta"]
    assert repo.selective_terms(terms) == terms  # under selective_min_docs: every term
    repo.selective_min_docs = 50
    assert repo.selective_terms(terms) == ["omega", "kappa", "zeta"]  # delta: in 40 % of documents
    repo.max_scored_matches = 10
    assert repo.selective_terms(terms) == ["kappa", "zeta"]  # 2 + 5 matches fit; omega's 12 more do not
    repo.max_scored_matches = 1
    assert repo.selective_terms(terms) == ["zeta"]  # the rarest stays whatever it costs


def test_a_term_no_document_holds_takes_no_place_among_the_selective_terms(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    repo.insert_many([memory(n, "zeta kappa" if n < 3 else "filler") for n in range(100)], source="test")
    repo.selective_min_docs = 50
    absent = [f"absent{n}" for n in range(10)]  # "现" or "请" of a Chinese prompt: in no document
    terms = [*absent, "kappa", "zeta"]
    assert repo.selective_terms(terms) == terms  # before: the ten absent terms were the "rarest" and filled all 8
    repo.insert(memory(100, "absent3 appears now"), source="test")
    flt = MemoryFilter()
    assert [memory_id for memory_id, _ in repo.fts_search_terms(["absent3"], 5, flt)] == ["m_00100"]  # still asked
    db.close()


def test_the_scoring_budget_counts_a_chinese_run_by_each_of_its_bigrams(database: Database) -> None:
    """On both backends (on PostgreSQL the terms are counted in one statement: TermStats.prefetch)."""
    db = database
    repo = MemoryRepository(db)
    # 10 documents hold the whole run 部署测试环境 (5 bigrams), 4 hold the rare word "zeta".
    repo.insert_many(
        [memory(n, "部署测试环境" if n < 10 else ("zeta" if n < 14 else "filler")) for n in range(100)], source="test"
    )
    repo.selective_min_docs = 50
    stats = TermStats()
    assert stats.doc_count(db, "部署测试环境") == 10
    assert stats.scored_matches(db, "部署测试环境") == 60  # 部署 署测 测试 试环 环境 and the phrase: 10 each
    assert stats.scored_matches(db, "zeta") == 4
    repo.max_scored_matches = 30  # documents alone (4 + 10) fit; the run's 60 scored matches do not
    assert repo.selective_terms(["部署测试环境", "zeta"]) == ["zeta"]
    repo.max_scored_matches = 70
    assert repo.selective_terms(["部署测试环境", "zeta"]) == ["部署测试环境", "zeta"]


def change(repo: MemoryRepository, memory_id: str, *, content: str | None = None, status: str | None = None) -> None:
    """Update one memory through the repository (new content, or a new status such as ``deleted``)."""
    current = repo.get(memory_id)
    assert current is not None
    before = current.snapshot()
    if content is not None:
        current.content = content
    if status is not None:
        current.status = status
    repo.update(current, before, "delete" if status == "deleted" else "update", "test")


def test_term_statistics_count_the_documents_of_the_full_text_index(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    repo.insert_many([memory(n, "alpha beta") for n in range(30)], source="test")
    change(repo, "m_00003", status="deleted")
    live = db.query_one("SELECT count(*) FROM memories WHERE status != 'deleted'")
    stats = TermStats()
    assert live is not None and stats.total(db) == live[0] == 29
    assert stats.doc_count(db, "alpha") == 29
    db.close()


def index_rows(db: Database) -> list[tuple[int, str]]:
    """(fts rowid, memory id) of every full-text row."""
    return [(int(r[0]), str(r[1])) for r in db.query("SELECT rowid, id FROM memories_fts ORDER BY rowid")]


def memory_rows(db: Database) -> list[tuple[int, str]]:
    """(rowid, id) of every memory that is not deleted: where the full-text rows must be."""
    rows = db.query("SELECT rowid, id FROM memories WHERE status != 'deleted' ORDER BY rowid")
    return [(int(r[0]), str(r[1])) for r in rows]


def test_index_rows_live_under_their_memories_rowids_through_updates_and_deletes(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    repo.insert_many([memory(n, "deploy 数据库 rollback") for n in range(20)], source="test")
    assert index_rows(db) == memory_rows(db) and len(index_rows(db)) == 20
    change(repo, "m_00007", content="kubernetes 迁移 only now")
    change(repo, "m_00011", status="deleted")
    assert index_rows(db) == memory_rows(db) and len(index_rows(db)) == 19  # one row each, none left behind
    assert [m for m, _ in repo.fts_search("kubernetes", 5, MemoryFilter())] == ["m_00007"]
    assert [m for m, _ in repo.fts_search("迁移", 5, MemoryFilter())] == ["m_00007"]
    found = {m for m, _ in repo.fts_search("rollback", 50, MemoryFilter())}
    assert "m_00007" not in found and "m_00011" not in found and len(found) == 18
    db.close()


def test_a_store_indexed_before_schema_9_is_reindexed_under_memory_rowids(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    db = Database(path)
    MemoryRepository(db).insert_many([memory(n, f"topic{n} deploy") for n in range(30)], source="test")
    with db.transaction() as conn:  # the schema-8 layout: index rows numbered on their own
        conn.execute("DELETE FROM memories_fts")
        for offset, (_rowid, memory_id) in enumerate(reversed(memory_rows(db))):
            conn.execute(
                "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags) VALUES (?, ?, '', ?, '')",
                (1000 + offset, memory_id, f"topic{int(memory_id[2:])} deploy"),
            )
        conn.execute("DELETE FROM schema_migrations WHERE version >= 9")
    db.close()

    again = Database(path)
    assert again.migration.applied == ("009_fts_rowid_is_memory_rowid", "010_team_members")
    assert index_rows(again) == memory_rows(again) and len(index_rows(again)) == 30
    repo = MemoryRepository(again)
    assert [m for m, _ in repo.fts_search("topic17", 5, MemoryFilter())] == ["m_00017"]
    assert repo.token_search(["topic3"], 5, MemoryFilter(), order="recent") == ["m_00003"]
    again.close()


def test_a_batch_is_indexed_under_the_rowids_it_got_and_anything_else_is_looked_up(tmp_path: Path) -> None:
    db = Database(tmp_path / "m.sqlite")
    repo = MemoryRepository(db)
    repo.insert_many([memory(n, "alpha") for n in range(10)], source="test")
    with db.transaction() as conn:  # the largest rowid goes: the next batch starts by reusing it
        conn.execute("DELETE FROM memories_fts WHERE rowid = (SELECT rowid FROM memories WHERE id = 'm_00009')")
        conn.execute("DELETE FROM memories WHERE id = 'm_00009'")
    repo.insert_many([memory(n, "beta") for n in range(10, 40)], source="test")
    assert index_rows(db) == memory_rows(db) and len(index_rows(db)) == 39
    with db.transaction() as conn:  # rows that are not the last statement's: no rowid is guessed
        assert _first_new_rowid(conn, ["m_00003", "m_00004"]) is None
        assert _first_new_rowid(conn, []) is None
    db.close()
