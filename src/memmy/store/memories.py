"""The memories table, its full-text index and its change log, behind one repository."""

from __future__ import annotations

import json
import operator
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memmy.domain import Memory
from memmy.kinds import trace
from memmy.store.db import Database, utc_now
from memmy.store.jsontext import dumps_json
from memmy.store.logs import append_change, append_creations
from memmy.store.text import (
    FTS_DELETE,
    FTS_INSERT,
    FTS_INSERT_AT,
    fts_match_expression,
    fts_match_parts,
    fts_row,
    phrase_match_expression,
    query_terms,
)

#: Rows that every normal read must skip: deleted, archived, superseded (valid_to in the past).
MAX_FTS_WINDOW = 50_000
SELECTIVE_TERMS_MIN_DOCS = 5_000
COMMON_TERM_SHARE = 0.15
MAX_SELECTIVE_TERMS = 8
#: In a large store, the BM25 query scores at most about this many (row, term) matches: bm25() costs ~1.2 us per
#: matched row at 100k memories, while counting the matches costs a tenth of that.
MAX_SCORED_MATCHES = 12_000
#: A ranked exact-token search (the structural channel's error phrases and paths) scores the newest this many
#: matches with bm25(): a phrase found in thousands of traces costs 5-12 ms to rank in full at 100k memories
#: (0.9-2.3 ms this way), and those traces are alike in what the phrase says.
RANKED_TOKEN_POOL = 512

#: Rows a normal read may see: live, and not superseded (``valid_to`` in the past).
VISIBLE = "m.status = 'activated' AND (m.valid_to IS NULL OR m.valid_to > ?)"
#: Recall additionally hides imported turns whose index is not ready yet.
RECALLABLE = VISIBLE + " AND json_extract(m.info_json, '$.importPending') IS NULL"

_COLUMNS = (
    "id, user_id, conversation_id, session_id, agent_id, app_id, status, memory_key, title, memory_value, "
    "tags_json, info_json, properties_json, memory_layer, content_hash, version, created_at, updated_at, "
    "deleted_at, project_id, source_agent, turn_id, valid_from, valid_to, superseded_by, visibility"
)

#: The same columns on alias ``m`` (for joins with the FTS table, which has its own ``id`` and ``memory_value``).
_M_COLUMNS = ", ".join(f"m.{name.strip()}" for name in _COLUMNS.split(","))


#: The columns :func:`row_to_memory` reads, in the order of its unpacking.
_MEMORY_FIELDS = (
    "id", "memory_layer", "memory_value", "title", "tags_json", "status", "user_id", "project_id", "source_agent",
    "session_id", "turn_id", "conversation_id", "memory_key", "content_hash", "info_json", "properties_json",
    "version", "created_at", "updated_at", "deleted_at", "valid_from", "valid_to", "superseded_by", "visibility",
)  # fmt: skip
#: ``{a query's column names: getter of _MEMORY_FIELDS by position}``, one per distinct SELECT list.
_FIELD_GETTERS: dict[tuple[str, ...], Callable[[sqlite3.Row], tuple[Any, ...]]] = {}


def _memory_fields(row: sqlite3.Row) -> tuple[Any, ...]:
    """The values of :data:`_MEMORY_FIELDS` in ``row``, read by position.

    ``sqlite3.Row`` finds a column by name with a case-insensitive scan of the row's columns, 24 times a row;
    the positions are found once per SELECT list instead. A column the row lacks raises ``IndexError``, as a
    lookup by name does.
    """
    keys = tuple(row.keys())
    getter = _FIELD_GETTERS.get(keys)
    if getter is None:
        position = {name.lower(): i for i, name in reversed(list(enumerate(keys)))}  # the first of a name wins
        missing = [name for name in _MEMORY_FIELDS if name not in position]
        if missing:
            raise IndexError(f"No item with that key: {missing[0]!r}")
        getter = operator.itemgetter(*(position[name] for name in _MEMORY_FIELDS))
        _FIELD_GETTERS[keys] = getter
    return getter(row)


def _json_list(text: str | None) -> list[Any]:
    """A ``*_json`` list column: the empty list without the JSON parser (most rows), else the parsed text."""
    if not text or text == "[]":
        return []
    value: list[Any] = json.loads(text)
    return value


def _json_object(text: str | None) -> dict[str, Any]:
    """A ``*_json`` object column: the empty dict without the JSON parser (most rows), else the parsed text."""
    if not text or text == "{}":
        return {}
    value: dict[str, Any] = json.loads(text)
    return value


def row_to_memory(row: sqlite3.Row) -> Memory:
    """Map a memories row to :class:`Memory` (any SELECT list holding the memories columns, in any order).

    Every recalled candidate passes through here (about 150 rows a turn start, most of them on the keyword
    worker that a recall waits for), so the columns are read by position and empty JSON skips the parser.
    """
    (memory_id, layer, content, title, tags, status, user_id, project_id, source_agent, session_id, turn_id,
     conversation_id, memory_key, content_hash, info, properties, version, created_at, updated_at, deleted_at,
     valid_from, valid_to, superseded_by, visibility) = _memory_fields(row)  # fmt: skip
    return Memory(
        id=memory_id,
        layer=layer,
        content=content,
        title=title or "",
        tags=_json_list(tags),
        status=status,
        user_id=user_id,
        project_id=project_id,
        source_agent=source_agent or "unknown",
        session_id=session_id,
        turn_id=turn_id,
        conversation_id=conversation_id,
        memory_key=memory_key,
        content_hash=content_hash,
        info=_json_object(info),
        properties=_json_object(properties),
        version=version,
        created_at=created_at,
        updated_at=updated_at,
        deleted_at=deleted_at,
        valid_from=valid_from,
        valid_to=valid_to,
        superseded_by=superseded_by,
        visibility=visibility or "private",
    )


@dataclass(frozen=True)
class MemoryFilter:
    """Which memories a read may see (layers and scope)."""

    layers: tuple[str, ...] = ()
    project_id: str | None = None
    source_agent: str | None = None
    user_id: str | None = None
    include_pending_imports: bool = False
    #: A team server's person: only their own memories and the team-scope ones of ``team_project``.
    reader: str | None = None
    team_project: str | None = None

    def sql(self, now: str) -> tuple[str, list[Any]]:
        """WHERE fragment (on alias ``m``) and its parameters."""
        clauses = [VISIBLE if self.include_pending_imports else RECALLABLE]
        params: list[Any] = [now]
        if self.layers:
            clauses.append(f"m.memory_layer IN ({','.join('?' * len(self.layers))})")
            params.extend(self.layers)
        if self.project_id is not None:
            clauses.append("(m.project_id = ? OR m.project_id IS NULL OR m.visibility = 'global')")
            params.append(self.project_id)
        if self.source_agent is not None:
            clauses.append("m.source_agent = ?")
            params.append(self.source_agent)
        if self.user_id is not None:
            clauses.append("m.user_id = ?")
            params.append(self.user_id)
        if self.reader is not None:
            clauses.append("(m.user_id = ? OR (m.visibility = 'team' AND m.project_id = ?))")
            params.extend([self.reader, self.team_project])
        return " AND ".join(clauses), params


def _first_new_rowid(conn: sqlite3.Connection, ids: Sequence[str]) -> int | None:
    """The rowid of ``ids[0]`` when the memories just inserted (in this order, by one statement) hold consecutive
    rowids; None when they cannot be shown to.

    SQLite gives a new row the largest rowid + 1, so rows inserted one after another in one transaction are
    numbered consecutively up to ``last_insert_rowid()``; the first and the last row are checked against that
    (n strictly increasing rowids from ``first`` to ``first + n - 1`` leave no gap); otherwise each memory's rowid
    is looked up by id (``FTS_INSERT``), one index lookup per inserted memory.
    """
    if not ids:
        return None
    last = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
    first = last - len(ids) + 1
    ends = dict(conn.execute("SELECT rowid, id FROM memories WHERE rowid IN (?, ?)", (first, last)).fetchall())
    return first if ends.get(first) == ids[0] and ends.get(last) == ids[-1] else None


class TermStats:
    """Document frequencies of query terms, cached for a few minutes (they change slowly)."""

    def __init__(self, ttl_s: float = 300.0) -> None:
        self.ttl_s = ttl_s
        self._counts: dict[str, tuple[float, int]] = {}
        self._total: tuple[float, int] = (0.0, 0)

    def total(self, db: Database) -> int:
        """Documents in the full-text index (every memory not deleted).

        Counted on FTS5's own per-document table (``memories_fts_docsize``, a few bytes a row: 0.1 ms at 100k,
        where counting ``memories`` reads the whole table, ~10 ms, on the keyword worker of some turn)."""
        now = time.monotonic()
        if now - self._total[0] > self.ttl_s:
            try:
                row = db.query_one("SELECT count(*) FROM memories_fts_docsize")
            except sqlite3.OperationalError:  # an index built without its docsize table
                row = db.query_one("SELECT count(*) FROM memories WHERE status != 'deleted'")
            self._total = (now, int(row[0]) if row else 0)
        return self._total[1]

    def doc_count(self, db: Database, term: str) -> int:
        """How many documents contain ``term`` (as the index tokenises it; a CJK run: any of its bigrams)."""
        return self._count(db, fts_match_expression([term]))

    def scored_matches(self, db: Database, term: str) -> int:
        """The (row, token) matches bm25() scores for ``term``: its documents for a word; for a CJK run, the
        sum over its bigrams (and phrase) of their documents, since each is a token of the OR query."""
        return sum(self._count(db, part) for part in fts_match_parts([term]))

    def prefetch(self, db: Database, terms: Sequence[str]) -> None:
        """On PostgreSQL, count every uncached expression :meth:`doc_count` and :meth:`scored_matches` will ask
        for, in one statement: one round trip to the server instead of one per term (SQLite counts in-process)."""
        if db.backend != "postgres":
            return
        now = time.monotonic()
        wanted = {fts_match_expression([term]) for term in terms} | set(fts_match_parts(list(terms)))
        missing = sorted(
            e for e in wanted if e and not ((c := self._counts.get(e)) is not None and now - c[0] <= self.ttl_s)
        )
        if not missing:
            return
        counted = ", ".join("(SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?)" for _ in missing)
        try:
            row = db.query_one(f"SELECT {counted}", missing)
        except sqlite3.OperationalError:
            return  # each term is counted on its own then
        if row is None:
            return
        if len(self._counts) > 5000:
            self._counts.clear()
        self._counts.update({e: (now, int(n or 0)) for e, n in zip(missing, tuple(row), strict=True)})

    def _count(self, db: Database, expression: str) -> int:
        if not expression:
            return 0
        now = time.monotonic()
        cached = self._counts.get(expression)
        if cached is not None and now - cached[0] <= self.ttl_s:
            return cached[1]
        try:
            row = db.query_one("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", [expression])
            count = int(row[0]) if row else 0
        except sqlite3.OperationalError:
            count = 0
        if len(self._counts) > 5000:
            self._counts.clear()
        self._counts[expression] = (now, count)
        return count


class MemoryRepository:
    """CRUD over ``memories`` that keeps ``memories_fts`` and ``memory_change_log`` in step."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._term_stats = TermStats()
        self.selective_min_docs = SELECTIVE_TERMS_MIN_DOCS
        self.max_scored_matches = MAX_SCORED_MATCHES

    def insert(self, memory: Memory, source: str) -> None:
        """Insert a new memory, index it and log the creation."""
        self.insert_many([memory], source)

    def insert_many(self, memories: Sequence[Memory], source: str) -> None:
        """Insert new memories, index them and log their creation: three statements for any number of them."""
        rows, fts = [], []
        for memory in memories:
            tags_json = dumps_json(memory.tags, None)
            rows.append(
                (
                    memory.id,
                    memory.user_id,
                    memory.conversation_id,
                    memory.session_id,
                    memory.source_agent,
                    None,
                    memory.status,
                    memory.memory_key,
                    memory.title,
                    memory.content,
                    tags_json,
                    dumps_json(memory.info, None),
                    dumps_json(memory.properties, None),
                    memory.layer,
                    memory.content_hash,
                    memory.version,
                    memory.created_at,
                    memory.updated_at,
                    memory.deleted_at,
                    memory.project_id,
                    memory.source_agent,
                    memory.turn_id,
                    memory.valid_from,
                    memory.valid_to,
                    memory.superseded_by,
                    memory.visibility,
                )
            )
            fts.append((*fts_row(memory.memory_key, memory.title, memory.content, tags_json), memory.id))
        with self.db.transaction() as conn:
            conn.executemany(f"INSERT INTO memories ({_COLUMNS}) VALUES ({','.join('?' * 26)})", rows)
            first = _first_new_rowid(conn, [memory.id for memory in memories])
            if first is None:
                conn.executemany(FTS_INSERT, fts)
            else:
                conn.executemany(FTS_INSERT_AT, [(first + i, row[3], *row[:3]) for i, row in enumerate(fts)])
            append_creations(conn, memories, source)

    def update(self, memory: Memory, before: dict[str, Any], change_type: str, source: str) -> None:
        """Persist a changed memory, re-index it and log before/after."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE memories SET status=?, title=?, memory_value=?, tags_json=?, info_json=?, "
                "properties_json=?, content_hash=?, version=?, updated_at=?, deleted_at=?, valid_from=?, "
                "valid_to=?, superseded_by=?, memory_key=?, visibility=? WHERE id=?",
                (
                    memory.status,
                    memory.title,
                    memory.content,
                    json.dumps(memory.tags, ensure_ascii=False),
                    json.dumps(memory.info, ensure_ascii=False),
                    json.dumps(memory.properties, ensure_ascii=False),
                    memory.content_hash,
                    memory.version,
                    memory.updated_at,
                    memory.deleted_at,
                    memory.valid_from,
                    memory.valid_to,
                    memory.superseded_by,
                    memory.memory_key,
                    memory.visibility,
                    memory.id,
                ),
            )
            conn.execute(FTS_DELETE, (memory.id,))
            if memory.status != "deleted":
                self._index(conn, memory)
            append_change(conn, memory, change_type, before, memory.snapshot(), source)

    def _index(self, conn: sqlite3.Connection, memory: Memory) -> None:
        identifier, value, tags = fts_row(
            memory.memory_key, memory.title, memory.content, json.dumps(memory.tags, ensure_ascii=False)
        )
        conn.execute(FTS_INSERT, (identifier, value, tags, memory.id))

    def get(self, memory_id: str, *, include_deleted: bool = False) -> Memory | None:
        """Fetch one memory; deleted ones only when asked."""
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM memories WHERE id = ?", (memory_id,))
        if row is None or (row["status"] == "deleted" and not include_deleted):
            return None
        return row_to_memory(row)

    def get_any(self, ids: Sequence[str]) -> dict[str, Memory]:
        """Memories by id whatever their status (deleted ones included), keyed by id."""
        found: dict[str, Memory] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            rows = self.db.query(f"SELECT {_COLUMNS} FROM memories WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            found.update((row["id"], row_to_memory(row)) for row in rows)
        return found

    def live_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of these memory keys a memory that is not deleted holds."""
        found: set[str] = set()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            rows = self.db.query(
                f"SELECT memory_key FROM memories WHERE memory_key IN ({','.join('?' * len(chunk))}) "
                "AND status != 'deleted'",
                chunk,
            )
            found.update(row[0] for row in rows)
        return found

    def get_many(self, ids: Sequence[str], flt: MemoryFilter | None = None) -> dict[str, Memory]:
        """Fetch visible memories by id (filtered), keyed by id."""
        if not ids:
            return {}
        where, params = (flt or MemoryFilter()).sql(utc_now())
        found: dict[str, Memory] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            rows = self.db.query(
                f"SELECT {_COLUMNS} FROM memories m WHERE m.id IN ({','.join('?' * len(chunk))}) AND {where}",
                [*chunk, *params],
            )
            for row in rows:
                found[row["id"]] = row_to_memory(row)
        return found

    def trace_ids_of_raw_turns(self, session_id: str, raw_turn_ids: Sequence[str]) -> frozenset[str]:
        """Ids of the session's L1 traces captured from these raw turns."""
        if not raw_turn_ids:
            return frozenset()
        rows = self.db.query(
            "SELECT id FROM memories WHERE session_id = ? AND memory_layer = 'L1' AND "
            f"json_extract(properties_json, '{trace.path(trace.RAW_TURN_ID)}') "
            f"IN ({','.join('?' * len(raw_turn_ids))})",
            [session_id, *raw_turn_ids],
        )
        return frozenset(r["id"] for r in rows)

    def find_duplicate(self, user_id: str, layer: str, digest: str, *, deleted: bool = False) -> Memory | None:
        """An existing live memory with the same content hash in the same layer, if any (``deleted``: a deleted one
        that no later version replaced, the newest)."""
        status, order = ("!= 'deleted'", "created_at")
        if deleted:
            status, order = ("= 'deleted' AND superseded_by IS NULL", "updated_at DESC")
        row = self.db.query_one(
            f"SELECT {_COLUMNS} FROM memories WHERE user_id = ? AND memory_layer = ? AND content_hash = ? "
            f"AND status {status} ORDER BY {order} LIMIT 1",
            (user_id, layer, digest),
        )
        return row_to_memory(row) if row else None

    def fts_search(self, query: str, limit: int, flt: MemoryFilter) -> list[tuple[str, float]]:
        """BM25 full-text search of free text; see :meth:`fts_search_terms`."""
        return self.fts_search_terms(query_terms(query), limit, flt)

    def fts_search_terms(
        self, terms: Sequence[str], limit: int, flt: MemoryFilter, loaded: dict[str, Memory] | None = None
    ) -> list[tuple[str, float]]:
        """BM25 search for any of ``terms``; returns (id, BM25 score > 0, higher is better), best first.

        Ranking happens inside the FTS table alone (the bare ``bm25()`` top window by rowid, ``limit`` x 4); then
        the ranked rows are filtered in rank order, a batch at a time, only until ``limit`` of them pass (usually
        the first batch), so the join to ``memories`` touches about ``limit`` rows, not the whole window. If the
        window runs out first, it widens. In a large store only the most selective terms are scored
        (:meth:`selective_terms`): scoring every row a common word ("run", "test") matches is what makes a
        query slow, and such a word's BM25 weight is small anyway. With ``loaded``, the hits' memories are read
        by the same join that filters them and put there (keyed by id), so the caller need not read them again.
        """
        terms = self.selective_terms(terms)
        expression = fts_match_expression(terms)
        if not expression:
            return []
        where, params = flt.sql(utc_now())
        window = max(limit * 4, 64)
        visible: dict[int, sqlite3.Row | None] = {}
        while True:
            # Rank by rowid alone: selecting the UNINDEXED id here would read every match's stored row.
            try:
                ranked = self.db.query(
                    "SELECT rowid AS r, bm25(memories_fts, 0.0, 2.0, 1.0, 1.5) AS rank FROM memories_fts "
                    "WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
                    [expression, window],
                )
            except sqlite3.OperationalError:
                return []
            if not ranked:
                return []
            order = [(int(row["r"]), -float(row["rank"])) for row in ranked]  # bm25() < 0, more negative = better
            hits = self._first_visible(order, limit, where, params, visible, loaded)
            if len(hits) >= limit or len(ranked) < window or window >= MAX_FTS_WINDOW:
                return hits
            window *= 8

    def _first_visible(
        self,
        ranked: Sequence[tuple[int, float]],
        limit: int,
        where: str,
        params: list[Any],
        visible: dict[int, sqlite3.Row | None],
        loaded: dict[str, Memory] | None = None,
    ) -> list[tuple[str, float]]:
        """The first ``limit`` of the ranked ``(fts rowid, score)`` whose memory passes the filter, as (id, score).

        Rows are checked in rank order, in batches sized to what is still missing (a quarter more, as some fail);
        ``visible`` caches each checked rowid's row (None: filtered out) across a widening window. With
        ``loaded``, each hit's memory is put there too (read by the filtering join; only hits are decoded).
        """
        hits: list[tuple[str, float]] = []
        position = 0
        while position < len(ranked) and len(hits) < limit:
            missing = limit - len(hits)
            batch = [r for r, _score in ranked[position : position + missing + missing // 4 + 8]]
            unchecked = [r for r in batch if r not in visible]
            if unchecked:
                found = self._visible_fts_rows(unchecked, where, params, full=loaded is not None)
                visible.update((r, found.get(r)) for r in unchecked)
            for r, score in ranked[position : position + len(batch)]:
                row = visible[r]
                if row is not None and len(hits) < limit:
                    hits.append((row["id"], score))
                    if loaded is not None and row["id"] not in loaded:
                        loaded[row["id"]] = row_to_memory(row)
            position += len(batch)
        return hits

    def _visible_fts_rows(
        self, rowids: Sequence[int], where: str, params: list[Any], *, full: bool = False
    ) -> dict[int, sqlite3.Row]:
        """``{fts rowid: row}`` for the rows whose memory passes the filter (``where`` on alias ``m``); a row
        holds ``id``, and with ``full`` every column :func:`row_to_memory` reads."""
        columns = _M_COLUMNS if full else "m.id AS id"
        found: dict[int, sqlite3.Row] = {}
        for start in range(0, len(rowids), 500):
            chunk = list(rowids[start : start + 500])
            rows = self.db.query(  # an index row's rowid is its memory's rowid (schema migration 009)
                f"SELECT m.rowid AS r, {columns} FROM memories m "
                f"WHERE m.rowid IN ({','.join('?' * len(chunk))}) AND {where}",
                [*chunk, *params],
            )
            found.update((row["r"], row) for row in rows)
        return found

    def selective_terms(self, terms: Sequence[str]) -> list[str]:
        """In a large store keep the most selective terms, rarest first while they fit the scoring budget.

        At most the 8 rarest, none found in more than 15 % of documents (the two rarest excepted), and, rarest
        first, no more than together match about ``max_scored_matches`` (:data:`MAX_SCORED_MATCHES`) (row, token)
        pairs, a CJK run counted by each of its bigrams (:meth:`TermStats.scored_matches`); the rarest term is
        always kept. A term no document contains costs nothing and takes none of the 8 places (it stays in the
        query: a memory added since it was counted may hold it). BM25 ranking is carried by rare terms, and
        bm25() costs per matched row. Counts come from :class:`TermStats` (cached). In a small store (under
        ``selective_min_docs``, 5,000 documents) every term is kept.
        """
        total = self._term_stats.total(self.db)
        if total < self.selective_min_docs or len(terms) <= 1:
            return list(terms)
        self._term_stats.prefetch(self.db, terms)
        counts = {term: self._term_stats.doc_count(self.db, term) for term in terms}
        ranked = sorted((t for t in terms if counts[t] > 0), key=lambda t: counts[t])
        chosen = [t for t in ranked[:MAX_SELECTIVE_TERMS] if counts[t] <= COMMON_TERM_SHARE * total or t in ranked[:2]]
        keep = {t for t in terms if counts[t] == 0}
        scored = 0
        for position, term in enumerate(chosen):  # rarest first; the rarest is kept whatever it costs
            cost = self._term_stats.scored_matches(self.db, term)
            if position and scored + cost > self.max_scored_matches:
                break
            keep.add(term)
            scored += cost
        return [t for t in terms if t in keep]

    def token_search(
        self,
        terms: Sequence[str],
        limit: int,
        flt: MemoryFilter,
        *,
        order: str = "rank",
        phrases: bool = False,
        loaded: dict[str, Memory] | None = None,
        rank_pool: int | None = None,
    ) -> list[str]:
        """Memories containing any term exactly (as a token or phrase), best-ranked or most recent first.

        "Most recent" uses the FTS rowid, which is the memory's rowid and so grows with every new memory: the
        newest matches come straight off the index without sorting every match. "Best-ranked" is BM25 among the
        newest ``rank_pool`` matches (default :data:`RANKED_TOKEN_POOL`): bm25() costs per matched row, and a
        phrase found in more rows than that no longer tells them apart, so the newest are the ones scored. Only
        rowids come off the index; they are filtered in order, a batch at a time, until ``limit`` pass (as in
        :meth:`fts_search_terms`, ``loaded`` too).
        """
        expression = phrase_match_expression(terms) if phrases else fts_match_expression(terms)
        if not expression:
            return []
        where, params = flt.sql(utc_now())
        window = max(limit * 4, 64)
        pool = RANKED_TOKEN_POOL if rank_pool is None else rank_pool
        visible: dict[int, sqlite3.Row | None] = {}
        while True:
            try:
                if order == "recent":
                    ranked = self.db.query(
                        "SELECT rowid AS r FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
                        [expression, window],
                    )
                else:
                    ranked = self.db.query(
                        "SELECT r FROM (SELECT rowid AS r, rank AS s FROM memories_fts WHERE memories_fts MATCH ? "
                        "ORDER BY rowid DESC LIMIT ?) ORDER BY s LIMIT ?",
                        [expression, max(pool, window), window],
                    )
            except sqlite3.OperationalError:
                return []
            in_order = [(int(row["r"]), 0.0) for row in ranked]
            hits = self._first_visible(in_order, limit, where, params, visible, loaded)
            if len(hits) >= limit or len(ranked) < window or window >= MAX_FTS_WINDOW:
                return [memory_id for memory_id, _score in hits]
            window *= 8

    def neighbours(self, memory: Memory, window: int, flt: MemoryFilter) -> list[Memory]:
        """``memory`` with up to ``window`` visible turns before and after it in its session (same layer),
        in time order; just ``[memory]`` when it has no session."""
        if not memory.session_id or window <= 0:
            return [memory]
        where, params = flt.sql(utc_now())
        row = self.db.query_one("SELECT rowid, created_at FROM memories WHERE id = ?", (memory.id,))
        if row is None:
            return [memory]
        base = f"SELECT {_COLUMNS} FROM memories m WHERE m.session_id = ? AND m.memory_layer = ? AND {where}"
        key = (row["created_at"], row["rowid"])
        before = self.db.query(
            f"{base} AND (m.created_at, m.rowid) < (?, ?) ORDER BY m.created_at DESC, m.rowid DESC LIMIT ?",
            [memory.session_id, memory.layer, *params, *key, window],
        )
        after = self.db.query(
            f"{base} AND (m.created_at, m.rowid) > (?, ?) ORDER BY m.created_at, m.rowid LIMIT ?",
            [memory.session_id, memory.layer, *params, *key, window],
        )
        return [*(row_to_memory(r) for r in reversed(before)), memory, *(row_to_memory(r) for r in after)]

    def session_turn_sizes(
        self, session_ids: Sequence[str], layer: str, flt: MemoryFilter
    ) -> dict[str, list[tuple[str, int, int]]]:
        """``{session id: (id, characters, UTF-8 bytes of the content) of its visible memories of ``layer``}``, each
        in time order (``created_at``, then insertion), as :meth:`neighbours` orders them; one query for all
        sessions, without reading the texts."""
        if not session_ids:
            return {}
        where, params = flt.sql(utc_now())
        rows = self.db.query(
            "SELECT m.id AS id, m.session_id AS session, length(m.memory_value) AS chars, "
            f"length(CAST(m.memory_value AS BLOB)) AS size FROM memories m WHERE m.memory_layer = ? "
            f"AND m.session_id IN ({','.join('?' * len(session_ids))}) AND {where} "
            "ORDER BY m.session_id, m.created_at, m.rowid",
            [layer, *session_ids, *params],
        )
        ordered: dict[str, list[tuple[str, int, int]]] = {}
        for row in rows:
            ordered.setdefault(row["session"], []).append((row["id"], int(row["chars"] or 0), int(row["size"] or 0)))
        return ordered

    def page(
        self,
        flt: MemoryFilter,
        *,
        status: str | None = None,
        text: str | None = None,
        excluded_sources: Sequence[str] = (),
        offset: int = 0,
        limit: int = 20,
    ) -> tuple[list[Memory], int]:
        """Page through memories newest first; ``status`` widens past the visible set."""
        now = utc_now()
        if status:
            where = "m.status = ?"
            params: list[Any] = [status]
            if flt.layers:
                where += f" AND m.memory_layer IN ({','.join('?' * len(flt.layers))})"
                params.extend(flt.layers)
            if flt.source_agent:
                where += " AND m.source_agent = ?"
                params.append(flt.source_agent)
        else:
            where, params = flt.sql(now)
        if excluded_sources:
            where += f" AND m.source_agent NOT IN ({','.join('?' * len(excluded_sources))})"
            params.extend(excluded_sources)
        if text:
            where += " AND (m.memory_value LIKE ? ESCAPE '\\' OR m.title LIKE ? ESCAPE '\\')"
            like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            params.extend([like, like])
        total_row = self.db.query_one(f"SELECT COUNT(*) FROM memories m WHERE {where}", params)
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM memories m WHERE {where} ORDER BY m.updated_at DESC, m.id LIMIT ? OFFSET ?",
            [*params, limit, offset],
        )
        return [row_to_memory(r) for r in rows], int(total_row[0]) if total_row else 0

    def count_by_layer(self) -> dict[str, int]:
        """Visible memories per layer."""
        rows = self.db.query(
            f"SELECT memory_layer, COUNT(*) AS n FROM memories m WHERE {VISIBLE} GROUP BY memory_layer",
            (utc_now(),),
        )
        return {row["memory_layer"]: row["n"] for row in rows}

    def source_distribution(self) -> list[tuple[str, int]]:
        """Visible memories per source agent, largest first."""
        rows = self.db.query(
            f"SELECT source_agent, COUNT(*) AS n FROM memories m WHERE {VISIBLE} GROUP BY source_agent ORDER BY n DESC",
            (utc_now(),),
        )
        return [(row["source_agent"], row["n"]) for row in rows]

    def daily_counts(self, since: str, layers: Sequence[str] = ()) -> dict[str, int]:
        """Memories created per UTC day since ``since`` (ISO date)."""
        sql = "SELECT substr(created_at, 1, 10) AS day, COUNT(*) AS n FROM memories WHERE created_at >= ?"
        params: list[Any] = [since]
        if layers:
            sql += f" AND memory_layer IN ({','.join('?' * len(layers))})"
            params.extend(layers)
        rows = self.db.query(sql + " GROUP BY day", params)
        return {row["day"]: row["n"] for row in rows}

    def mark_index_ready(self, memory_id: str) -> None:
        """Make an imported memory recallable once its index is complete (a processing flag, not an edit)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE memories SET info_json = json_remove(info_json, '$.importPending') "
                "WHERE id = ? AND json_extract(info_json, '$.importPending') IS NOT NULL",
                (memory_id,),
            )

    def ids_by_session(self, session_id: str) -> list[str]:
        """Ids of live memories written in a session."""
        rows = self.db.query("SELECT id FROM memories WHERE session_id = ? AND status != 'deleted'", (session_id,))
        return [row["id"] for row in rows]

    def find_by_key(self, layer: str, memory_key: str) -> Memory | None:
        """The live (not deleted) memory of a layer with this key, newest first."""
        row = self.db.query_one(
            f"SELECT {_COLUMNS} FROM memories WHERE memory_layer = ? AND memory_key = ? AND status != 'deleted' "
            "ORDER BY updated_at DESC LIMIT 1",
            (layer, memory_key),
        )
        return row_to_memory(row) if row is not None else None

    def by_layer(
        self, layer: str, statuses: Sequence[str] = ("activated", "resolving"), limit: int = 1000
    ) -> list[Memory]:
        """Memories of one layer in the given statuses, most recently updated first (evolution scans)."""
        rows = self.db.query(
            f"SELECT {_COLUMNS} FROM memories WHERE memory_layer = ? AND status IN ({','.join('?' * len(statuses))}) "
            "ORDER BY updated_at DESC LIMIT ?",
            (layer, *statuses, limit),
        )
        return [row_to_memory(r) for r in rows]
