"""The SQL the repositories write for SQLite, as PostgreSQL runs it: a mechanical rewrite where it is exact, and the
full-text statements spelled out for PostgreSQL where it is not.

Nothing here imports psycopg: this is text in, text out (and cached), so it is tested without a server.

Rewrites (outside string literals): ``?`` -> ``%s`` (``%`` doubled), ``INSERT OR IGNORE`` -> ``ON CONFLICT DO
NOTHING``, ``json_extract(col, '$.a.b')`` -> ``col::jsonb #>> '{a,b}'`` (cast to a number where the value is one),
``json_array_length``/``json_each`` -> their jsonb forms, two-argument ``MAX``/``MIN`` -> ``GREATEST``/``LEAST``,
``IFNULL`` -> ``COALESCE``, ``LIKE`` -> ``ILIKE`` (SQLite's LIKE ignores case), ``IS ?`` -> ``IS NOT DISTINCT FROM``,
``LIMIT -1`` -> ``LIMIT ALL``, ``last_insert_rowid()`` -> ``lastval()``. Every table has a ``rowid`` column on
PostgreSQL (an identity, or the integer primary key it aliases on SQLite), so ``rowid`` needs no rewrite.

Full text: ``memories_fts MATCH ?`` becomes ``tsv @@ to_tsquery('memmy', …)`` over a ``tsvector`` built from
memmy's own tokens (:func:`fts_tokens`: the unicode61 split, lower case, diacritics removed; CJK already as
bigrams by :mod:`memmy.store.text`), stemmed by PostgreSQL's Snowball English (SQLite uses Porter) and never
stop-worded; ``bm25(memories_fts, …)`` and FTS5's ``rank`` become a BM25 of the query's parts (IDF from document
counts, the same column weights: identifier 2, value 1, tags 1.5; see :func:`bm25_sql`). Fusion uses ranks (RRF), so
the scale of the score does not matter, its order does.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

#: The text search configuration the migrations create: the ``simple`` parser's words, Snowball English stems.
TS_CONFIG: Final = "memmy"
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
    """``text`` as the space-separated tokens PostgreSQL indexes (see :func:`fts_tokens`)."""
    return " ".join(fts_tokens(text or ""))


def _lexeme(token: str) -> str:
    return "'" + token.replace("'", "''") + "'"


def tsquery_parts(expression: str) -> list[str]:
    """The quoted tokens and phrases of a MATCH expression as memmy builds them, each as ``to_tsquery`` text (a
    phrase's tokens joined by ``<->``), each once."""
    parts: list[str] = []
    for quoted in _QUOTED.findall(expression):
        tokens = fts_tokens(quoted.replace('""', '"'))
        if tokens:
            phrase = " <-> ".join(_lexeme(t) for t in tokens)
            parts.append(f"({phrase})" if len(tokens) > 1 else phrase)
    return list(dict.fromkeys(parts))


def fts5_to_tsquery(expression: str) -> str:
    """A MATCH expression (quoted tokens and phrases, OR-ed) as ``to_tsquery`` text; empty when nothing is left."""
    return " | ".join(tsquery_parts(expression))


#: Where a statement's BM25 score goes; it is written per call (:func:`bm25_sql`), since it has a term per part.
BM25_MARK: Final = "\x00bm25\x00"


def _tsq(part: str) -> str:
    """One part's tsquery as a literal (its lexemes are letters and digits; quotes are doubled all the same)."""
    return f"to_tsquery('{TS_CONFIG}', '{part.replace(chr(39), chr(39) * 2)}')"


def document_counts_sql(parts: list[str]) -> str:
    """One pass over the rows any part matches: (the table's estimated rows, each part's document count)."""
    counts = ", ".join(f"count(*) FILTER (WHERE tsv @@ {_tsq(p)})" for p in parts)
    either = " || ".join(_tsq(p) for p in parts)
    return (
        "SELECT (SELECT reltuples FROM pg_class WHERE oid = 'memories_fts'::regclass), "
        f"{counts} FROM memories_fts WHERE tsv @@ ({either})"
    )


def _weighted(part: str, weight: str) -> str:
    """``part`` matching only where its lexemes carry ``weight`` (the column: A identifier, B tags)."""
    return re.sub(r"('(?:[^']|'')*')", rf"\1:{weight}", part)


def bm25_sql(parts: list[str], idf: list[float]) -> str:
    """FTS5's ``bm25()`` (negative: lower is better) over the tsvector: per part, its BM25 IDF (computed by the
    caller from :func:`document_counts_sql`) times where it occurs, weighted as bm25()'s columns: anywhere 1, in
    the identifier +1, in the tags +0.5. Without the IDF a query's rare word would count no more than its common
    ones. Term frequency is left out: ``ts_rank_cd`` per part cost 4x the whole query (40 ms over 1,400 matches)
    and ranked the same top rows on memmy's short memories."""
    terms = [
        f"({weight!r} * ((tsv @@ {_tsq(part)})::int + (tsv @@ {_tsq(_weighted(part, 'A'))})::int "
        f"+ 0.5 * (tsv @@ {_tsq(_weighted(part, 'B'))})::int))"
        for part, weight in zip(parts, idf, strict=True)
    ]
    return f"(-({' + '.join(terms) or '0'}))"


def bm25_idf(total: float, counts: list[int]) -> list[float]:
    """BM25's ``ln((N - n + 0.5) / (n + 0.5) + 1)`` per part (N at least the largest count)."""
    documents = max([total, *counts, 1])
    return [math.log((documents - n + 0.5) / (n + 0.5) + 1) for n in counts]


def _tsv_sql(identifier: str = "%s", value: str = "%s", tags: str = "%s") -> str:
    """The ``tsv`` of a full-text row from the token texts (:func:`fts_text`) of its three columns."""
    return (
        f"setweight(to_tsvector('{TS_CONFIG}', {identifier}), 'A') || "
        f"setweight(to_tsvector('{TS_CONFIG}', {value}), 'D') || setweight(to_tsvector('{TS_CONFIG}', {tags}), 'B')"
    )


#: Fills ``memories_fts`` from the temporary table :func:`memmy.store.pg.refill_fts_bulk` loads (the token texts
#: made in Python, as each INSERT's are).
FTS_FROM_LOAD: Final = (
    "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags, tsv) SELECT rowid, id, identifier, "
    f"memory_value, tags, {_tsv_sql('identifier_tokens', 'value_tokens', 'tags_tokens')} FROM memmy_fts_load"
)


@dataclass(frozen=True)
class Statement:
    """One translated statement: its PostgreSQL text and where each ``%s`` takes its value from.

    ``plan`` lists, per placeholder, the index of the caller's parameter and how it is turned into this one's:
    ``""`` as it is, ``"tsquery"`` a MATCH expression as tsquery text, ``"fts"`` a column's text as tokens.
    """

    sql: str
    plan: tuple[tuple[int, str], ...]
    is_insert: bool
    drops_rowid: bool
    into: str | None
    #: The caller's parameter holding the MATCH expression, when the statement has a BM25 score to write.
    scored_by: int | None = None

    def text(self, given: tuple[Any, ...] | list[Any], idf: Callable[[list[str]], list[float]]) -> str:
        """:attr:`sql` with its BM25 score written out for this call's MATCH expression (``idf`` gives each part's
        weight)."""
        if self.scored_by is None:
            return self.sql
        parts = tsquery_parts(str(given[self.scored_by]))
        return self.sql.replace(BM25_MARK, bm25_sql(parts, idf(parts)).replace("%", "%%"))

    def params(self, given: tuple[Any, ...] | list[Any]) -> list[Any]:
        """The parameters of :attr:`sql` from the caller's."""
        out: list[Any] = []
        for index, how in self.plan:
            value = given[index]
            if how == "tsquery":
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
    code = re.sub(r"\bmemories_fts_docsize\b", "memories_fts", code)
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
    score = BM25_MARK
    sql = re.sub(r"\bbm25\(memories_fts[^)]*\)", score, sql)
    if "memories_fts MATCH" in sql:
        sql = re.sub(r"\brank AS\b", f"{score} AS", sql)
        sql = sql.replace("memories_fts MATCH ?", f"memories_fts.tsv @@ to_tsquery('{TS_CONFIG}', ?MATCH)")
    out: list[str] = []
    plan: list[tuple[int, str]] = []
    match_index: int | None = None
    for literal, piece in _split_literals(sql):
        if literal:
            out.append(piece.replace("%", "%%"))
            continue
        for part in re.split(r"(\?MATCH|\?)", _rewrite_code(piece).replace("%", "%%")):
            if part in ("?", "?MATCH"):
                if part == "?MATCH":
                    match_index = len(plan)
                plan.append((len(plan), "tsquery" if part == "?MATCH" else ""))
                out.append("%s")
            else:
                out.append(part)
    text = "".join(out)
    if ignore:
        returning = re.search(r"\sRETURNING\s", text, re.IGNORECASE)
        if returning:
            text = text[: returning.start()] + " ON CONFLICT DO NOTHING" + text[returning.start() :]
        else:
            text = text.rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    scored_by = match_index if BM25_MARK in text else None
    return Statement(text, tuple(plan), into is not None, bool(_STAR.search(sql)), into, scored_by)


def _fts_insert(sql: str) -> Statement | None:
    """The full-text index's writes, with the tsvector built from memmy's tokens."""
    columns = "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags, tsv) "
    plan: tuple[tuple[int, str], ...]
    if _FTS_INSERT_VALUES.match(sql):
        plan = ((0, ""), (1, ""), (2, ""), (3, ""), (4, ""), (2, "fts"), (3, "fts"), (4, "fts"))
        return Statement(columns + f"VALUES (%s, %s, %s, %s, %s, {_tsv_sql()})", plan, True, False, "memories_fts")
    if _FTS_INSERT_SELECT.match(sql):
        plan = ((0, ""), (1, ""), (2, ""), (0, "fts"), (1, "fts"), (2, "fts"), (3, ""))
        text = columns + f"SELECT rowid, id, %s, %s, %s, {_tsv_sql()} FROM memories WHERE id = %s"
        return Statement(text, plan, True, False, "memories_fts")
    return None


# --- the schema --------------------------------------------------------------------------------------------------

#: Run before the migrations, idempotently: the text search configuration and the helpers the rewrites use.
PRELUDE: Final = (
    f"""DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_ts_dict WHERE dictname = 'memmy_stem') THEN
    CREATE TEXT SEARCH DICTIONARY memmy_stem (TEMPLATE = snowball, Language = english);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = '{TS_CONFIG}') THEN
    CREATE TEXT SEARCH CONFIGURATION {TS_CONFIG} (COPY = simple);
    ALTER TEXT SEARCH CONFIGURATION {TS_CONFIG} ALTER MAPPING FOR asciiword, word, numword, asciihword, hword,
      hword_asciipart, hword_part, hword_numpart WITH memmy_stem;
  END IF;
END $$""",
    "CREATE OR REPLACE AGGREGATE memmy_total(double precision) (SFUNC = float8pl, STYPE = double precision, "
    "INITCOND = '0')",
    "CREATE OR REPLACE FUNCTION memmy_json_path(path text) RETURNS text[] LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT string_to_array(substr(path, 3), '.') $$",
    "CREATE TABLE IF NOT EXISTS schema_migrations (id TEXT PRIMARY KEY, version INTEGER NOT NULL, "
    "applied_at TEXT NOT NULL, checksum TEXT NOT NULL)",
)

PG_FTS_DDL: Final = (
    'CREATE TABLE memories_fts (rowid BIGINT PRIMARY KEY, id TEXT COLLATE "C", identifier TEXT, '
    "memory_value TEXT, tags TEXT, tsv tsvector NOT NULL)",
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
