"""The vector channel on PostgreSQL: pgvector, an HNSW index, the database asked instead of an in-memory index.

``memory_vector_entries`` keeps the float32 blobs both backends store. On PostgreSQL a trigger mirrors every
written row into ``memory_vector_ann`` as a pgvector ``vector`` (the blob's floats, decoded in SQL, so every path
that writes a vector row (the worker, a copy, an import, another daemon) keeps it current, and a deleted row
goes with its entry). Each embedding dimension gets a partial HNSW index (``vector_cosine_ops``) over it.

:class:`PgVectorIndex` answers what :class:`memmy.store.vectors.VectorIndex` answers, from the database: the top
memories per layer by ``ORDER BY embedding <=> query LIMIT n`` (iterative scan in relaxed order, so the scope
filters on ``memories`` never starve the result), scored ``1 - distance``: the same cosine the in-memory index
gives, so fusion and the turn-start gates see the same numbers on both backends. Nothing is loaded into the
daemon: several daemons share one index, and a vector written by one is searched by all at once.

The table is an index, not data: copies, exports and wipes leave it out (:func:`memmy.store.copy.tables`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

import numpy as np

from memmy.store.db import utc_now
from memmy.store.vectors import Vector, VectorIndex, VectorMeta, merged_layers

log = logging.getLogger("memmy.store")

ANN_TABLE: Final = "memory_vector_ann"
#: The advisory lock held while an HNSW index is built (next to memmy.store.pg's write and migration locks).
HNSW_LOCK_KEY: Final = 0x6D656D6D79 + 2
#: Candidates HNSW keeps per search (pgvector's default is 40): at 10k near-duplicate rows 100 found 95% of the exact
#: top 20, 200 all of it, in the same time.
EF_SEARCH: Final = 200
#: What each pool connection sets (the placeholders are taken when the extension loads).
SESSION_SETTINGS: Final = f"SET hnsw.ef_search = {EF_SEARCH}; SET hnsw.iterative_scan = relaxed_order"

#: A little-endian float32 blob as a ``vector``: each word's sign, exponent and mantissa, exactly (the values
#: are float32, so the double computed is the float32 itself).
BLOB_TO_VECTOR: Final = """CREATE OR REPLACE FUNCTION memmy_blob_vector(b bytea) RETURNS vector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT array_agg(
  (CASE WHEN e = 0 THEN m * 2.0::float8 ^ (-149) ELSE (8388608 + m) * 2.0::float8 ^ (e - 150) END)
  * (CASE WHEN s = 1 THEN -1 ELSE 1 END) ORDER BY i)::real[]::vector
FROM (SELECT i, (w >> 31) & 1 AS s, ((w >> 23) & 255)::int AS e, (w & 8388607)::float8 AS m
      FROM (SELECT i, get_byte(b, 4 * i)::bigint | (get_byte(b, 4 * i + 1)::bigint << 8)
                    | (get_byte(b, 4 * i + 2)::bigint << 16) | (get_byte(b, 4 * i + 3)::bigint << 24) AS w
            FROM generate_series(0, length(b) / 4 - 1) AS i) AS words) AS parts
$$"""

ANN_DDL: Final = (
    f"CREATE TABLE IF NOT EXISTS {ANN_TABLE} (entry_id BIGINT PRIMARY KEY REFERENCES memory_vector_entries(id) "
    'ON DELETE CASCADE, memory_id TEXT COLLATE "C" NOT NULL, vector_field TEXT COLLATE "C" NOT NULL, '
    'embedding_provider TEXT COLLATE "C" NOT NULL, embedding_model TEXT COLLATE "C" NOT NULL, '
    " embedding_dim INTEGER NOT NULL, embedding vector NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {ANN_TABLE}_memory ON {ANN_TABLE}(memory_id)",
    f"""CREATE OR REPLACE FUNCTION memmy_vector_ann_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {ANN_TABLE}(entry_id, memory_id, vector_field, embedding_provider, embedding_model, embedding_dim,
                          embedding)
  VALUES (NEW.id, NEW.memory_id, NEW.vector_field, NEW.embedding_provider, NEW.embedding_model, NEW.embedding_dim,
          memmy_blob_vector(NEW.embedding))
  ON CONFLICT (entry_id) DO UPDATE SET memory_id = EXCLUDED.memory_id, vector_field = EXCLUDED.vector_field,
    embedding_provider = EXCLUDED.embedding_provider, embedding_model = EXCLUDED.embedding_model,
    embedding_dim = EXCLUDED.embedding_dim, embedding = EXCLUDED.embedding;
  RETURN NULL;
END $$""",
    "CREATE OR REPLACE TRIGGER memory_vector_ann_sync AFTER INSERT OR UPDATE ON memory_vector_entries "
    "FOR EACH ROW EXECUTE FUNCTION memmy_vector_ann_sync()",
)
#: Rows written before the table existed (a store made by an older memmy): mirrored once, when it is created.
ANN_BACKFILL: Final = (
    f"INSERT INTO {ANN_TABLE}(entry_id, memory_id, vector_field, embedding_provider, embedding_model, "
    "embedding_dim, embedding) SELECT id, memory_id, vector_field, embedding_provider, embedding_model, "
    "embedding_dim, memmy_blob_vector(embedding) FROM memory_vector_entries ON CONFLICT (entry_id) DO NOTHING"
)
FIELDS: Final = ("vec_summary", "vec", "vec_action")
#: The trigger that writes the mirror (a bulk copy turns it off for its transaction and calls :func:`copy_mirror`).
ANN_TRIGGER: Final = "memory_vector_ann_sync"
#: The vector rows :func:`copy_mirror` takes, in this order (on either engine).
MIRROR_SOURCE: Final = (
    "SELECT id, memory_id, vector_field, embedding_provider, embedding_model, embedding_dim, embedding "
    "FROM memory_vector_entries ORDER BY id"
)
_MIRROR_COLUMNS: Final = (
    "entry_id",
    "memory_id",
    "vector_field",
    "embedding_provider",
    "embedding_model",
    "embedding_dim",
    "embedding",
)
_MIRROR_TYPES: Final = ("int8", "text", "text", "text", "text", "int4", "vector")


def copy_mirror(raw: Any, rows: Iterable[Sequence[Any]]) -> int:
    """Write the mirror rows of ``rows`` (:data:`MIRROR_SOURCE`'s columns) with one binary ``COPY``: each blob
    read as little-endian float32 in numpy and sent as pgvector's binary ``vector`` (the same floats the trigger's
    :data:`BLOB_TO_VECTOR` writes, bit for bit, without decoding them in SQL). ``raw``: a psycopg connection inside
    the transaction that loaded the rows; returns the number written."""
    from pgvector.psycopg.vector import register_vector_info
    from psycopg.types import TypeInfo

    count = 0
    with raw.cursor() as cursor:  # the vector adapter on this cursor only: the pool's connections stay as they are
        register_vector_info(cursor, TypeInfo.fetch(raw, "vector"))
        listed = ", ".join(_MIRROR_COLUMNS)
        with cursor.copy(f"COPY {ANN_TABLE} ({listed}) FROM STDIN (FORMAT BINARY)".encode()) as copy:
            copy.set_types(list(_MIRROR_TYPES))
            for entry_id, memory_id, field, provider, model, dim, blob in rows:
                copy.write_row(
                    (entry_id, memory_id, field, provider, model, dim, np.frombuffer(bytes(blob), dtype="<f4"))
                )
                count += 1
    return count


class PooledDatabase(Protocol):
    """What this module needs of :class:`memmy.store.pg.PgDatabase`: its psycopg connection pool."""

    @property
    def pool(self) -> Any:
        """The pool (``psycopg_pool.ConnectionPool``)."""


def install(raw: Any) -> bool:
    """Create pgvector's extension, the mirror table, its trigger and (first time only) its rows on the psycopg
    connection ``raw`` (autocommit); False when the server has no pgvector (the in-memory index is used then)."""
    import psycopg

    try:
        raw.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.Error as exc:
        log.warning("pgvector is not available on this server (%s): vectors are searched in each daemon", exc)
        return False
    with raw.transaction():
        # The table whose writes fire the mirror first, as a writer locks them (no deadlock with a daemon's write).
        raw.execute(b"LOCK TABLE memory_vector_entries IN SHARE ROW EXCLUSIVE MODE")
        row = raw.execute("SELECT to_regclass(%s) IS NULL", (ANN_TABLE,)).fetchone()
        fresh = bool(row and row[0])
        raw.execute(BLOB_TO_VECTOR.encode())
        for statement in ANN_DDL:
            raw.execute(statement.encode())
        if fresh:
            raw.execute(ANN_BACKFILL.encode())
    return True


def hnsw_index_name(dim: int) -> str:
    """The name of the HNSW index over the vectors of dimension ``dim``."""
    return f"{ANN_TABLE}_hnsw_{int(dim)}"


def ensure_hnsw(db: PooledDatabase, dim: int, maintenance_mem: str = "256MB") -> bool:
    """Create the HNSW index (cosine) over the vectors of dimension ``dim`` unless it exists; True when it was
    built now (that takes a while on a large store: the bench times it)."""
    name = hnsw_index_name(dim)
    with db.pool.connection() as raw:
        row = raw.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        if row and row[0]:
            return False
        raw.execute("SELECT pg_advisory_lock(%s)", (HNSW_LOCK_KEY,))  # daemons starting at once build it once
        try:
            row = raw.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
            if row and row[0]:
                return False
            log.info("building the HNSW index %s (a large store takes minutes)", name)
            raw.execute(f"SET maintenance_work_mem = '{maintenance_mem}'".encode())
            raw.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {ANN_TABLE} USING hnsw ((embedding::vector({int(dim)})) "
                f"vector_cosine_ops) WHERE embedding_dim = {int(dim)}".encode()
            )
            raw.execute(b"RESET maintenance_work_mem")
        finally:
            raw.execute("SELECT pg_advisory_unlock(%s)", (HNSW_LOCK_KEY,))
    return True


def vector_literal(vector: Vector) -> str:
    """pgvector's text form of ``vector`` (float32 values, written so that they read back the same)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32).tolist()) + "]"


class PgVectorIndex(VectorIndex):
    """:class:`VectorIndex`'s reads answered by pgvector on the shared database (see the module doc); its
    writes are no-ops, since the trigger keeps the index with the vector rows."""

    def __init__(self, db: PooledDatabase, dim: int, provider: str, model: str) -> None:  # noqa: D107
        super().__init__(dim, capacity=1)
        self.db, self.provider, self.model = db, provider, model
        self._count: tuple[float, int] = (-1e9, 0)
        self._count_lock = threading.Lock()
        ensure_hnsw(db, dim)

    # --- writes: the database keeps the index -------------------------------------------------------------------

    def upsert(self, memory_id: str, field: str, vector: Vector, meta: VectorMeta | None = None) -> None:
        """Nothing to do: the vector row's trigger indexed it."""
        if vector.shape != (self.dim,):
            raise ValueError(f"vector has shape {vector.shape}, index expects ({self.dim},)")
        with self._count_lock:
            self._count = (-1e9, self._count[1])

    def bulk_load(self, items: Iterable[tuple[str, str, Vector, VectorMeta]], chunk_rows: int = 1024) -> None:
        """Nothing to load: the database holds the index."""

    def remove(self, memory_id: str) -> None:
        """Nothing to do: a search only sees activated, current memories."""

    # --- reads --------------------------------------------------------------------------------------------------

    def _where(self, alias: str = "a") -> tuple[str, list[Any]]:
        return (
            f"{alias}.embedding_dim = {int(self.dim)} AND {alias}.embedding_provider = %s "
            f"AND {alias}.embedding_model = %s AND m.status = 'activated' AND (m.valid_to IS NULL OR m.valid_to > %s)",
            [self.provider, self.model, utc_now()],
        )

    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        # prepared on the connection from its second run there (the pool's threshold): the query vector is a
        # parameter, so a turn's HNSW statement is planned once (~0.8 ms of a ~3 ms search at 100k)
        with self.db.pool.connection() as raw:
            return list(raw.execute(sql.encode(), params).fetchall())

    def __len__(self) -> int:
        """Vector rows of this fingerprint (an estimate on a large store; 0 exactly when there are none), read
        at most every ten seconds."""
        now = time.monotonic()
        with self._count_lock:
            at, count = self._count
        if now - at <= 10.0:
            return count
        rows = self._rows(
            f"SELECT EXISTS (SELECT 1 FROM {ANN_TABLE} WHERE embedding_dim = {int(self.dim)} AND "
            f"embedding_provider = %s AND embedding_model = %s), (SELECT reltuples::bigint FROM pg_class "
            f"WHERE oid = '{ANN_TABLE}'::regclass)",
            (self.provider, self.model),
        )
        exists, estimate = rows[0] if rows else (False, 0)
        count = max(1, int(estimate or 0)) if exists else 0
        with self._count_lock:
            self._count = (now, count)
        return count

    def contains(self, memory_id: str) -> bool:
        """True when the memory is recallable and has a vector of this fingerprint (as the in-memory index holds
        only those: an archived or superseded memory is not in it)."""
        return bool(self.having_vectors([memory_id]))

    def having_vectors(self, memory_ids: Iterable[str]) -> set[str]:
        """The listed memories that have a vector of this fingerprint (one statement)."""
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return set()
        where, params = self._where()
        rows = self._rows(
            f"SELECT DISTINCT a.memory_id FROM {ANN_TABLE} a JOIN memories m ON m.id = a.memory_id "
            f"WHERE a.memory_id = ANY(%s) AND {where}",
            [ids, *params],
        )
        return {str(row[0]) for row in rows}

    def vector(self, memory_id: str) -> Vector | None:
        """The memory's first stored vector (summary, then vec, then action), or None."""
        return self.vectors([memory_id]).get(memory_id)

    def vectors(self, memory_ids: Iterable[str]) -> dict[str, Vector]:
        """:meth:`vector` of each listed memory that has one (one statement)."""
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return {}
        where, params = self._where()
        rows = self._rows(
            f"SELECT a.memory_id, a.vector_field, a.embedding::real[] FROM {ANN_TABLE} a JOIN memories m "
            f"ON m.id = a.memory_id WHERE a.memory_id = ANY(%s) AND {where}",
            [ids, *params],
        )
        found: dict[str, tuple[int, Vector]] = {}
        for memory_id, field, values in rows:
            rank = FIELDS.index(field) if field in FIELDS else len(FIELDS)
            if memory_id not in found or rank < found[memory_id][0]:
                found[memory_id] = (rank, np.asarray(values, dtype=np.float32))
        return {memory_id: vector for memory_id, (_rank, vector) in found.items()}

    def similarities(self, memory_ids: Iterable[str], query: Vector) -> dict[str, float]:
        """Cosine of ``query`` with each listed recallable memory that has a vector (best field)."""
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return {}
        where, params = self._where()
        rows = self._rows(
            f"SELECT a.memory_id, 1 - (a.embedding <=> %s::vector) FROM {ANN_TABLE} a JOIN memories m "
            f"ON m.id = a.memory_id WHERE a.memory_id = ANY(%s) AND {where}",
            [vector_literal(query), ids, *params],
        )
        found: dict[str, float] = {}
        for memory_id, score in rows:
            if float(score) > found.get(memory_id, -np.inf):
                found[memory_id] = float(score)
        return found

    def search_layers(
        self,
        query: Vector,
        pools: dict[str, int],
        *,
        project_id: str | None = None,
        source: str | None = None,
        merge: bool = False,
    ) -> dict[str, list[tuple[str, float]]]:
        """Top memories per layer (``{"L1": 20, ...}``; ``"*"`` = any layer): one HNSW query per layer, all in
        one statement. The filters are :meth:`VectorIndex.search_layers`' (project scope: the project's memories
        and those every project sees; source), applied while the index is walked."""
        if not pools:
            return {"*": []}
        where, base = self._where()
        if project_id is not None:
            where += " AND (m.project_id = %s OR m.project_id IS NULL OR m.visibility = 'global')"
            base.append(project_id)
        if source is not None:
            where += " AND COALESCE(m.source_agent, 'unknown') = %s"
            base.append(source)
        literal = vector_literal(query)
        distance = f"a.embedding::vector({int(self.dim)}) <=> %s::vector({int(self.dim)})"
        parts: list[str] = []
        params: list[Any] = []
        for name, k in pools.items():
            layer = "" if name == "*" else " AND m.memory_layer = %s"
            parts.append(
                f"(SELECT %s::text AS pool, a.memory_id, {distance} AS d FROM {ANN_TABLE} a JOIN memories m "
                f"ON m.id = a.memory_id WHERE {where}{layer} ORDER BY {distance} LIMIT {max(0, int(k)) * 2})"
            )
            params += [name, literal, *base, *([name] if layer else []), literal]
        found: dict[str, dict[str, float]] = {name: {} for name in pools}
        for pool, memory_id, d in sorted(self._rows(" UNION ALL ".join(parts), params), key=lambda row: row[2]):
            best = found[pool]
            if memory_id not in best and len(best) < pools[pool]:
                best[memory_id] = 1.0 - float(d)
        results = {name: list(best.items()) for name, best in found.items()}
        if merge:
            results["*"] = merged_layers(results, max(pools.values()))
        results.setdefault("*", [])
        return results
