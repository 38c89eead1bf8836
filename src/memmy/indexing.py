"""Keeps vectors in step with memories: the background embedding worker and the in-memory index.

The worker drains the durable embedding queue in batches, writes stamped vectors, updates the
in-memory index and marks each memory ``ready``. At start-up it loads every vector of the current
fingerprint into the index and re-queues memories whose vectors came from another provider, model or
dimension, so a change of embedding model re-embeds in the background instead of mixing spaces.

Key-graph keys have vectors too: every surface form (canonical and aliases) is embedded, stamped with the
fingerprint, and kept in its own small in-memory matrix (:class:`KeyVectorIndex`). New keys are embedded
when they are created; at start-up (or after a model change) surfaces without a vector of the current
fingerprint are re-embedded by the same worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from memmy.embed import Embedder
from memmy.embed.scale import Between, SimilarityScale, similarity_scale
from memmy.errors import MemmyError
from memmy.kinds import memory as stored
from memmy.store.db import utc_now
from memmy.store.pgvectors import PgVectorIndex, PooledDatabase
from memmy.store.queue import QueueItem
from memmy.store.text import without_markers
from memmy.store.unit import Store
from memmy.store.vectors import Vector, VectorIndex, meta_of

log = logging.getLogger("memmy.indexing")

FIELD_BY_LAYER = {"L1": "vec_summary", "L2": "vec", "L3": "vec", "Skill": "vec"}
KIND_BY_LAYER = {"L1": "trace", "L2": "policy", "L3": "world_model", "Skill": "skill"}
KEY_BATCH = 64
RECENT_QUERIES = 8  # query vectors kept by Indexer.embed_query (a turn start embeds its prompt twice)


@dataclass(frozen=True)
class KeySurface:
    """One surface form of a key to embed."""

    key_id: str
    norm: str
    text: str
    user_id: str
    key_type: str


class KeyVectorIndex:
    """Exact cosine search over the vectors of key surface forms (canonical names and aliases)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.RLock()
        self._matrix: Vector = np.zeros((0, dim), dtype=np.float32)
        self._rows: list[tuple[str, str, str, str]] = []  # key id, norm, user id, key type
        self._pos: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def upsert(self, key_id: str, norm: str, user_id: str, key_type: str, vector: Vector) -> None:
        """Insert or replace the vector of one surface."""
        if vector.shape != (self.dim,):
            raise ValueError(f"key vector has shape {vector.shape}, index expects ({self.dim},)")
        with self._lock:
            row = self._pos.get((key_id, norm))
            if row is None:
                row = len(self._rows)
                self._rows.append((key_id, norm, user_id, key_type))
                self._pos[(key_id, norm)] = row
                if self._matrix.shape[0] <= row:
                    grown = np.zeros((max(16, (row + 1) * 2), self.dim), dtype=np.float32)
                    grown[: self._matrix.shape[0]] = self._matrix
                    self._matrix = grown
            else:
                self._rows[row] = (key_id, norm, user_id, key_type)
            self._matrix[row] = vector

    def search(
        self,
        query: Vector,
        user_id: str,
        k: int,
        *,
        concept_only: bool = True,
        usable: Callable[[str], bool] | None = None,
    ) -> list[tuple[str, str, float]]:
        """Best (key id, matching surface norm, cosine) per key, best first (``usable``: which surfaces count)."""
        with self._lock:
            n = len(self._rows)
            if n == 0 or k <= 0:
                return []
            scores = self._matrix[:n] @ query.astype(np.float32, copy=False)
            best: dict[str, tuple[str, float]] = {}
            for i in np.argsort(-scores).tolist():
                key_id, norm, owner, key_type = self._rows[i]
                if owner != user_id or (concept_only and key_type != "concept") or key_id in best:
                    continue
                if usable is not None and not usable(norm):
                    continue
                best[key_id] = (norm, float(scores[i]))
                if len(best) >= k:
                    break
        return [(key_id, norm, score) for key_id, (norm, score) in best.items()]

    def similarity(self, query: Vector, key_id: str) -> float | None:
        """Highest cosine between ``query`` and any surface of a key (None when the key has no vector)."""
        with self._lock:
            rows = [i for i, row in enumerate(self._rows) if row[0] == key_id]
            if not rows:
                return None
            return float(np.max(self._matrix[rows] @ query.astype(np.float32, copy=False)))


@dataclass
class ReembedProgress:
    """Progress of a background re-embedding after a fingerprint change."""

    total: int = 0
    queued_at: float = 0.0
    from_fingerprints: list[dict[str, object]] = field(default_factory=list)


class Indexer:
    """Owns the vector index and the worker thread that fills it."""

    def __init__(
        self,
        embedder_factory: Callable[[], Embedder],
        store: Store,
        batch_size: int = 32,
    ) -> None:
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self.memories = store.memories
        self.vectors = store.vectors
        self.queue = store.queue
        self.batch_size = batch_size
        self.index: VectorIndex | None = None
        self.keys = store.keys
        self.key_index: KeyVectorIndex | None = None
        self._keys_dirty = True
        self.reembed = ReembedProgress()
        self.last_error: str | None = None
        self.last_ok_at_iso: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._recent_queries: dict[tuple[int, str], Vector] = {}
        self._recent_lock = threading.Lock()
        #: On a store other daemons share (PostgreSQL), the last vector row this index has taken in.
        self._shared = store.backend == "postgres"
        self._db = store.db
        self._seen_vector_id = 0

    @property
    def embedder(self) -> Embedder:
        """The embedder, created on first use."""
        with self._lock:
            if self._embedder is None:
                self._embedder = self._embedder_factory()
            return self._embedder

    def cosine_scale(self, between: Between) -> SimilarityScale:
        """How a cosine of the model that made the vectors reads on all-MiniLM-L6-v2's scale, which memmy's
        thresholds are written in (see :mod:`memmy.embed.scale`): ``between`` a query and a stored text
        (recall) or two stored texts (evolution, Dream); MiniLM's own (the identity) when no embedder can be
        had, as then no cosine is taken either."""
        try:
            fingerprint = self.embedder.fingerprint
        except MemmyError:
            return SimilarityScale()
        return similarity_scale(fingerprint.provider, fingerprint.model, between)

    def replace_embedder(self, factory: Callable[[], Embedder]) -> None:
        """Swap the embedding backend (config reload) and rebuild the index for its fingerprint."""
        with self._lock:
            self._embedder_factory = factory
            self._embedder = None
        with self._recent_lock:
            self._recent_queries.clear()
        self.load_index()
        self._wake.set()

    def load_index(self) -> None:
        """Build the in-memory index from stored vectors and queue re-embedding of stale ones."""
        try:
            fingerprint = self.embedder.fingerprint
        except MemmyError as exc:
            self.last_error = exc.message
            log.warning("embedding backend unavailable, vector search disabled: %s", exc.message)
            self.index = None
            return
        if self._shared and getattr(self._db, "has_vector", False):
            # pgvector: the database is the index (HNSW), shared by every daemon; nothing is loaded here
            self.index = PgVectorIndex(
                cast(PooledDatabase, self._db), fingerprint.dim, fingerprint.provider, fingerprint.model
            )
        else:
            index = VectorIndex(fingerprint.dim)
            if self._shared:
                self._seen_vector_id = self.vectors.last_id()  # rows written meanwhile are taken in twice: harmless
            index.bulk_load(self.vectors.iter_current(fingerprint.provider, fingerprint.model, fingerprint.dim))
            self.index = index
        key_index = KeyVectorIndex(fingerprint.dim)
        for key_id, norm, user_id, key_type, vector in self.keys.iter_vectors(
            fingerprint.provider, fingerprint.model, fingerprint.dim
        ):
            key_index.upsert(key_id, norm, user_id, key_type, vector)
        self.key_index = key_index
        self._keys_dirty = True  # surfaces of another fingerprint (or never embedded) are re-embedded by the worker
        stale = self.vectors.stale_memory_ids(fingerprint.provider, fingerprint.model, fingerprint.dim)
        if stale:
            self.reembed = ReembedProgress(len(stale), time.time(), self.vectors.fingerprints())
            log.info("re-embedding %d memories for %s", len(stale), fingerprint.key())
            for memory_id in stale:
                memory = self.memories.get(memory_id)
                if memory is not None:
                    self.enqueue(
                        memory_id,
                        memory.layer,
                        embedding_text(memory.layer, memory.title, memory.content, memory.properties),
                    )

    def enqueue(self, memory_id: str, layer: str, text: str) -> None:
        """Queue one memory for embedding and wake the worker."""
        self.queue.enqueue(KIND_BY_LAYER[layer], memory_id, FIELD_BY_LAYER[layer], text)
        self._wake.set()

    def enqueue_many(self, items: Sequence[tuple[str, str, str]]) -> None:
        """Queue many ``(memory id, layer, text)`` for embedding at once and wake the worker."""
        self.queue.enqueue_many([(KIND_BY_LAYER[lay], mid, FIELD_BY_LAYER[lay], text) for mid, lay, text in items])
        self._wake.set()

    def unindex(self, memory_id: str) -> None:
        """Take a memory out of the in-memory index only (archived or superseded: kept, never recalled)."""
        if self.index is not None:
            self.index.remove(memory_id)

    def forget(self, memory_id: str) -> None:
        """Drop a deleted memory from the index, the vector table and the queue."""
        if self.index is not None:
            self.index.remove(memory_id)
        self.vectors.delete_for(memory_id)
        self.queue.drop(memory_id)

    def embed_texts(self, texts: list[str]) -> Vector | None:
        """Embed documents now, outside any queue; None when the backend fails."""
        try:
            vectors = self.embedder.embed(texts, role="document")
        except MemmyError as exc:
            self.last_error = exc.message
            return None
        matrix: Vector = np.asarray(vectors, dtype=np.float32)
        return matrix

    def put_key_vector(self, surface: KeySurface, vector: Vector) -> None:
        """Store and index the vector of one key surface under the current fingerprint."""
        fingerprint = self.embedder.fingerprint
        if self.key_index is None or self.key_index.dim != fingerprint.dim:
            self.key_index = KeyVectorIndex(fingerprint.dim)
        self.keys.upsert_vector(surface.key_id, surface.norm, fingerprint.provider, fingerprint.model, vector)
        self.key_index.upsert(surface.key_id, surface.norm, surface.user_id, surface.key_type, vector)

    def embed_key_surfaces(self, surfaces: list[KeySurface]) -> bool:
        """Embed key surfaces now (stamped, stored, indexed); False when the backend failed (retried later)."""
        if not surfaces:
            return True
        vectors = self.embed_texts([s.text for s in surfaces])
        if vectors is None:
            self._keys_dirty = True
            return False
        for surface, vector in zip(surfaces, vectors, strict=True):
            self.put_key_vector(surface, vector)
        return True

    def refresh_keys(self, limit: int = KEY_BATCH) -> int:
        """Embed key surfaces that have no vector of the current fingerprint; returns how many were embedded."""
        if not self._keys_dirty:
            return 0
        try:
            fingerprint = self.embedder.fingerprint
        except MemmyError:
            return 0
        pending = self.keys.surfaces_to_embed(fingerprint.provider, fingerprint.model, fingerprint.dim, limit)
        if not pending:
            self._keys_dirty = False
            return 0
        rows = self.keys.keys([key_id for key_id, _norm, _text in pending])
        surfaces = [
            KeySurface(key_id, norm, text, rows[key_id].user_id, rows[key_id].key_type)
            for key_id, norm, text in pending
            if key_id in rows
        ]
        if not self.embed_key_surfaces(surfaces):
            return 0
        return len(surfaces)

    def embed_query(self, text: str) -> Vector | None:
        """Embed a search query; None when the backend fails (search continues text-only).

        The last few query vectors are kept whatever the embedder's own cache does: a turn start embeds its
        prompt for recall and again for episode routing, and the second must not cost another model run.
        """
        embedder = self.embedder
        key = (id(embedder), text)
        with self._recent_lock:
            recent = self._recent_queries.get(key)
        if recent is not None:
            return recent
        try:
            vectors = embedder.embed([text], role="query")
        except MemmyError as exc:
            self.last_error = exc.message
            return None
        vector: Vector = np.asarray(vectors[0], dtype=np.float32)
        with self._recent_lock:
            self._recent_queries[key] = vector
            while len(self._recent_queries) > RECENT_QUERIES:
                self._recent_queries.pop(next(iter(self._recent_queries)))
        return vector

    def run_once(self, limit: int | None = None) -> tuple[int, int]:
        """Embed one batch of due queue rows; returns (succeeded, failed)."""
        items = self.queue.claim_due(limit or self.batch_size, worker=f"pid-{threading.get_ident()}")
        if not items:
            self.catch_up()
            return self.refresh_keys(), 0
        try:
            embedder = self.embedder
            # a redaction marker's words ("aws", "key", "password") are not what the memory is about
            vectors = embedder.embed([without_markers(item.source_text) for item in items], role="document")
            fingerprint = embedder.fingerprint
        except MemmyError as exc:
            return 0, self._fail_all(items, exc.message)
        except Exception as exc:  # noqa: BLE001 - a backend bug must not kill the worker
            return 0, self._fail_all(items, f"{type(exc).__name__}: {exc}")
        ok = 0
        for item, row in zip(items, vectors, strict=True):
            vector: Vector = np.asarray(row, dtype=np.float32)
            memory = self.memories.get(item.target_id)
            if memory is None:
                self.queue.drop(item.target_id)
                continue
            if not self.vectors.upsert(
                item.target_id, item.vector_field, fingerprint.provider, fingerprint.model, vector
            ):
                self.queue.drop(item.target_id)  # deleted while its vector was computed
                continue
            if self.index is None or self.index.dim != fingerprint.dim:
                self.load_index()  # the backend came up (or changed dimension): load every stored vector
            if self.index is None:
                self.index = VectorIndex(fingerprint.dim)
            meta = meta_of(memory.layer, memory.project_id, memory.visibility, memory.source_agent)
            self.index.upsert(item.target_id, item.vector_field, vector, meta)
            self.queue.succeed(item)
            if memory.info.get("importPending"):
                self.memories.mark_index_ready(item.target_id)
            ok += 1
        self.last_ok_at_iso = utc_now()
        self.last_error = None
        return ok, 0

    def catch_up(self) -> int:
        """On a store other daemons share: take the vectors they stored since the last look into this index (the
        idle worker looks about once a second); returns how many. Nothing to do on SQLite (one daemon)."""
        if not self._shared or self.index is None or isinstance(self.index, PgVectorIndex):
            return 0  # (a pgvector index is the database itself: nothing to take in)
        fingerprint = self.embedder.fingerprint
        taken = 0
        while True:
            last, rows = self.vectors.current_after(
                self._seen_vector_id, fingerprint.provider, fingerprint.model, fingerprint.dim
            )
            if not rows:
                return taken
            for memory_id, field_name, vector, meta in rows:
                self.index.upsert(memory_id, field_name, vector, meta)
            self._seen_vector_id = last
            taken += len(rows)

    def _fail_all(self, items: list[QueueItem], message: str) -> int:
        self.last_error = message
        log.warning("embedding batch of %d failed: %s", len(items), message)
        for item in items:
            if self.queue.fail(item, message):
                self.memories.mark_index_ready(item.target_id)  # give up on the vector, keep text search
        return len(items)

    def drain(self, timeout_s: float = 60.0) -> None:
        """Process the queue until nothing is due (tests, benches, CLI ``worker run``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done, failed = self.run_once()
            if done == 0 and failed == 0:
                return

    def start(self) -> None:
        """Start the background worker thread."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="memmy-embedder", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to finish its current batch and stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                done, failed = self.run_once()
            except Exception:  # noqa: BLE001 - keep the worker alive; the queue keeps the work
                log.exception("embedding worker iteration failed")
                done, failed = 0, 0
            if done == 0 and failed == 0:
                self._wake.wait(timeout=1.0)
                self._wake.clear()


def embedding_text(layer: str, title: str, content: str, properties: dict[str, object]) -> str:
    """The text a memory is embedded from (L1: summary + original exchange; others: title + body)."""
    prepared = stored.embedding_text(properties)
    if prepared:
        return prepared
    return f"{title}\n{content}".strip()[:3000]
