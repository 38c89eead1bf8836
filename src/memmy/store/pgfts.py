"""The keyword channel on PostgreSQL, ranked as SQLite FTS5's ``bm25()`` ranks it: the same stems, the same
document counts, term frequencies and document lengths, the same formula.

Text only (no psycopg here): stems, DDL and the statements :mod:`memmy.store.pgdialect` writes.

**Stems.** FTS5 stems with its own Porter (``porter unicode61``: tokens of 3 to 64 bytes, the revised rules such
as ``logi`` -> ``log``); PostgreSQL's Snowball English differs on ~5 % of LoCoMo's words and its Snowball Porter
on a few more (2-letter and long tokens). So both backends take the stems from FTS5 itself:
:func:`porter_stems` runs tokens through an in-memory FTS5 table (cached per token), and PostgreSQL indexes and
queries those stems as they are (:data:`TSV_FUNCTION`, a ``tsquery`` cast): no parser, no stemming of its own, no
stop words.

**Postings.** ``memories_fts_postings`` holds, per (lexeme, document), the lexeme's hits in each column (identifier
``A``, tags ``B``, value ``D``, as the tsvector weights them) and the document's length in tokens (FTS5's
``xColumnSize(-1)``); its primary key includes them, so ranking a word is an index-only range scan.
``memories_fts_stats`` holds the documents and their tokens (N and N x avgdl) as rows to sum (:data:`STATS_ROWS`),
``memories_fts_lexemes`` each lexeme's documents (a word's n_i), rows to sum too (:data:`LEXEME_DOCS`).
Statement-level triggers on ``memories_fts`` keep all three (one statement per written row or per bulk delete);
:data:`POSTINGS_BACKFILL` fills them from ``memories_fts`` in one statement (an upgraded store, or a bulk load with
the triggers off).

**Ranking** (:func:`ranked_sql`): per query part i (a word, or a phrase: CJK bigrams, a quoted fragment),
``idf_i * f_i * (k1 + 1) / (f_i + k1 * (1 - b + b * D / avgdl))`` summed over the parts a row matches, with
k1 = 1.2, b = 0.75, ``idf_i = ln((N - n_i + 0.5) / (n_i + 0.5))`` (1e-6 where that is <= 0), n_i the documents
matching part i, f_i its hits weighted by bm25()'s column weights, exactly fts5_aux.c's ``fts5Bm25Function``.
A word's hits come from its postings; a phrase's from its words' postings joined by row, counting the
positions of its first word that the others follow in the same column (``pos``: :data:`COLUMN_CODE`), as FTS5
counts phrase instances. A tsvector keeps at most 256 positions of a lexeme and positions up to 16,383: beyond those (a
word repeated 256 times, a memory of more than ~16k words) a hit count is lower than FTS5's.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from typing import Final

#: A tsvector of memmy's stems as they are: ``stems`` space-separated, each a lexeme at its position (1, 2, ...).
#: Not ``to_tsvector``: PostgreSQL's parser splits some of FTS5's tokens, a number in scientific notation followed
#: by letters ("7e6ceecd12", a hash or an id, became "7e6" and "ceecd12"), so such a word was never found. Queries
#: are cast to ``tsquery`` as written, for the same reason (``to_tsquery`` parses its words too).
TSV_FUNCTION: Final = r"""CREATE OR REPLACE FUNCTION memmy_tsv(stems text) RETURNS tsvector LANGUAGE sql IMMUTABLE
PARALLEL SAFE AS $$ SELECT COALESCE(string_agg('''' || replace(replace(s, '\', '\\'), '''', '''''') || ''':'
  || least(n, 16383), ' ')::tsvector, ''::tsvector)
FROM unnest(string_to_array(stems, ' ')) WITH ORDINALITY AS u(s, n) WHERE s <> '' $$"""
#: Whether ``memmy_tsv`` exists (before it, a store's tsvectors came from PostgreSQL's parser).
HAS_TSV_FUNCTION: Final = "SELECT to_regprocedure('memmy_tsv(text)') IS NOT NULL"
#: Full-text rows whose tsvector does not hold one position per stem: a stem PostgreSQL's parser split (or
#: dropped) in a store written before :data:`TSV_FUNCTION`; they are written again.
SPLIT_BY_PARSER: Final = (
    "SELECT rowid, id, identifier, memory_value, tags FROM memories_fts f "
    "WHERE f.doclen <> (SELECT COALESCE(sum(cardinality(u.positions)), 0) FROM unnest(f.tsv) u)"
)
POSTINGS: Final = "memories_fts_postings"
STATS: Final = "memories_fts_stats"
LEXEMES: Final = "memories_fts_lexemes"
#: FTS5's BM25 constants (fts5_aux.c).
K1: Final = 1.2
B: Final = 0.75
#: bm25()'s weights when a statement asks FTS5's ``rank`` (no weights given): every column 1.
RANK_WEIGHTS: Final = (1.0, 1.0, 1.0)

_STEMS: dict[str, str] = {}
_STEM_LOCK = threading.Lock()
_STEMMER: list[sqlite3.Connection] = []
_MAX_CACHED = 200_000


def _stemmer() -> sqlite3.Connection:
    if not _STEMMER:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        _STEMMER.append(db)
    return _STEMMER[0]


def porter_stems(tokens: Sequence[str]) -> list[str]:
    """Each token (lower case, as :func:`memmy.store.pgdialect.fts_tokens` makes them) as FTS5's ``porter``
    tokenizer indexes it; tokens not seen before go through one in-memory FTS5 table together."""
    missing = [t for t in dict.fromkeys(tokens) if t not in _STEMS]
    if missing:
        with _STEM_LOCK:
            db = _stemmer()
            db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", enumerate(missing, 1))
            found = {int(doc): str(term) for term, doc in db.execute("SELECT term, doc FROM v ORDER BY doc, offset")}
            db.execute("DELETE FROM t")
            if len(_STEMS) > _MAX_CACHED:
                _STEMS.clear()
            for i, token in enumerate(missing, 1):
                _STEMS[token] = found.get(i, token)
    return [_STEMS.get(t) or porter_stems([t])[0] for t in tokens]


# --- the schema ---------------------------------------------------------------------------------------------------

#: A posting's ``pos``: each position p of the lexeme as ``p * 4 + column`` (this code of its column), so that
#: the next token of the same column is ``+ 4`` and a phrase never runs from one column into the next.
COLUMN_CODE: Final = {"A": 3, "B": 2, "D": 0}

#: Positions of a phrase's first word checked one by one (``pos[1]`` .. ``pos[n]``, no subquery) when it has at
#: most this many in a row; a row with more is checked by a subquery over ``unnest(pos)``.
PHRASE_FAST_POSITIONS: Final = 3
#: A phrase word is joined by merging its postings with the rarest word's (read in rowid order) while it is found
#: in at most this many times the rarest word's documents; a commoner word is probed by index, row by row.
PHRASE_MERGE_RATIO: Final = 8

#: A phrase's hits (rowid, f: its instances weighted by column, doclen) from its words' postings, joined in the
#: order of their documents, rarest first (``join_collapse_limit = 1`` keeps that order): the planner's order
#: (the first two words merged, the others probed in turn) probed every row of two common words where one rare
#: word (a port, a byte, a path) leaves a few rows to probe (100k: "UnicodeDecodeError … byte 0x300" 28 -> 1.5 ms).
#: How each word is joined is chosen here, from the counts, not by the planner, which takes the words of a phrase
#: for independent and so expects a handful of rows where they occur together in every row (an error line's
#: words): a word in at most :data:`PHRASE_MERGE_RATIO` times the rarest word's documents is merge-joined
#: (``enable_nestloop`` off: its postings read in order, ~0.1 us a row), a commoner one ("to", "is") probed by
#: index from a ``LATERAL`` (~1.5 us a row: 100k, "TypeError: 'NoneType' object is not subscriptable" 10.4 ->
#: 4.8 ms). The instances are counted without a subquery per row where the first word has at most
#: :data:`PHRASE_FAST_POSITIONS` positions: each ``pos[j]`` that the others follow adds its column's weight, in
#: position order as ``sum()`` adds them (the same float8 sums; "etl-jobs" 7.0 -> 3.9 ms). A word no document
#: holds: no rows, nothing joined. ``$2``-``$4``: the weights of columns A, D and B.
PHRASE_HITS: Final = f"""CREATE OR REPLACE FUNCTION memmy_phrase_hits(words text[], wa float8, wd float8, wb float8)
RETURNS TABLE(rowid bigint, f float8, doclen integer) LANGUAGE plpgsql STABLE SET join_collapse_limit = 1
SET enable_nestloop = off AS $fn$
DECLARE
  rarest int[];
  counts numeric[];
  fewest numeric;
  joins text := '';
  follows text := '';
  fast text := '';
  k int;
BEGIN
  SELECT array_agg(i ORDER BY d, i), array_agg(d ORDER BY d, i), min(d) INTO rarest, counts, fewest FROM (
    SELECT i, COALESCE((SELECT sum(l.docs) FROM {LEXEMES} l WHERE l.lexeme = words[i + 1]), 0) AS d
    FROM generate_series(0, cardinality(words) - 1) i) z;
  IF fewest IS NULL OR fewest <= 0 THEN
    RETURN;
  END IF;
  FOR k IN 2..cardinality(rarest) LOOP
    IF counts[k] <= {PHRASE_MERGE_RATIO} * fewest THEN
      joins := joins || format(' JOIN {POSTINGS} p%1$s ON p%1$s.lexeme = $1[%2$s] AND p%1$s.rowid = p%3$s.rowid',
        rarest[k], rarest[k] + 1, rarest[1]);
    ELSE
      joins := joins || format(' CROSS JOIN LATERAL (SELECT q.pos FROM {POSTINGS} q WHERE q.lexeme = $1[%2$s] '
        'AND q.rowid = p%3$s.rowid OFFSET 0) p%1$s', rarest[k], rarest[k] + 1, rarest[1]);
    END IF;
  END LOOP;
  FOR k IN 1..cardinality(words) - 1 LOOP
    follows := follows || CASE WHEN k > 1 THEN ' AND ' ELSE '' END || format('x + %s = ANY(p%s.pos)', 4 * k, k);
  END LOOP;
  FOR k IN 1..{PHRASE_FAST_POSITIONS} LOOP
    fast := fast || CASE WHEN k > 1 THEN ' + ' ELSE '' END || format('CASE WHEN %s THEN CASE p0.pos[%s] & 3 '
      'WHEN {COLUMN_CODE["A"]} THEN $2 WHEN {COLUMN_CODE["B"]} THEN $4 ELSE $3 END ELSE 0::float8 END',
      replace(follows, 'x + ', format('p0.pos[%s] + ', k)), k);
  END LOOP;
  RETURN QUERY EXECUTE format('SELECT z.rowid, z.f, z.doclen FROM (SELECT p%1$s.rowid, p%1$s.doclen, CASE WHEN '
    'cardinality(p0.pos) <= {PHRASE_FAST_POSITIONS} THEN %2$s ELSE (SELECT COALESCE(sum(CASE x & 3 '
    'WHEN {COLUMN_CODE["A"]} THEN $2 WHEN {COLUMN_CODE["B"]} THEN $4 ELSE $3 END), 0)::float8 FROM unnest(p0.pos) x '
    'WHERE %3$s) END AS f '
    'FROM {POSTINGS} p%1$s%4$s WHERE p%1$s.lexeme = $1[%5$s] OFFSET 0) z WHERE z.f > 0', rarest[1], fast, follows,
    joins, rarest[1] + 1) USING words, wa, wd, wb;
END $fn$"""

#: The documents any of ``parts`` occurs in (each a word, or a phrase's lexemes joined by spaces: :func:`part_texts`),
#: as :func:`count_sql` counts them, for a statement whose text does not hold the words (:func:`count_bound_sql`).
MATCH_COUNT: Final = f"""CREATE OR REPLACE FUNCTION memmy_match_count(parts text[]) RETURNS bigint LANGUAGE plpgsql
STABLE AS $fn$
DECLARE
  n bigint;
BEGIN
  IF cardinality(parts) = 1 AND strpos(parts[1], ' ') = 0 THEN
    SELECT COALESCE(sum(l.docs), 0)::bigint INTO n FROM {LEXEMES} l WHERE l.lexeme = parts[1];
  ELSE
    SELECT count(*) INTO n FROM (
      SELECT p.rowid FROM unnest(parts) q(part) JOIN {POSTINGS} p ON p.lexeme = q.part
        WHERE strpos(q.part, ' ') = 0 AND p.hits_a + p.hits_b + p.hits_d > 0
      UNION
      SELECT h.rowid FROM unnest(parts) q(part) CROSS JOIN LATERAL memmy_phrase_hits(string_to_array(q.part, ' '),
        1.0, 1.0, 1.0) h WHERE strpos(q.part, ' ') > 0) u;
  END IF;
  RETURN n;
END $fn$"""

#: Tables and functions; run at every start (idempotent).
FTS_DDL: Final = (
    "ALTER TABLE memories_fts ADD COLUMN IF NOT EXISTS doclen INTEGER NOT NULL DEFAULT 0",
    f'CREATE TABLE IF NOT EXISTS {POSTINGS} (lexeme TEXT COLLATE "C" NOT NULL, rowid BIGINT NOT NULL, '
    "hits_a SMALLINT NOT NULL, hits_b SMALLINT NOT NULL, hits_d SMALLINT NOT NULL, doclen INTEGER NOT NULL, "
    "pos INTEGER[] NOT NULL, PRIMARY KEY (lexeme, rowid) INCLUDE (hits_a, hits_b, hits_d, doclen, pos))",
    f"CREATE TABLE IF NOT EXISTS {STATS} (docs BIGINT NOT NULL, tokens BIGINT NOT NULL)",
    f"ALTER TABLE {STATS} DROP COLUMN IF EXISTS one",  # a single counted row: see STATS_ROWS
    f'CREATE TABLE IF NOT EXISTS {LEXEMES} (lexeme TEXT COLLATE "C" NOT NULL, docs BIGINT NOT NULL)',
    f"CREATE INDEX IF NOT EXISTS {LEXEMES}_lexeme ON {LEXEMES} (lexeme) INCLUDE (docs)",
    """CREATE OR REPLACE FUNCTION memmy_bm25_idf(docs float8, n float8) RETURNS float8 LANGUAGE sql IMMUTABLE
  PARALLEL SAFE AS $$ SELECT CASE WHEN ln((docs - n + 0.5) / (n + 0.5)) > 0 THEN ln((docs - n + 0.5) / (n + 0.5))
  ELSE 1e-6 END $$""",
    f"""CREATE OR REPLACE FUNCTION memmy_bm25_term(idf float8, f float8, doclen float8, avgdl float8)
  RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT idf * f * {K1 + 1!r} / (f + {K1!r} * ({1 - B!r} + {B!r} * doclen / GREATEST(avgdl, 1e-9))) $$""",
    PHRASE_HITS,
    MATCH_COUNT,
)

#: The postings of the rows of a transition table ``rows`` (or of ``memories_fts``), one per (lexeme, row).
_POSTINGS_OF = (
    f"INSERT INTO {POSTINGS}(lexeme, rowid, hits_a, hits_b, hits_d, doclen, pos) "
    "SELECT u.lexeme, r.rowid, cardinality(array_positions(u.weights, 'A')), "
    "cardinality(array_positions(u.weights, 'B')), "
    "cardinality(u.weights) - cardinality(array_positions(u.weights, 'A')) "
    "- cardinality(array_positions(u.weights, 'B')), r.doclen, ARRAY(SELECT x.p * 4 + CASE x.w WHEN 'A' THEN "
    f"{COLUMN_CODE['A']} WHEN 'B' THEN {COLUMN_CODE['B']} ELSE {COLUMN_CODE['D']} END "
    "FROM unnest(u.positions, u.weights) x(p, w)) FROM {rows} r, unnest(r.tsv) u"
)
#: Each lexeme's documents from the postings afresh (also a store whose postings predate :data:`LEXEMES`).
LEXEMES_BACKFILL: Final = (
    f"DELETE FROM {LEXEMES}",
    f"INSERT INTO {LEXEMES}(lexeme, docs) SELECT lexeme, count(*) FROM {POSTINGS} GROUP BY lexeme",
)
#: Whether the lexemes' document counts exist yet (a store whose postings were made before them has none).
HAS_LEXEMES: Final = f"SELECT to_regclass('{LEXEMES}') IS NOT NULL"
#: Fill the postings and the counts from ``memories_fts`` afresh, in one statement each: a store upgraded to them,
#: or after a bulk load made with the triggers off (``ALTER TABLE memories_fts DISABLE TRIGGER USER``, the load,
#: ``ENABLE TRIGGER USER``, then these, in one transaction).
POSTINGS_BACKFILL: Final = (
    f"DELETE FROM {POSTINGS}",
    _POSTINGS_OF.format(rows="memories_fts"),
    f"DELETE FROM {STATS}",
    f"INSERT INTO {STATS}(docs, tokens) SELECT count(*), COALESCE(sum(doclen), 0) FROM memories_fts",
    *LEXEMES_BACKFILL,
)
#: One statement's change of the counts, appended (``rows``: a transition table; ``sign``: + or -), and now and
#: then the rows summed into one. Updating a single row instead costs a bulk load (one transaction, one statement
#: per memory) time quadratic in its rows: each update walks the versions that transaction left before it
#: (20k memories: 16.5 s against 6.4 s).
_COUNTS_OF = (
    "INSERT INTO {stats}(docs, tokens) SELECT {sign}count(*), {sign}COALESCE(sum(doclen), 0) FROM {rows};\n"
    "  IF random() < 1.0 / 1024 THEN\n"
    "    WITH gone AS (DELETE FROM {stats} RETURNING docs, tokens)\n"
    "    INSERT INTO {stats}(docs, tokens) SELECT COALESCE(sum(docs), 0), COALESCE(sum(tokens), 0) FROM gone;\n"
    "  END IF"
)
#: One statement's change of each lexeme's documents (``rows``: a transition table; ``sign``: + or -), appended as
#: rows to sum like the counts (a lexeme's row updated by every statement of a bulk load is what costs quadratic
#: time); now and then, at random, the rows of this statement's lexemes summed into one each.
_LEXEMES_OF = (
    "INSERT INTO {lexemes}(lexeme, docs) SELECT l.lexeme, {sign}count(*) FROM {rows} r, "
    "unnest(tsvector_to_array(r.tsv)) l(lexeme) GROUP BY l.lexeme;\n"
    "  IF random() < 1.0 / 64 THEN\n"
    "    WITH gone AS (DELETE FROM {lexemes} x WHERE x.lexeme IN (SELECT l.lexeme FROM {rows} r, "
    "unnest(tsvector_to_array(r.tsv)) l(lexeme)) RETURNING x.lexeme, x.docs)\n"
    "    INSERT INTO {lexemes}(lexeme, docs) SELECT lexeme, sum(docs) FROM gone GROUP BY lexeme\n"
    "      HAVING sum(docs) <> 0;\n"
    "  END IF"
)
#: The documents that hold ``lexeme`` (a word's document count for bm25(), without reading its postings).
LEXEME_DOCS: Final = "(SELECT COALESCE(sum(docs), 0)::bigint FROM " + LEXEMES + " WHERE lexeme = {lexeme})"
#: Ends the subquery of the counts that a ranked statement joins to its hits, so that its averages are computed
#: once: flattened into the join, ``tokens / GREATEST(docs, 1)`` of the numeric sums was computed for every hit
#: (100k, ten words: 8.5 -> 7.0 ms; the same float8 values, summed in the same order).
ONCE: Final = "OFFSET 0"
#: The counts' rows as (documents, tokens).
STATS_ROWS: Final = f"SELECT COALESCE(sum(docs), 0) AS docs, COALESCE(sum(tokens), 0) AS tokens FROM {STATS}"
TRIGGER_DDL: Final = (
    f"""CREATE OR REPLACE FUNCTION memmy_postings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {_POSTINGS_OF.format(rows="added")};
  {_COUNTS_OF.format(stats=STATS, sign="", rows="added")};
  {_LEXEMES_OF.format(lexemes=LEXEMES, sign="", rows="added")};
  RETURN NULL;
END $$""",
    f"""CREATE OR REPLACE FUNCTION memmy_postings_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM memories_fts) THEN
    DELETE FROM {POSTINGS};
    DELETE FROM {STATS};
    DELETE FROM {LEXEMES};
  ELSE
    DELETE FROM {POSTINGS} p USING removed r, unnest(tsvector_to_array(r.tsv)) l(lexeme)
      WHERE p.lexeme = l.lexeme AND p.rowid = r.rowid;
    {_COUNTS_OF.format(stats=STATS, sign="-", rows="removed")};
    {_LEXEMES_OF.format(lexemes=LEXEMES, sign="-", rows="removed")};
  END IF;
  RETURN NULL;
END $$""",
    f"""CREATE OR REPLACE FUNCTION memmy_postings_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {POSTINGS} p USING removed r, unnest(tsvector_to_array(r.tsv)) l(lexeme)
    WHERE p.lexeme = l.lexeme AND p.rowid = r.rowid;
  {_POSTINGS_OF.format(rows="added")};
  {_COUNTS_OF.format(stats=STATS, sign="-", rows="removed")};
  {_COUNTS_OF.format(stats=STATS, sign="", rows="added")};
  {_LEXEMES_OF.format(lexemes=LEXEMES, sign="-", rows="removed")};
  {_LEXEMES_OF.format(lexemes=LEXEMES, sign="", rows="added")};
  RETURN NULL;
END $$""",
    "CREATE OR REPLACE TRIGGER memmy_postings_added AFTER INSERT ON memories_fts REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION memmy_postings_added()",
    "CREATE OR REPLACE TRIGGER memmy_postings_removed AFTER DELETE ON memories_fts REFERENCING OLD TABLE AS "
    "removed FOR EACH STATEMENT EXECUTE FUNCTION memmy_postings_removed()",
    "CREATE OR REPLACE TRIGGER memmy_postings_changed AFTER UPDATE ON memories_fts REFERENCING OLD TABLE AS "
    "removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memmy_postings_changed()",
)
#: Whether ``memories_fts`` has its postings triggers (none: a new or recreated table, postings to rebuild).
HAS_TRIGGERS: Final = (
    "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'memories_fts'::regclass "
    "AND tgname = 'memmy_postings_added')"
)
#: Whether ``memories_fts`` predates the postings (its tsvectors were stemmed by Snowball English).
HAS_DOCLEN: Final = (
    "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
    "AND table_name = 'memories_fts' AND column_name = 'doclen')"
)


# --- the statements -----------------------------------------------------------------------------------------------


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def tsquery_text(lexemes: Sequence[str]) -> str:
    """One part (a word, or a phrase's lexemes in order) as ``tsquery`` input."""
    quoted = [_literal(x) for x in lexemes]
    return quoted[0] if len(quoted) == 1 else "(" + " <-> ".join(quoted) + ")"


def _hits(i: int, lexemes: Sequence[str], weights: tuple[float, float, float], rowid: str = "") -> str:
    """(part, rowid, weighted hits f, document length) of every row part ``i`` occurs in (with ``rowid``, an
    expression: of that row only). A phrase joins its lexemes' postings by row and counts the positions of its
    first lexeme that its others follow, in the same column: every row of it in :data:`PHRASE_HITS` (rarest word
    first), one row's here (in a ``LATERAL``: as a subquery in the select list a filter on it ran it once more per
    row; a phrase one of whose words no document holds is not joined: a one-time filter on :data:`LEXEMES`)."""
    wa, wd, wb = weights
    if len(lexemes) == 1:
        return (
            f"SELECT {i} AS i, rowid, {wa!r}::float8 * hits_a + {wb!r}::float8 * hits_b + {wd!r}::float8 * hits_d "
            f"AS f, doclen FROM {POSTINGS} WHERE lexeme = {_literal(lexemes[0])}"
            + (f" AND rowid = {rowid}" if rowid else "")
        )
    if not rowid:
        words = ", ".join(map(_literal, lexemes))
        return (
            f"SELECT {i} AS i, rowid, f, doclen FROM memmy_phrase_hits(ARRAY[{words}]::text[], {wa!r}, {wd!r}, {wb!r})"
        )
    weight = (
        f"CASE x & 3 WHEN {COLUMN_CODE['A']} THEN {wa!r}::float8 WHEN {COLUMN_CODE['B']} THEN {wb!r}::float8 "
        f"ELSE {wd!r}::float8 END"
    )
    follows = " AND ".join(f"x + {4 * k} = ANY(p{k}.pos)" for k in range(1, len(lexemes)))
    joins = " ".join(
        f"JOIN {POSTINGS} p{k} ON p{k}.rowid = p0.rowid AND p{k}.lexeme = {_literal(x)}"
        for k, x in enumerate(lexemes)
        if k
    )
    distinct = sorted(set(lexemes))
    present = (  # every word of the phrase in some document: else nothing to join (a CJK bigram across two words)
        f"(SELECT count(*) FROM (SELECT lexeme FROM {LEXEMES} WHERE lexeme IN ({', '.join(map(_literal, distinct))}) "
        f"GROUP BY lexeme HAVING sum(docs) > 0) w) = {len(distinct)}"
    )
    return (
        f"SELECT {i} AS i, p0.rowid, c.f, p0.doclen FROM {POSTINGS} p0 {joins} CROSS JOIN LATERAL (SELECT "
        f"COALESCE(sum({weight}), 0)::float8 AS f FROM unnest(p0.pos) x WHERE {follows}) c "
        f"WHERE p0.lexeme = {_literal(lexemes[0])} AND {present}" + (f" AND p0.rowid = {rowid}" if rowid else "")
    )


def ranked_sql(parts: Sequence[Sequence[str]], weights: tuple[float, float, float]) -> str:
    """``SELECT r, rank … ORDER BY rank, r`` (rank: FTS5's bm25(), negative, lower is better) over the rows
    any part occurs in; the caller appends ``LIMIT``. ``weights``: bm25()'s (identifier, value, tags).

    Each part's IDF is computed once (a scalar subquery beside its rows): a word's from :data:`LEXEME_DOCS`, a
    phrase's from its hits, found once in a ``MATERIALIZED`` CTE. (A window count over every part's hits sorted
    them all and computed the IDF per hit: ~a third of the statement at 100k.)"""
    if not parts:
        return "SELECT NULL::bigint AS r, NULL::float8 AS rank WHERE false ORDER BY 1"
    wa, wd, wb = weights
    docs = f"(SELECT docs::float8 FROM ({STATS_ROWS}) c)"
    ctes: list[str] = []
    rows: list[str] = []
    for i, part in enumerate(parts):
        if len(part) == 1:
            f = f"{wa!r}::float8 * hits_a + {wb!r}::float8 * hits_b + {wd!r}::float8 * hits_d"
            idf = f"(SELECT memmy_bm25_idf({docs}, {count_sql([part])}))"
            rows.append(
                f"SELECT rowid, {f} AS f, doclen, {idf} AS idf FROM {POSTINGS} WHERE lexeme = "
                f"{_literal(part[0])} AND {f} > 0"
            )
        else:
            ctes.append(
                f"h{i} AS MATERIALIZED (SELECT rowid, f, doclen FROM ({_hits(i, part, weights)}) x WHERE f > 0)"
            )
            idf = f"(SELECT memmy_bm25_idf({docs}, (SELECT count(*) FROM h{i})))"
            rows.append(f"SELECT rowid, f, doclen, {idf} AS idf FROM h{i}")
    return (
        ("WITH " + ", ".join(ctes) + " " if ctes else "")
        + "SELECT h.rowid AS r, -sum(memmy_bm25_term(h.idf, h.f, h.doclen, st.avgdl)) AS rank "
        f"FROM ({' UNION ALL '.join(rows)}) h, "
        f"(SELECT tokens::float8 / GREATEST(docs, 1) AS avgdl FROM ({STATS_ROWS}) c {ONCE}) st "
        "GROUP BY h.rowid ORDER BY rank, r"
    )


def part_texts(parts: Sequence[Sequence[str]]) -> list[str]:
    """Each part as one text, its lexemes joined by spaces (a lexeme holds none): the parameter of
    :func:`ranked_bound_sql`."""
    return [" ".join(part) for part in parts]


def ranked_bound_sql(weights: tuple[float, float, float]) -> str:
    """:func:`ranked_sql` as one text for every query: the parts are its one parameter (``%s``, a ``text[]`` of
    :func:`part_texts`), so the statement is prepared on its connection and, from its sixth run there, runs on a
    plan made once (generic) instead of being parsed and planned each time (~1 ms at 100k: its text held its
    words). The caller appends ``LIMIT``.

    Each part in order (``unnest … WITH ORDINALITY``), its IDF once (a ``LATERAL`` of one row); then its rows: a
    word's postings (an index range, whatever the word), or a phrase's hits (:data:`PHRASE_HITS`), its IDF from
    their count. The same rows and values, summed per row in the order of the parts, as :func:`ranked_sql` sums
    them; where the planner's estimate of a word's postings differed per word, here the plan is the same for every
    word (one index range per part), so the generic plan is the plan each run would get. The array is read through a
    scalar subquery so that a run's own plan does not count its parts either: with them counted, its estimate was
    below the generic plan's for a query of few parts, and PostgreSQL kept planning every run."""
    wa, wd, wb = weights
    f = f"{wa!r}::float8 * hits_a + {wb!r}::float8 * hits_b + {wd!r}::float8 * hits_d"
    return (
        "SELECT h.rowid AS r, -sum(memmy_bm25_term(h.idf, h.f, h.doclen, st.avgdl)) AS rank FROM (SELECT "
        f"docs::float8 AS docs, tokens::float8 / GREATEST(docs, 1) AS avgdl FROM ({STATS_ROWS}) c {ONCE}) st "
        "CROSS JOIN LATERAL (SELECT p.rowid, p.f, p.doclen, p.idf FROM unnest((SELECT %s::text[])) WITH ORDINALITY "
        "q(part, i) "
        "CROSS JOIN LATERAL (SELECT memmy_bm25_idf(st.docs, (SELECT COALESCE(sum(l.docs), 0)::bigint FROM "
        f"{LEXEMES} l WHERE l.lexeme = q.part)) AS idf {ONCE}) w CROSS JOIN LATERAL (SELECT rowid, {f} AS f, doclen, "
        f"w.idf FROM {POSTINGS} WHERE strpos(q.part, ' ') = 0 AND lexeme = q.part AND {f} > 0 UNION ALL SELECT "
        "x.rowid, x.f, x.doclen, memmy_bm25_idf(st.docs, count(*) OVER ()) FROM memmy_phrase_hits(string_to_array("
        f"q.part, ' '), {wa!r}, {wd!r}, {wb!r}) x WHERE strpos(q.part, ' ') > 0) p) h "
        "GROUP BY h.rowid ORDER BY rank, r"
    )


def _uncovered(parts: Sequence[Sequence[str]]) -> list[Sequence[str]]:
    """``parts`` less the phrases that a one-word part of the same OR covers (a row holding the phrase holds the
    word): the rows any part occurs in are the same, without joining the phrase's postings (a CJK run's bigrams
    and its phrase, counted or listed together)."""
    words = {part[0] for part in parts if len(part) == 1}
    return [part for part in parts if len(part) == 1 or not words.intersection(part)]


def count_sql(parts: Sequence[Sequence[str]]) -> str:
    """The documents any part occurs in, as one scalar subquery: a word's from :data:`LEXEMES` (a few rows to sum,
    where counting its postings read one index entry per document: 7 ms for "in" at 100k), others' from their
    postings."""
    parts = _uncovered(parts)
    if not parts:
        return "(SELECT 0::bigint)"
    if len(parts) == 1 and len(parts[0]) == 1:
        return LEXEME_DOCS.format(lexeme=_literal(parts[0][0]))
    rows = " UNION ".join(f"SELECT rowid FROM ({_hits(i, p, RANK_WEIGHTS)}) x WHERE f > 0" for i, p in enumerate(parts))
    return f"(SELECT count(*) FROM ({rows}) y)"


def count_bound_sql(parts: Sequence[Sequence[str]]) -> tuple[str, list[str]]:
    """:func:`count_sql` as a text that does not hold the words (:data:`MATCH_COUNT`) and its one parameter."""
    return "memmy_match_count(%s::text[])", part_texts(_uncovered(parts))


def row_score_sql(parts: Sequence[Sequence[str]], weights: tuple[float, float, float]) -> str:
    """FTS5's bm25() of the row at hand (alias ``memories_fts``), for statements that score a few rows (a rank
    among the newest matches): each part's hits looked up in the row's postings, its document count and the
    table's counts as subqueries PostgreSQL runs once."""
    docs = f"(SELECT docs FROM ({STATS_ROWS}) c)"
    avgdl = f"(SELECT tokens::float8 / GREATEST(docs, 1) FROM ({STATS_ROWS}) c)"
    terms = [
        f"COALESCE(memmy_bm25_term(memmy_bm25_idf({docs}, {count_sql([p])}), "
        f"(SELECT h.f FROM ({_hits(0, p, weights, 'memories_fts.rowid')}) h), memories_fts.doclen, {avgdl}), 0)"
        for p in parts
    ]
    return f"(-({' + '.join(terms) or '0'}))"


def newest_sql(parts: Sequence[Sequence[str]], limit: int) -> str:
    """``(SELECT rowid … ORDER BY rowid DESC LIMIT limit)``: the newest ``limit`` rows any part occurs in, as a
    subquery. Per part its own newest ``limit``: a word's from its postings backwards (one index-only range scan),
    a phrase's its first word's postings backwards, kept where the others follow in the same column (as
    :func:`ranked_sql` counts it); their union cut to ``limit`` again. ``limit`` is written into the text."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"a LIMIT must be a non-negative int, not {limit!r}")
    parts = _uncovered(parts)
    if not parts:
        return "(SELECT NULL::bigint AS rowid WHERE false)"
    each = [
        f"(SELECT rowid FROM {POSTINGS} WHERE lexeme = {_literal(p[0])} ORDER BY rowid DESC LIMIT {limit})"
        if len(p) == 1
        else f"(SELECT rowid FROM ({_hits(i, p, RANK_WEIGHTS)}) h WHERE f > 0 ORDER BY rowid DESC LIMIT {limit})"
        for i, p in enumerate(parts)
    ]
    return f"(SELECT rowid FROM ({' UNION '.join(each)}) u ORDER BY rowid DESC LIMIT {limit})"


def newest_ranked_sql(parts: Sequence[Sequence[str]], weights: tuple[float, float, float], pool: int) -> str:
    """``SELECT r, s … ORDER BY s, r DESC`` (s: FTS5's bm25(), lower is better; ties newest first) over the newest
    ``pool`` rows any part occurs in (as :func:`newest_sql` finds them); the caller appends ``LIMIT``.

    A phrase's hits are found once, in a ``MATERIALIZED`` CTE (its words' postings joined by row), which gives its
    newest rows, its document count and each row's hits: counting them, finding the newest and looking each row up
    joined the same postings three times (at 100k memories a 6-word error line took ~45 ms, ~15 a pass). The
    newest ``pool`` rows of all parts are every match from the oldest of them on, so each part's rows are read
    from there (a phrase's off its CTE, a word's off its postings: an index range) and summed per row in part
    order, as bm25() sums them; no join, whose plan over a CTE PostgreSQL cannot estimate."""
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 0:
        raise ValueError(f"a LIMIT must be a non-negative int, not {pool!r}")
    if not parts:
        return "SELECT NULL::bigint AS r, NULL::float8 AS s WHERE false ORDER BY 1"
    wa, wd, wb = weights
    ctes: list[str] = []
    newest: list[str] = []
    rows: list[str] = []
    for i, part in enumerate(parts):
        if len(part) == 1:
            word = _literal(part[0])
            newest.append(f"(SELECT rowid FROM {POSTINGS} WHERE lexeme = {word} ORDER BY rowid DESC LIMIT {pool})")
            rows.append(
                f"SELECT {i} AS i, rowid, {wa!r}::float8 * hits_a + {wb!r}::float8 * hits_b + {wd!r}::float8 * hits_d "
                f"AS f, doclen, {count_sql([part])} AS n FROM {POSTINGS} WHERE lexeme = {word} AND rowid >= cut.rowid"
            )
        else:
            ctes.append(
                f"h{i} AS MATERIALIZED (SELECT rowid, f, doclen FROM ({_hits(i, part, weights)}) x WHERE f > 0)"
            )
            newest.append(f"(SELECT rowid FROM h{i} ORDER BY rowid DESC LIMIT {pool})")
            rows.append(
                f"SELECT {i} AS i, rowid, f, doclen, (SELECT count(*) FROM h{i}) AS n FROM h{i} "
                "WHERE rowid >= cut.rowid"
            )
    union = " UNION ".join(newest)
    cut = f"(SELECT min(rowid) AS rowid FROM (SELECT rowid FROM ({union}) u ORDER BY rowid DESC LIMIT {pool}) z)"
    return (
        ("WITH " + ", ".join(ctes) + " " if ctes else "")
        + "SELECT x.rowid AS r, -sum(memmy_bm25_term(memmy_bm25_idf(st.n, x.n), x.f, x.doclen, st.avgdl) ORDER BY x.i) "
        f"AS s FROM {cut} cut CROSS JOIN LATERAL ({' UNION ALL '.join(rows)}) x CROSS JOIN (SELECT docs::float8 AS n, "
        f"tokens::float8 / GREATEST(docs, 1) AS avgdl FROM ({STATS_ROWS}) c {ONCE}) st "
        "GROUP BY x.rowid ORDER BY s, r DESC"
    )
