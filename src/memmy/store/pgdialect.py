"""The SQL the repositories write for SQLite, as PostgreSQL runs it: a mechanical rewrite where it is exact, and the
full-text statements spelled out for PostgreSQL where it is not.

Nothing here imports psycopg: this is text in, text out (and cached), so it is tested without a server.

Rewrites (outside string literals): ``?`` -> ``%s`` (``%`` doubled), ``INSERT OR IGNORE`` -> ``ON CONFLICT DO
NOTHING``, ``json_extract(col, '$.a.b')`` -> ``col::jsonb #>> '{a,b}'`` (cast to a number where the value is one),
``json_array_length``/``json_each`` -> their jsonb forms, two-argument ``MAX``/``MIN`` -> ``GREATEST``/``LEAST``,
``IFNULL`` -> ``COALESCE``, ``LIKE`` -> ``ILIKE`` (SQLite's LIKE ignores case), ``IS ?`` -> ``IS NOT DISTINCT FROM``,
``LIMIT -1`` -> ``LIMIT ALL``, ``last_insert_rowid()`` -> ``lastval()``. Every table has a ``rowid`` column on
PostgreSQL (an identity, or the integer primary key it aliases on SQLite), so ``rowid`` needs no rewrite.

Full text (:mod:`memmy.store.pgfts`): ``memories_fts MATCH ?`` becomes ``tsv @@ (…)::tsquery`` over a ``tsvector``
of memmy's own tokens (``memmy_tsv``, :data:`memmy.store.pgfts.TSV_FUNCTION`; :func:`fts_tokens`: the unicode61
split, lower case, diacritics removed; CJK already as bigrams by :mod:`memmy.store.text`), stemmed by FTS5's own
Porter (:func:`memmy.store.pgfts.porter_stems`) and never stop-worded. The ranked keyword statement
(``bm25(memories_fts, …) … ORDER BY rank LIMIT ?``) becomes FTS5's bm25() over the postings table
(:func:`memmy.store.pgfts.ranked_sql`), a document count over the postings (:func:`memmy.store.pgfts.count_sql`),
and any other ``bm25()``/``rank`` the same score of each row at hand.
The newest matches (``… MATCH ? ORDER BY rowid DESC LIMIT ?``, plain or ranked among them: :data:`_NEWEST`) read
each part's newest rows off the postings (:func:`memmy.store.pgfts.newest_sql`), not the tsvectors.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Final

from memmy.store.pgfts import (
    RANK_WEIGHTS,
    TSV_FUNCTION,
    count_bound_sql,
    count_sql,
    newest_ranked_sql,
    newest_sql,
    part_texts,
    porter_stems,
    ranked_bound_sql,
    ranked_sql,
    row_score_sql,
    tsquery_text,
)

_TOKEN = re.compile(r"[^\W_]+")
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


def fts_tokens(text: str) -> list[str]:
    """The tokens FTS5's ``unicode61 remove_diacritics 2`` makes of ``text``: runs of letters and digits, lower
    case, without combining marks."""
    if not text:
        return []
    decomposed = unicodedata.normalize("NFD", text.lower())
    if not decomposed.isascii():
        decomposed = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _TOKEN.findall(decomposed)


def fts_text(text: str | None) -> str:
    """``text`` as the space-separated stems PostgreSQL indexes (see :func:`fts_tokens`)."""
    return " ".join(porter_stems(fts_tokens(text or "")))


def match_parts(expression: str) -> list[list[str]]:
    """The quoted tokens and phrases of a MATCH expression as memmy builds them, each as its stems in order,
    each once."""
    parts: dict[tuple[str, ...], None] = {}
    for quoted in _QUOTED.findall(expression):
        tokens = fts_tokens(quoted.replace('""', '"'))
        if tokens:
            parts.setdefault(tuple(porter_stems(tokens)), None)
    return [list(p) for p in parts]


def fts5_to_tsquery(expression: str) -> str:
    """A MATCH expression (quoted tokens and phrases, OR-ed) as ``tsquery`` input; empty when nothing is left."""
    return " | ".join(tsquery_text(p) for p in match_parts(expression))


#: Where a statement's BM25 score goes; it is written per call (:func:`memmy.store.pgfts.row_score_sql`).
BM25_MARK: Final = "\x00bm25\x00"
#: What :meth:`Statement.bound` reads a statement's text as: its full-text marks and placeholders (``%%``, a ``%``).
_BOUND_PIECE = re.compile(r"(\x00\w+?\d+\x00|%%|%s)")
_INLINE = re.compile(r"\x00(count|ranked|score|newest|newranked)(\d+)\x00")


#: The tsvector (identifier A, value D, tags B) and the length in tokens of the columns ``t.a``, ``t.d``, ``t.b``.
_TSV_DOCLEN = (
    "setweight(memmy_tsv(t.a), 'A') || setweight(memmy_tsv(t.d), 'D') || "
    "setweight(memmy_tsv(t.b), 'B'), cardinality(string_to_array(t.a, ' ')) "
    "+ cardinality(string_to_array(t.d, ' ')) + cardinality(string_to_array(t.b, ' '))"
)
_TSV_COLUMNS = "(SELECT %s::text AS a, %s::text AS d, %s::text AS b) t"


#: Fills ``memories_fts`` from the temporary table :func:`memmy.store.pg.refill_fts_bulk` loads (the stems made in
#: Python, as each INSERT's are): the tsvector and the length in tokens the per-row INSERT writes.
FTS_FROM_LOAD: Final = (
    "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags, tsv, doclen) SELECT l.rowid, l.id, "
    f"l.identifier, l.memory_value, l.tags, {_TSV_DOCLEN} FROM memmy_fts_load l, LATERAL (SELECT l.identifier_tokens "
    "AS a, l.value_tokens AS d, l.tags_tokens AS b) t"
)


@dataclass(frozen=True)
class Statement:
    """One translated statement: its PostgreSQL text and where each ``%s`` takes its value from.

    ``plan`` lists, per placeholder, the index of the caller's parameter and how it is turned into this one's:
    ``""`` as it is, ``"tsquery"`` a MATCH expression as tsquery text, ``"fts"`` a column's text as stems,
    ``"array<n>"`` that parameter and the n - 1 after it as one list (an IN list).
    ``inline`` lists the statement text written per call from a MATCH expression: (the caller's parameter, its
    mark ``\\x00kind<n>\\x00`` in :attr:`sql`, kind: ``count``, ``ranked``, ``score``, ``newest`` or ``newranked``,
    the last two with a LIMIT: the caller's next parameter).
    """

    sql: str
    plan: tuple[tuple[int, str], ...]
    is_insert: bool
    drops_rowid: bool
    into: str | None
    inline: tuple[tuple[int, str, str], ...] = ()
    #: bm25()'s column weights (identifier, value, tags) for ``ranked`` and ``score``.
    weights: tuple[float, float, float] = RANK_WEIGHTS

    def text(self, given: tuple[Any, ...] | list[Any]) -> str:
        """:attr:`sql` with its full-text parts written out for this call's MATCH expressions."""
        sql = self.sql
        for index, mark, kind in self.inline:
            parts = match_parts(str(given[index]))
            if kind == "count":
                piece = count_sql(parts)
            elif kind == "ranked":
                piece = ranked_sql(parts, self.weights)
            elif kind == "newest":
                piece = newest_sql(parts, given[index + 1])
            elif kind == "newranked":
                piece = newest_ranked_sql(parts, self.weights, given[index + 1])
            else:
                piece = row_score_sql(parts, self.weights)
            sql = sql.replace(mark, piece.replace("%", "%%"))
        return sql

    def bound(self, given: tuple[Any, ...] | list[Any]) -> tuple[str, list[Any]] | None:
        """The statement as a text that does not change with its MATCH expressions, and its parameters (each
        expression's parts one of them): the ranked statement (:func:`memmy.store.pgfts.ranked_bound_sql`) and the
        document counts (:func:`memmy.store.pgfts.count_bound_sql`), so that they are prepared; None for the others
        (their text is written per call, :meth:`text`)."""
        if not self.inline or any(kind not in ("ranked", "count") for _index, _mark, kind in self.inline):
            return None
        values = iter(self.params(given))
        marks = {mark: (index, kind) for index, mark, kind in self.inline}
        text: list[str] = []
        bound: list[Any] = []
        for piece in _BOUND_PIECE.split(self.sql):
            if piece in marks:
                index, kind = marks[piece]
                parts = match_parts(str(given[index]))
                if kind == "ranked":
                    piece, words = ranked_bound_sql(self.weights), part_texts(parts)
                else:
                    piece, words = count_bound_sql(parts)
                bound.append(words)
            elif piece == "%s":
                bound.append(next(values))
            text.append(piece)
        return "".join(text), bound

    def params(self, given: tuple[Any, ...] | list[Any]) -> list[Any]:
        """The parameters of :attr:`sql` from the caller's."""
        out: list[Any] = []
        for index, how in self.plan:
            value = given[index]
            if how.startswith("array"):
                value = [int(v) if isinstance(v, bool) else v for v in given[index : index + int(how[5:])]]
            elif how == "tsquery":
                value = fts5_to_tsquery(str(value))
            elif how == "fts":
                value = fts_text(value)
            elif isinstance(value, bool):
                value = int(value)  # SQLite stores a bool as 0/1 in an INTEGER column
            out.append(value)
        return out


_FTS_INSERT_VALUES = re.compile(
    r"^\s*INSERT INTO memories_fts\(rowid, id, identifier, memory_value, tags\) "
    r"VALUES \(\?,\s*\?,\s*\?,\s*\?,\s*\?\)\s*$"
)
_FTS_INSERT_SELECT = re.compile(
    r"^\s*INSERT INTO memories_fts\(rowid, id, identifier, memory_value, tags\)\s+SELECT rowid, id, \?, \?, \? "
    r"FROM memories WHERE id = \?\s*$"
)
_BM25_CALL = re.compile(r"\bbm25\(memories_fts((?:\s*,\s*-?[\d.]+)*)\s*\)")
_RANKED = re.compile(
    r"^\s*SELECT rowid AS r, bm25\(memories_fts[^)]*\) AS rank FROM memories_fts\s+WHERE memories_fts MATCH \?\s+"
    r"ORDER BY rank LIMIT \?\s*$"
)
#: The newest matches (``ORDER BY rowid DESC LIMIT ?``, the second ``?`` its LIMIT), plain and BM25-ranked, as
#: the same over :func:`memmy.store.pgfts.newest_sql`'s rows (``?NEWEST``: the MATCH expression and that LIMIT).
_NEWEST: Final = (
    (
        re.compile(
            r"^\s*SELECT rowid AS r FROM memories_fts\s+WHERE memories_fts MATCH \?\s+ORDER BY rowid DESC LIMIT \?\s*$"
        ),
        "SELECT n.rowid AS r FROM ?NEWEST n ORDER BY n.rowid DESC",
    ),
    (
        re.compile(
            r"^\s*SELECT r FROM \(SELECT rowid AS r, rank AS s FROM memories_fts\s+WHERE memories_fts MATCH \?\s+"
            r"ORDER BY rowid DESC LIMIT \?\)\s+ORDER BY s LIMIT \?\s*$"
        ),
        "SELECT r FROM (?NEWRANKED) x ORDER BY s, r DESC LIMIT ?",
    ),
)
_COUNT = re.compile(r"\bSELECT count\(\*\) FROM memories_fts WHERE memories_fts MATCH \?", re.IGNORECASE)
_NUMERIC_KEYS = frozenset({"tokens", "topScore", "priority", "gain", "value", "score", "strength"})
_JSON_EXTRACT = re.compile(r"json_extract\(\s*([\w.]+)\s*,\s*'\$\.([\w.]+)'\s*\)", re.IGNORECASE)
_JSON_LENGTH = re.compile(r"json_array_length\(\s*([\w.]+)\s*\)", re.IGNORECASE)
_JSON_EACH = re.compile(r"json_each\(\s*([\w.]+)\s*\)\s+(\w+)", re.IGNORECASE)
_JSON_SET = re.compile(
    r"json_set\(\s*([\w.]+)\s*,\s*(\?|'[^']*')\s*,\s*(json\(\?\)|-?\d+(?:\.\d+)?)\s*\)", re.IGNORECASE
)
_BLOB = re.compile(r"CAST\(\s*([\w.]+)\s+AS\s+BLOB\s*\)", re.IGNORECASE)
_JSON_REMOVE = re.compile(r"json_remove\(\s*([\w.]+)\s*,\s*(\?|'[^']*')\s*\)", re.IGNORECASE)
_PAIR = re.compile(r"\b(MAX|MIN)\(([^(),]+),([^(),]+)\)", re.IGNORECASE)
_STAR = re.compile(r"(?:SELECT|,)\s*(?:\w+\.)?\*", re.IGNORECASE)
_INTO = re.compile(r"^\s*INSERT\s+(?:OR\s+IGNORE\s+)?INTO\s+(\w+)", re.IGNORECASE)


#: ``IN (?, ?, …)`` (or ``NOT IN``): a list of placeholders only, whatever its length.
_IN_LIST = re.compile(r"\b(NOT\s+)?IN\s*\(\s*\?(?:\s*,\s*\?)*\s*\)", re.IGNORECASE)


def _as_array(match: re.Match[str]) -> str:
    """An IN list as one array parameter (``?ARRAYn``, its n values): ``= ANY(…)``, ``NOT IN``: ``<> ALL(…)``. The
    statement's text is then the same for every length of the list, so it is prepared once, not once per length
    (a list of 40 rowids: 1.1 -> 0.7 ms). The same rows: NULLs in the list or the column answer as ``IN`` does."""
    n = match.group(0).count("?")
    return f"<> ALL(?ARRAY{n})" if match.group(1) else f"= ANY(?ARRAY{n})"


def _json_extract(match: re.Match[str]) -> str:
    column, path = match.group(1), match.group(2).split(".")
    text = f"({column}::jsonb #>> '{{{','.join(path)}}}')"
    if path[-1] in _NUMERIC_KEYS:
        node = f"({column}::jsonb #> '{{{','.join(path)}}}')"
        return f"(CASE WHEN jsonb_typeof{node} = 'number' THEN {text}::double precision END)"
    return text


def _json_set(match: re.Match[str]) -> str:
    column, path, value = match.group(1), match.group(2), match.group(3)
    new = "(?)::jsonb" if value.lower().startswith("json(") else f"to_jsonb({value})"
    return f"jsonb_set({column}::jsonb, memmy_json_path({path}), {new})::text"


def _rewrite_code(code: str) -> str:
    """The rewrites of a stretch of SQL outside string literals (placeholders are handled by the caller)."""
    code = re.sub(r"\bIFNULL\(", "COALESCE(", code, flags=re.IGNORECASE)
    code = re.sub(r"\bNOT\s+LIKE\b", "NOT ILIKE", code, flags=re.IGNORECASE)
    code = re.sub(r"(?<!NOT )\bLIKE\b", "ILIKE", code, flags=re.IGNORECASE)
    code = re.sub(r"\bIS\s+NOT\s+\?", "IS DISTINCT FROM ?", code, flags=re.IGNORECASE)
    code = re.sub(r"\bIS\s+\?", "IS NOT DISTINCT FROM ?", code, flags=re.IGNORECASE)
    code = re.sub(r"\bLIMIT\s+-1\b", "LIMIT ALL", code, flags=re.IGNORECASE)
    code = re.sub(r"\blast_insert_rowid\(\)", "lastval()", code, flags=re.IGNORECASE)
    code = re.sub(r"\bAS\s+REAL\b", "AS DOUBLE PRECISION", code, flags=re.IGNORECASE)
    code = re.sub(r"\btotal\(", "memmy_total(", code)
    code = re.sub(r"\bcount\(\*\) FROM memories_fts_docsize\b", "sum(docs) FROM memories_fts_stats", code)
    return re.sub(r"\bBEGIN\s+IMMEDIATE\b", "BEGIN", code, flags=re.IGNORECASE)


def _qualify_upsert(sql: str, table: str | None) -> str:
    """In ``ON CONFLICT … DO UPDATE SET …`` a bare column is the existing row's on SQLite and ambiguous on
    PostgreSQL: qualify it with the table (assignment targets stay bare, as PostgreSQL wants them)."""
    at = re.search(r"\bDO\s+UPDATE\s+SET\b", sql, re.IGNORECASE)
    if at is None or table is None:
        return sql
    head, tail = sql[: at.end()], sql[at.end() :]
    out: list[str] = []
    depth, expect_target, previous = 0, True, ""
    for literal, piece in _split_literals(tail):
        if literal:
            out.append(piece)
            expect_target, previous = False, "'"
            continue
        tokens = re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\s+|.", piece)
        for i, token in enumerate(tokens):
            if token.isspace():
                out.append(token)
                continue
            following = next((t for t in tokens[i + 1 :] if not t.isspace()), "")
            bare = re.fullmatch(r"[a-z_][a-z0-9_]*", token) is not None
            if bare and not expect_target and previous != "." and following not in (".", "("):
                out.append(f"{table}.{token}")
            else:
                out.append(token)
            depth += (token == "(") - (token == ")")
            expect_target = token == "," and depth == 0
            previous = token
    text = "".join(out)
    return head + text


def _pairs(sql: str) -> str:
    """Two-argument MAX/MIN (SQLite's scalar forms) as GREATEST/LEAST; one-argument ones are aggregates."""

    def pair(m: re.Match[str]) -> str:
        return f"{'GREATEST' if m.group(1).upper() == 'MAX' else 'LEAST'}({m.group(2)},{m.group(3)})"

    return _PAIR.sub(pair, sql)


def _split_literals(sql: str) -> list[tuple[bool, str]]:
    """``sql`` as (is_literal, text) pieces: single-quoted strings and double-quoted names are literal."""
    pieces: list[tuple[bool, str]] = []
    i, start, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            if start < i:
                pieces.append((False, sql[start:i]))
            j = i + 1
            while j < n:
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            pieces.append((True, sql[i : j + 1]))
            i = start = j + 1
            continue
        i += 1
    if start < n:
        pieces.append((False, sql[start:]))
    return pieces


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> Statement:
    """``sql`` (SQLite, ``?`` placeholders) as PostgreSQL (``%s``, client-side binding)."""
    special = _fts_insert(sql)
    if special is not None:
        return special
    into_match = _INTO.match(sql)
    into = into_match.group(1).lower() if into_match else None
    ignore = bool(re.match(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", sql, re.IGNORECASE))
    sql = re.sub(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", "INSERT INTO", sql, flags=re.IGNORECASE)
    sql = _JSON_EXTRACT.sub(_json_extract, sql)
    sql = _JSON_LENGTH.sub(lambda m: f"jsonb_array_length({m.group(1)}::jsonb)", sql)
    sql = _JSON_EACH.sub(lambda m: f"jsonb_array_elements_text({m.group(1)}::jsonb) AS {m.group(2)}(value)", sql)
    sql = _JSON_SET.sub(_json_set, sql)
    sql = _BLOB.sub(lambda m: f"convert_to({m.group(1)}, 'UTF8')", sql)
    sql = _JSON_REMOVE.sub(lambda m: f"({m.group(1)}::jsonb #- memmy_json_path({m.group(2)}))::text", sql)
    sql = _pairs(sql)
    sql = _qualify_upsert(sql, into)
    weights = RANK_WEIGHTS
    bm25 = _BM25_CALL.search(sql)
    if bm25 is not None:
        weights = _bm25_weights(bm25.group(1))
    ranked = _RANKED.match(sql)
    if ranked is not None:  # the keyword channel's ranked statement: FTS5's bm25() over the postings
        sql = "?RANKED LIMIT ?"
    for shape, newest in _NEWEST:
        if shape.match(sql):
            sql = newest
    sql = _COUNT.sub("SELECT ?COUNT", sql)
    sql = re.sub(r"\bbm25\(memories_fts[^)]*\)", "?SCORE", sql)
    if "memories_fts MATCH" in sql:
        sql = re.sub(r"\brank AS\b", "?SCORE AS", sql)
        sql = sql.replace("memories_fts MATCH ?", "memories_fts.tsv @@ (?MATCH)::tsquery")
    out: list[str] = []
    plan: list[tuple[int, str]] = []
    inline: list[tuple[int, str, str]] = []
    given = 0  # the caller's parameter the next ``?`` takes
    match_index: int | None = None
    for literal, piece in _split_literals(sql):
        if literal:
            out.append(piece.replace("%", "%%"))
            continue
        code = _IN_LIST.sub(_as_array, _rewrite_code(piece).replace("%", "%%"))
        for part in re.split(r"(\?MATCH|\?COUNT|\?RANKED|\?NEWRANKED|\?NEWEST|\?SCORE|\?ARRAY\d+|\?)", code):
            if part.startswith("?ARRAY"):  # an IN list: its values as one array
                plan.append((given, part[1:].lower()))
                out.append("%s")
                given += int(part[6:])
            elif part in ("?NEWEST", "?NEWRANKED"):  # the MATCH expression and its LIMIT, both written per call
                kind = part[1:].lower()
                mark = f"\x00{kind}{len(inline)}\x00"
                inline.append((given, mark, kind))
                out.append(mark)
                match_index = given
                given += 2
            elif part in ("?COUNT", "?RANKED"):
                mark = f"\x00{part[1:].lower()}{len(inline)}\x00"
                inline.append((given, mark, part[1:].lower()))
                out.append(mark)
                given += 1
            elif part == "?SCORE":
                out.append(BM25_MARK)
            elif part in ("?", "?MATCH"):
                if part == "?MATCH":
                    match_index = given
                plan.append((given, "tsquery" if part == "?MATCH" else ""))
                out.append("%s")
                given += 1
            else:
                out.append(part)
    text = "".join(out)
    if ignore:
        returning = re.search(r"\sRETURNING\s", text, re.IGNORECASE)
        if returning:
            text = text[: returning.start()] + " ON CONFLICT DO NOTHING" + text[returning.start() :]
        else:
            text = text.rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    if BM25_MARK in text and match_index is not None:
        inline.append((match_index, BM25_MARK, "score"))
    return Statement(text, tuple(plan), into is not None, bool(_STAR.search(sql)), into, tuple(inline), weights)


def _bm25_weights(arguments: str) -> tuple[float, float, float]:
    """bm25()'s weights of the (identifier, value, tags) columns from its arguments after the table (the first
    is the unindexed id's); a column without one weighs 1."""
    given = [float(a) for a in arguments.split(",") if a.strip()][1:]
    given += [1.0] * (3 - len(given))
    return given[0], given[1], given[2]


def _fts_insert(sql: str) -> Statement | None:
    """The full-text index's writes, with the tsvector built from memmy's tokens."""
    columns = "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags, tsv, doclen) "
    plan: tuple[tuple[int, str], ...]
    if _FTS_INSERT_VALUES.match(sql):
        plan = ((0, ""), (1, ""), (2, ""), (3, ""), (4, ""), (2, "fts"), (3, "fts"), (4, "fts"))
        text = columns + f"SELECT %s, %s, %s, %s, %s, {_TSV_DOCLEN} FROM {_TSV_COLUMNS}"
        return Statement(text, plan, True, False, "memories_fts")
    if _FTS_INSERT_SELECT.match(sql):
        plan = ((0, ""), (1, ""), (2, ""), (0, "fts"), (1, "fts"), (2, "fts"), (3, ""))
        text = columns + f"SELECT m.rowid, m.id, %s, %s, %s, {_TSV_DOCLEN} FROM memories m, {_TSV_COLUMNS} "
        text += "WHERE m.id = %s"
        return Statement(text, plan, True, False, "memories_fts")
    return None


# --- the schema --------------------------------------------------------------------------------------------------

#: One row per database: the digest of the setup :class:`memmy.store.pg.PgDatabase` last ran on it (the prelude,
#: the keyword channel's postings and triggers, the vector mirror). A daemon opening a store whose digest matches
#: runs no DDL: replacing a trigger locks its table, and that deadlocked with another daemon's write.
SETUP_TABLE: Final = "memmy_pg_setup"

#: Run before the migrations, idempotently: the helpers the rewrites use.
PRELUDE: Final = (
    TSV_FUNCTION,
    "CREATE OR REPLACE AGGREGATE memmy_total(double precision) (SFUNC = float8pl, STYPE = double precision, "
    "INITCOND = '0')",
    "CREATE OR REPLACE FUNCTION memmy_json_path(path text) RETURNS text[] LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT string_to_array(substr(path, 3), '.') $$",
    "CREATE TABLE IF NOT EXISTS schema_migrations (id TEXT PRIMARY KEY, version INTEGER NOT NULL, "
    "applied_at TEXT NOT NULL, checksum TEXT NOT NULL)",
)

PG_FTS_DDL: Final = (
    'CREATE TABLE memories_fts (rowid BIGINT PRIMARY KEY, id TEXT COLLATE "C", identifier TEXT, '
    "memory_value TEXT, tags TEXT, tsv tsvector NOT NULL, doclen INTEGER NOT NULL DEFAULT 0)",
    "CREATE INDEX memories_fts_tsv ON memories_fts USING GIN (tsv)",
)
_CREATE_TABLE = re.compile(r"^CREATE TABLE (?:IF NOT EXISTS )?(\w+)\s*\(", re.IGNORECASE)
_INT_PK = re.compile(r"\b(\w+) INTEGER PRIMARY KEY(?: AUTOINCREMENT)?", re.IGNORECASE)


def pg_ddl(statement: str) -> list[str]:
    """One statement of a SQLite migration as the PostgreSQL statements that do the same."""
    text = statement.strip().rstrip(";")
    if re.match(r"^CREATE VIRTUAL TABLE (?:IF NOT EXISTS )?memories_fts\b", text, re.IGNORECASE):
        return ["DROP TABLE IF EXISTS memories_fts", *PG_FTS_DDL]
    text = re.sub(r"\s*CHECK \((?:\w+ IS NULL OR )?json_valid\(\w+\)\)", "", text)
    random_hex = "substr(md5(random()::text || clock_timestamp()::text), 1, 20)"
    text = re.sub(r"lower\(hex\(randomblob\(\d+\)\)\)", random_hex, text)
    text = _JSON_EXTRACT.sub(_json_extract, text)
    table = _CREATE_TABLE.match(text)
    alias: str | None = None
    if table:
        pk = _INT_PK.search(text)
        if pk:
            alias = pk.group(1)
            text = _INT_PK.sub(lambda m: f"{m.group(1)} BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", text)
    text = re.sub(r"\bINTEGER\b", "BIGINT", text)
    text = re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)
    text = re.sub(r"\bBLOB\b", "BYTEA", text)
    text = re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', text)
    if not table:
        return [text]
    head = text[: table.end()]
    body = text[table.end() :]
    closing = body.rstrip().rfind(")")
    if alias is not None:  # SQLite's rowid is this column: the same values under the name rowid
        body = body[:closing] + f",\n  rowid BIGINT GENERATED ALWAYS AS ({alias}) STORED\n" + body[closing:]
        return [head + body]
    name = table.group(1)
    return [
        head + "\n  rowid BIGINT GENERATED BY DEFAULT AS IDENTITY," + body,
        f"CREATE UNIQUE INDEX IF NOT EXISTS {name}_rowid ON {name}(rowid)",
    ]
