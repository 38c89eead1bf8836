"""The keyword channel on PostgreSQL ranks as SQLite FTS5's bm25() does: the same stems, the same rows in the same
order with the same scores, and its postings (store/pgfts.py) kept with every write, rebuilt for an older store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest

from memmy.domain import Memory
from memmy.store.copy import copy_store
from memmy.store.db import Database
from memmy.store.memories import MemoryFilter, MemoryRepository, TermStats
from memmy.store.pg import PgConnection, PgDatabase
from memmy.store.pgdialect import SETUP_TABLE, fts_text, match_parts, translate
from memmy.store.pgfts import (
    LEXEMES,
    PHRASE_FAST_POSITIONS,
    PHRASE_MERGE_RATIO,
    POSTINGS,
    POSTINGS_BACKFILL,
    SPLIT_BY_PARSER,
    STATS,
    STATS_ROWS,
    count_sql,
)
from memmy.store.schema import refill_fts
from memmy.store.text import fts_match_expression, query_terms
from tests.test_store import make_memory

FILLER = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma".split()
#: (content, title, tags): repeated words, short and long memories, hits in the title and the tags, CJK text.
CORPUS: tuple[tuple[str, str, list[str]], ...] = (
    ("database timeout on the staging database database", "", []),
    ("database timeout", "", []),
    ("a long note that mentions the database once among many other words about deploys", "", []),
    ("connection pool timeout while running migrations", "database", []),
    ("retry the worker after a timeout", "", ["database"]),
    ("数据库连接超时 after the deploy", "", []),
    ("数据库 的 连接 池 is full", "部署", []),
    ("we trekked to the server room; possibly the cable", "", []),
    ("schema migrations ran generously slow", "", ["migrate"]),
    ("pool pool pool worker", "", ["timeout"]),
)
QUERIES = (
    "database timeout",
    "数据库连接超时",
    "running migrations pool",
    "trek possible",
    "部署 worker",
    "migrate schema",
    "pool-pool worker",  # a phrase of a repeated word
    "timeout-while-running migrations",  # a phrase whose rarest word is not its first
    "database-nowhere timeout",  # a phrase with a word no memory holds
)


def corpus() -> list[Memory]:
    """The corpus, each memory a distinct length (a filler word of its own count), so no two scores tie."""
    memories = []
    for i, (content, title, tags) in enumerate(CORPUS):
        padding = " ".join(FILLER[j % len(FILLER)] for j in range(i * 3))
        memories.append(make_memory(f"{content} {padding}", title=title, tags=tags))
    return memories


def ranked(db: Database, query: str) -> list[tuple[str, float]]:
    return MemoryRepository(db).fts_search(query, 10, MemoryFilter())


def postings_match_their_rows(pg: PgDatabase) -> None:
    """The postings and counts equal what memories_fts holds now (recomputed from its tsvectors)."""
    expected = pg.query(
        "SELECT u.lexeme, f.rowid, cardinality(u.positions), f.doclen FROM memories_fts f, unnest(f.tsv) u "
        "ORDER BY 1, 2"
    )
    kept = pg.query(f"SELECT lexeme, rowid, hits_a + hits_b + hits_d, doclen FROM {POSTINGS} ORDER BY 1, 2")
    assert [tuple(r) for r in kept] == [tuple(r) for r in expected]
    counts = pg.query_one(STATS_ROWS)
    table = pg.query_one("SELECT count(*), COALESCE(sum(doclen), 0) FROM memories_fts")
    assert counts is not None and table is not None and tuple(counts) == tuple(table)
    per_lexeme = pg.query(f"SELECT lexeme, sum(docs) FROM {LEXEMES} GROUP BY lexeme HAVING sum(docs) <> 0 ORDER BY 1")
    documents = pg.query(
        "SELECT l, count(*) FROM memories_fts f, unnest(tsvector_to_array(f.tsv)) l GROUP BY l ORDER BY 1"
    )
    assert [tuple(r) for r in per_lexeme] == [tuple(r) for r in documents]


def test_postgres_ranks_keyword_hits_as_fts5_bm25(tmp_path: Path, postgres_dsn: str) -> None:
    """Same ids, same order, same scores as SQLite's bm25() (term frequency, document length, column weights)."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        for db in (sqlite, pg):
            MemoryRepository(db).insert_many(corpus(), "test")
        for query in QUERIES:
            expected = ranked(sqlite, query)
            got = ranked(pg, query)
            assert expected, query
            assert [m for m, _ in got] == [m for m, _ in expected], query
            assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9), query
        for term in ("database", "数据库连接", "timeout", "trek"):
            assert TermStats().doc_count(pg, term) == TermStats().doc_count(sqlite, term), term
            assert TermStats().scored_matches(pg, term) == TermStats().scored_matches(sqlite, term), term
        assert TermStats().total(pg) == TermStats().total(sqlite) == len(CORPUS)
    finally:
        sqlite.close()
        pg.close()


def phrase_corpus() -> list[Memory]:
    """Phrases of every shape ``memmy_phrase_hits`` joins and counts: "to" in every memory (probed by index: far
    commoner than "deploy"), "fix" and "deploy" in a few (merged), a first word with more positions in a row than
    it checks one by one (:data:`PHRASE_FAST_POSITIONS`), instances in the title and the tags (column weights), and
    words that follow each other only across two columns."""
    extras = (  # (every, from, text): the text in memories from, from + every, ...
        (16, 0, "fix to deploy now, then fix to deploy again"),
        (30, 1, "deploy fix to"),
        (9, 2, "alpha beta alpha beta alpha gamma alpha beta alpha delta alpha"),
        (8, 3, "beta alpha"),
    )
    memories = []
    for i in range(80):
        content = " ".join([f"entry{i} to the release to", *(text for every, at, text in extras if i % every == at)])
        content += " " + " ".join(FILLER[j % len(FILLER)] for j in range(i))
        title = "alpha beta" if i % 7 == 4 else ("fix to" if i % 11 == 5 else "")
        tags = ["fix to deploy"] if i == 6 else (["alpha beta"] if i % 6 == 5 else [])
        memories.append(make_memory(content, title=title, tags=tags))
    return memories


def test_postgres_counts_phrases_as_fts5(tmp_path: Path, postgres_dsn: str) -> None:
    """A phrase's documents and its instances per row (weighted by column) are FTS5's however its words are joined
    (merged, probed) and counted (position by position, or by a subquery for a word with many positions): the same
    document counts, rows, order and bm25() scores as SQLite."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        for db in (sqlite, pg):
            MemoryRepository(db).insert_many(phrase_corpus(), "test")
        counts = {row[0]: row[1] for row in pg.query(f"SELECT lexeme, sum(docs) FROM {LEXEMES} GROUP BY lexeme")}
        deploy = fts_text("deploy")
        assert counts["to"] > PHRASE_MERGE_RATIO * counts[deploy] >= counts["fix"]  # "to" probed, "fix" merged
        most = pg.query_one(f"SELECT max(cardinality(pos)) FROM {POSTINGS} WHERE lexeme = 'alpha'")
        assert most is not None and most[0] > PHRASE_FAST_POSITIONS
        phrases = ("fix-to-deploy", "to-deploy", "deploy-fix-to", "alpha-beta", "beta-alpha", "alpha-beta-alpha",
                   "to-the-release-to", "deploy-alpha", "to-nothing")  # fmt: skip
        for phrase in phrases:
            assert TermStats().doc_count(pg, phrase) == TermStats().doc_count(sqlite, phrase), phrase
            expected = ranked(sqlite, f"{phrase} release")
            got = ranked(pg, f"{phrase} release")
            assert [m for m, _ in got] == [m for m, _ in expected], phrase
            assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9), phrase
        assert TermStats().doc_count(pg, "alpha-beta") > 0 and TermStats().doc_count(pg, "deploy-alpha") == 0
    finally:
        sqlite.close()
        pg.close()


RANKED = (
    "SELECT rowid AS r, bm25(memories_fts, 0.0, 2.0, 1.0, 1.5) AS rank FROM memories_fts WHERE memories_fts MATCH ? "
    "ORDER BY rank LIMIT ?"
)
COUNTS = (
    "SELECT (SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?), "
    "(SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?)"
)
#: What makes the planner take parallel workers for any statement it can split, however small its tables.
PARALLEL_CHEAP = (
    "parallel_setup_cost = 0",
    "parallel_tuple_cost = 0",
    "min_parallel_index_scan_size = 0",
    "min_parallel_table_scan_size = 0",
)


def explained(raw: psycopg.Connection[Any], text: str, values: list[Any]) -> str:
    """The plan of ``text`` with ``values``, with parallel workers made to look free (:data:`PARALLEL_CHEAP`)."""
    raw.execute("; ".join(f"SET {setting}" for setting in PARALLEL_CHEAP).encode())
    try:
        cursor = psycopg.ClientCursor(raw)
        cursor.execute(f"EXPLAIN {text}".encode(), values)
        return "\n".join(str(row[0]) for row in cursor.fetchall())
    finally:
        raw.execute("; ".join(f"RESET {setting.split()[0]}" for setting in PARALLEL_CHEAP).encode())


def test_a_ranked_keyword_statement_runs_without_parallel_workers(postgres_dsn: str) -> None:
    """The store's connections plan no parallel workers, even where they look free: a ranked statement's bm25()
    sums, added per worker and then combined as the workers finished, differed in their last bits."""
    pg = PgDatabase(postgres_dsn)
    try:
        MemoryRepository(pg).insert_many(corpus(), "test")
        statement = translate(RANKED)
        given = ['"database" OR "timeout" OR "pool" OR "migrations" OR "worker"', 40]
        bound = statement.bound(given)
        assert bound is not None
        with pg.pool.connection() as raw:
            plans = [explained(raw, statement.text(given), statement.params(given)), explained(raw, *bound)]
        for plan in plans:
            assert "memories_fts_postings" in plan and "Gather" not in plan and "Parallel" not in plan, plan
    finally:
        pg.close()


def test_the_ranked_keyword_statement_is_one_text_prepared_on_its_connection(postgres_dsn: str) -> None:
    """The ranked statement's text does not change with its words (they are its parameter), so its connection
    prepares it; it answers what the statement with its words written in answers (words, phrases, CJK). So do
    the document counts (one text for any words; each part's count as the text with its words written in)."""
    pg = PgDatabase(postgres_dsn)
    try:
        MemoryRepository(pg).insert_many(corpus(), "test")
        statement = translate(RANKED)
        expressions = [fts_match_expression(query_terms(query)) for query in QUERIES]
        texts = {bound[0] for e in expressions if (bound := statement.bound([e, 10])) is not None}
        assert len(texts) == 1 and "databas" not in next(iter(texts))
        with pg.transaction() as conn:
            conn.execute("SELECT 1")  # (the transaction's BEGIN goes with it)
            raw = cast(PgConnection, conn).raw
            for expression in expressions:
                got = [tuple(row) for row in conn.execute(RANKED, [expression, 10]).fetchall()]
                cursor = psycopg.ClientCursor(raw)
                cursor.execute(statement.text([expression, 10]).encode(), statement.params([expression, 10]))
                written = [tuple(row) for row in cursor.fetchall()]
                assert got and [r for r, _s in got] == [r for r, _s in written], expression
                assert [s for _r, s in got] == pytest.approx([s for _r, s in written], rel=1e-12), expression
            for expression in expressions:  # more runs than PostgreSQL plans each before it keeps one plan
                conn.execute(RANKED, [expression, 10])
            plans = conn.execute("SELECT statement, generic_plans FROM pg_prepared_statements").fetchall()
        assert [int(row[1]) for row in plans if "unnest((SELECT $1::text[]))" in str(row[0])][0] > 0, plans
        counted = translate(COUNTS)
        assert len({bound[0] for e in expressions if (bound := counted.bound([e, e])) is not None}) == 1
        for expression in expressions:
            for part in expression.split(" OR "):
                row = pg.query_one(COUNTS, [expression, part])
                inline = pg.query_one(f"SELECT {count_sql(match_parts(expression))}, {count_sql(match_parts(part))}")
                assert row is not None and inline is not None and tuple(row) == tuple(inline), (expression, part)
    finally:
        pg.close()


def test_postgres_stems_words_as_fts5_porter(tmp_path: Path, postgres_dsn: str) -> None:
    """'trekked' is found by 'trek' and 'possibly' by 'possible' on both (FTS5's Porter; Snowball English differs)."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        memory = make_memory("we trekked north; possibly the cable")
        for db in (sqlite, pg):
            MemoryRepository(db).insert(memory, "test")
            assert [m for m, _ in ranked(db, "trek")] == [memory.id]
            assert [m for m, _ in ranked(db, "possible")] == [memory.id]
    finally:
        sqlite.close()
        pg.close()


def test_postgres_postings_follow_every_write(postgres_dsn: str) -> None:
    """Insert, update, delete, restore and a wipe of the index each leave the postings equal to the rows."""
    pg = PgDatabase(postgres_dsn)
    try:
        repo = MemoryRepository(pg)
        memories = corpus()
        repo.insert_many(memories, "test")
        postings_match_their_rows(pg)
        changed = dataclasses.replace(memories[1], content="zebra crossing timeout", tags=["zebra"])
        repo.update(changed, {}, "update", "test")
        postings_match_their_rows(pg)
        assert [m for m, _ in ranked(pg, "zebra")] == [changed.id]
        deleted = dataclasses.replace(changed, status="deleted")
        repo.update(deleted, {}, "delete", "test")
        postings_match_their_rows(pg)
        assert ranked(pg, "zebra") == []
        repo.update(dataclasses.replace(deleted, status="activated"), {}, "restore", "test")
        postings_match_their_rows(pg)
        assert [m for m, _ in ranked(pg, "zebra")] == [changed.id]
        with pg.transaction() as conn:
            conn.execute("DELETE FROM memories_fts")
        postings_match_their_rows(pg)
        assert pg.query_one(f"SELECT count(*) FROM {POSTINGS}") == (0,)
    finally:
        pg.close()


COUNTED = (
    '"database"',
    '"timeout"',
    '"zebra"',
    '"pool"',
    '"database timeout"',
    '"数据 据库"',
    '"connection pool"',
    '"数据" OR "据库" OR "数据 据库"',  # a CJK run: its bigrams and its phrase
    '"zebra" OR "connection pool" OR "pool timeout"',
    '"pool pool"',
    '"timeout while running"',
    '"database nowhere"',
)


def test_postgres_document_counts_follow_every_write(tmp_path: Path, postgres_dsn: str) -> None:
    """The documents a word or a phrase occurs in (bm25()'s IDF input) equal FTS5's after inserts, an update, a
    delete, a restore and a bulk write, on words (kept per lexeme) and multi-word phrases (counted from the
    postings); a store whose postings predate the per-lexeme counts gets them when opened."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    count = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?"

    def same_counts() -> None:
        for expression in COUNTED:
            expected = sqlite.query_one(count, [expression])
            assert tuple(pg.query_one(count, [expression]) or ()) == tuple(expected or ()), expression
        postings_match_their_rows(pg)

    try:
        memories = corpus()
        changed = dataclasses.replace(memories[0], content="zebra crossing connection pool", tags=["zebra"])
        steps: tuple[Callable[[MemoryRepository], object], ...] = (
            lambda repo: repo.insert_many(memories[:4], "test"),
            lambda repo: repo.insert_many(memories[4:], "test"),
            lambda repo: repo.update(changed, {}, "update", "test"),
            lambda repo: repo.update(dataclasses.replace(changed, status="deleted"), {}, "delete", "test"),
            lambda repo: repo.update(dataclasses.replace(memories[3], status="deleted"), {}, "delete", "test"),
            lambda repo: repo.update(changed, {}, "restore", "test"),
        )
        for step in steps:
            for db in (sqlite, pg):
                step(MemoryRepository(db))
            same_counts()
        assert pg.query_one(count, ['"database"']) != (0,) and pg.query_one(count, ['"connection pool"']) != (0,)
        with pg.pool.connection() as raw:  # as a store from before the per-lexeme counts left it
            raw.execute(f"DROP TABLE {LEXEMES}, {SETUP_TABLE}")  # nor a set-up stamp
        pg.close()
        pg = PgDatabase(postgres_dsn)
        same_counts()
    finally:
        sqlite.close()
        pg.close()


def test_a_store_copied_to_postgres_counts_as_fts5(tmp_path: Path, postgres_dsn: str) -> None:
    """``memmy-memory migrate``'s copy fills the postings and the per-lexeme counts with its one full-text
    statement (their triggers stay on: they are not in ``copy.DERIVED``): the counts equal FTS5's."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        MemoryRepository(sqlite).insert_many(corpus(), "test")
        copy_store(sqlite, pg)
        postings_match_their_rows(pg)
        count = "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?"
        for expression in COUNTED:
            expected = sqlite.query_one(count, [expression])
            assert tuple(pg.query_one(count, [expression]) or ()) == tuple(expected or ()), expression
    finally:
        sqlite.close()
        pg.close()


def test_a_postgres_store_from_before_the_postings_gets_them(tmp_path: Path, postgres_dsn: str) -> None:
    """A store made by the previous version (Snowball English tsvectors, no document lengths, no postings) is
    re-indexed when opened, and then ranks as SQLite does."""
    pg = PgDatabase(postgres_dsn)
    MemoryRepository(pg).insert_many(corpus(), "test")
    with pg.pool.connection() as raw:  # back to what the previous version left
        raw.execute(
            "DROP TRIGGER memmy_postings_added ON memories_fts; DROP TRIGGER memmy_postings_removed ON memories_fts; "
            f"DROP TRIGGER memmy_postings_changed ON memories_fts; DROP TABLE {POSTINGS}, {STATS}, {LEXEMES}; "
            "ALTER TABLE memories_fts DROP COLUMN doclen; "
            "UPDATE memories_fts SET tsv = to_tsvector('english', coalesce(memory_value, '')); "
            f"DROP TABLE {SETUP_TABLE}"  # nor had it a set-up stamp
        )
    pg.close()
    sqlite, reopened = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        MemoryRepository(sqlite).insert_many(corpus(), "test")
        postings_match_their_rows(reopened)
        for query in QUERIES:
            assert [m for m, _ in ranked(reopened, query)] == [m for m, _ in ranked(sqlite, query)], query
    finally:
        sqlite.close()
        reopened.close()


#: Words PostgreSQL's parser splits (a number in scientific notation, then letters: hashes and ids), beside words
#: it keeps whole; memmy indexes and queries its own stems, so each is one word, as in FTS5.
SPLIT_WORDS = ("7e6ceecd12", "1e10ab", "4e5a6b", "0e0x", "123e4567", "sha256", "0x300")


def test_postgres_finds_words_its_own_parser_would_split(tmp_path: Path, postgres_dsn: str) -> None:
    """A canary marker or a commit hash such as ``7e6ceecd12`` is found (it was not on PostgreSQL: its parser made
    ``7e6`` and ``ceecd12`` of it), alone and in a phrase, with FTS5's ids, order and scores."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    memories = [make_memory(f"the canary word is memmy-canary-{word} {' '.join(FILLER[:i])}") for i, word in
                enumerate(SPLIT_WORDS)]  # fmt: skip
    try:
        for db in (sqlite, pg):
            MemoryRepository(db).insert_many(memories, "test")
        for word in SPLIT_WORDS:
            for query in (word, f"memmy-canary-{word}", f"canary {word}"):
                expected = ranked(sqlite, query)
                assert memories[SPLIT_WORDS.index(word)].id in [m for m, _ in expected], query
                got = ranked(pg, query)
                assert [m for m, _ in got] == [m for m, _ in expected], query
                assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9), query
        postings_match_their_rows(pg)
    finally:
        sqlite.close()
        pg.close()


def test_a_postgres_store_indexed_by_its_parser_is_rewritten_once(tmp_path: Path, postgres_dsn: str) -> None:
    """A store written before memmy built its own tsvectors (PostgreSQL's parser split ``7e6ceecd12``): the rows
    holding such a word are written again when a daemon opens it, and then rank as SQLite does."""
    pg = PgDatabase(postgres_dsn)
    memories = [make_memory(f"deploy {word} after the build") for word in SPLIT_WORDS] + corpus()
    MemoryRepository(pg).insert_many(memories, "test")
    with pg.pool.connection() as raw:  # back to the parser's tsvectors, postings and counts (the triggers follow)
        for rowid, identifier, value, tags in raw.execute(
            "SELECT rowid, identifier, memory_value, tags FROM memories_fts"
        ).fetchall():
            raw.execute(
                "UPDATE memories_fts SET tsv = setweight(to_tsvector('simple', %s), 'A') || "
                "setweight(to_tsvector('simple', %s), 'D') || setweight(to_tsvector('simple', %s), 'B') "
                "WHERE rowid = %s",
                (fts_text(identifier), fts_text(value), fts_text(tags), rowid),
            )
        raw.execute(f"DROP FUNCTION memmy_tsv(text); UPDATE {SETUP_TABLE} SET digest = 'before memmy_tsv'")
    assert ranked(pg, "7e6ceecd12") == []  # what people saw
    pg.close()
    sqlite, reopened = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        MemoryRepository(sqlite).insert_many(memories, "test")
        postings_match_their_rows(reopened)
        for query in (*SPLIT_WORDS, *QUERIES):
            expected = ranked(sqlite, query)
            assert [m for m, _ in ranked(reopened, query)] == [m for m, _ in expected], query
        with reopened.pool.connection() as raw:
            assert raw.execute(SPLIT_BY_PARSER.encode()).fetchall() == []
    finally:
        sqlite.close()
        reopened.close()


def test_postgres_postings_backfill_after_a_bulk_load(postgres_dsn: str) -> None:
    """A load with the triggers off, then POSTINGS_BACKFILL: the postings and counts equal the rows."""
    pg = PgDatabase(postgres_dsn)
    try:
        MemoryRepository(pg).insert_many(corpus()[:3], "test")
        with pg.transaction() as conn:
            conn.execute("ALTER TABLE memories_fts DISABLE TRIGGER USER")
            conn.execute("DELETE FROM memories_fts")
            refill_fts(conn)
            conn.execute("ALTER TABLE memories_fts ENABLE TRIGGER USER")
            for statement in POSTINGS_BACKFILL:
                conn.execute(statement)
        postings_match_their_rows(pg)
        assert pg.query_one(f"SELECT count(DISTINCT rowid) FROM {POSTINGS}") == (3,)
    finally:
        pg.close()


def newest_corpus() -> list[Memory]:
    """150 memories (rowid order = list order), each a distinct length: a word in all of them, a CJK phrase, a
    hyphenated phrase, a rare word; one memory whose "read" ends its title and "only" starts its content (no
    phrase across columns in FTS5); one in layer L2."""
    memories = []
    for i in range(150):
        words = [f"entry{i}", "release"]
        if i % 3 == 0:
            words.append("数据库连接超时")
        if i % 5 == 0:
            words.append("a read-only replica")
        if i % 7 == 0:
            words.append("rollback")
        if i in (11, 97):
            words.append("zygote")
        padding = " ".join(FILLER[j % len(FILLER)] for j in range(i))
        memories.append(make_memory(f"{' '.join(words)} {padding}", title=f"note {i}"))
    memories.append(make_memory("only the primary rolled back", title="replica read"))
    memories.append(make_memory("release rollback zygote", layer="L2"))
    return memories


NEWEST = "SELECT rowid AS r FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid DESC LIMIT ?"
NEWEST_RANKED = (
    "SELECT r FROM (SELECT rowid AS r, rank AS s FROM memories_fts WHERE memories_fts MATCH ? "
    "ORDER BY rowid DESC LIMIT ?) ORDER BY s LIMIT ?"
)


def test_postgres_finds_the_newest_matches_as_fts5(tmp_path: Path, postgres_dsn: str) -> None:
    """The newest matches (plain and BM25-ranked among the newest) are the same rows in the same order on both
    backends: words, a CJK phrase, a hyphenated phrase, several parts, limits below and above the matches, a
    phrase whose words sit in two columns, a deleted memory and one its filter hides."""
    sqlite, pg = Database(tmp_path / "s.sqlite"), PgDatabase(postgres_dsn)
    try:
        memories = newest_corpus()
        for db in (sqlite, pg):
            repo = MemoryRepository(db)
            repo.insert_many(memories, "test")
            repo.update(dataclasses.replace(memories[140], status="deleted"), {}, "delete", "test")
        expressions = (
            '"zygote"',
            '"release"',
            '"read only"',
            '"数据 据库 库连 连接 接超 超时"',
            '"rollback" OR "zygote" OR "read only" OR "nothing"',
            '"数据" OR "据库" OR "数据 据库 库连 连接 接超 超时"',
            '"only" OR "read only" OR "zygote"',
            '"nothing"',
        )
        for expression in expressions:
            for n in (1, 3, 40, 500):
                for sql, params in ((NEWEST, [expression, n]), (NEWEST_RANKED, [expression, n, 5])):
                    expected = [r[0] for r in sqlite.query(sql, params)]
                    assert [r[0] for r in pg.query(sql, params)] == expected, (expression, n, sql)
        assert [r[0] for r in sqlite.query(NEWEST, ['"read only"', 500])] == [
            r
            for r in range(146, 0, -5)
            if r != 141  # not the deleted one, nor the phrase across two columns
        ]
        searches: list[tuple[list[str], bool, int]] = [
            (["zygote"], False, 5),
            (["release"], False, 5),
            (["release"], False, 200),
            (["数据库连接超时"], True, 10),
            (["数据库连接超时"], False, 10),
            (["read-only"], True, 7),
            (["rollback", "zygote", "read-only"], True, 30),
            (["rollback", "zygote", "entry3"], False, 100),
        ]
        for flt in (MemoryFilter(), MemoryFilter(layers=("L1",))):
            for terms, phrases, limit in searches:
                for order, pool in (("recent", None), ("rank", None), ("rank", 10)):
                    expected_ids = MemoryRepository(sqlite).token_search(
                        terms, limit, flt, order=order, phrases=phrases, rank_pool=pool
                    )
                    got = MemoryRepository(pg).token_search(
                        terms, limit, flt, order=order, phrases=phrases, rank_pool=pool
                    )
                    assert expected_ids, (terms, order)
                    assert got == expected_ids, (terms, phrases, limit, order, pool, flt)
                    assert memories[140].id not in got
                    newest_hit = order == "recent" and bool({"release", "rollback", "zygote"} & set(terms))
                    if flt.layers or newest_hit:  # the newest (layer L2) is hidden by its filter, or first
                        assert (memories[-1].id in got) == (not flt.layers), (terms, order, flt)
    finally:
        sqlite.close()
        pg.close()


def test_the_newest_matches_limit_is_written_only_as_an_int() -> None:
    """The newest matches' LIMIT goes into the statement's text, so only an int is taken."""
    statement = translate(NEWEST)
    assert statement.params(['"x"', 5]) == [] and "LIMIT 5)" in statement.text(['"x"', 5])
    ranked_newest = translate(NEWEST_RANKED)
    assert ranked_newest.params(['"x y"', 5, 3]) == [3] and "LIMIT 5)" in ranked_newest.text(['"x y"', 5, 3])
    for bad in ("5; DROP TABLE memories", 5.0, True, -1):
        for shape in (statement, ranked_newest):
            with pytest.raises(ValueError, match="LIMIT"):
                shape.text(['"x"', bad, 3])
