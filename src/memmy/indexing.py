"""Keeps vectors in step with memories: the background embedding worker and the in-memory index.

The worker drains the durable embedding queue in batches, writes stamped vectors, updates the
in-memory index and marks each memory ``ready``. At start-up it loads every vector of the current
fingerprint into the index and re-queues memories whose vectors came from another provider, model or
dimension, so a change of embedding model re-embeds in the background instead of mixing spaces.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from memmy.embed import Embedder
from memmy.errors import MemmyError
from memmy.store.db import utc_now
from memmy.store.memories import MemoryRepository
from memmy.store.queue import EmbeddingQueue, QueueItem
from memmy.store.vectors import Vector, VectorIndex, VectorRepository, meta_of

log = logging.getLogger("memmy.indexing")

FIELD_BY_LAYER = {"L1": "vec_summary", "L2": "vec", "L3": "vec", "Skill": "vec"}
KIND_BY_LAYER = {"L1": "trace", "L2": "policy", "L3": "world_model", "Skill": "skill"}


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
        memories: MemoryRepository,
        vectors: VectorRepository,
        queue: EmbeddingQueue,
        batch_size: int = 32,
    ) -> None:
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self.memories = memories
        self.vectors = vectors
        self.queue = queue
        self.batch_size = batch_size
        self.index: VectorIndex | None = None
        self.reembed = ReembedProgress()
        self.last_error: str | None = None
        self.last_ok_at_iso: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()

    @property
    def embedder(self) -> Embedder:
        """The embedder, created on first use."""
        with self._lock:
            if self._embedder is None:
                self._embedder = self._embedder_factory()
            return self._embedder

    def replace_embedder(self, factory: Callable[[], Embedder]) -> None:
        """Swap the embedding backend (config reload) and rebuild the index for its fingerprint."""
        with self._lock:
            self._embedder_factory = factory
            self._embedder = None
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
        index = VectorIndex(fingerprint.dim)
        index.bulk_load(self.vectors.iter_current(fingerprint.provider, fingerprint.model, fingerprint.dim))
        self.index = index
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

    def forget(self, memory_id: str) -> None:
        """Drop a deleted memory from the index, the vector table and the queue."""
        if self.index is not None:
            self.index.remove(memory_id)
        self.vectors.delete_for(memory_id)
        self.queue.drop(memory_id)

    def embed_query(self, text: str) -> Vector | None:
        """Embed a search query; None when the backend fails (search continues text-only)."""
        try:
            vectors = self.embedder.embed([text], role="query")
        except MemmyError as exc:
            self.last_error = exc.message
            return None
        vector: Vector = np.asarray(vectors[0], dtype=np.float32)
        return vector

    def run_once(self, limit: int | None = None) -> tuple[int, int]:
        """Embed one batch of due queue rows; returns (succeeded, failed)."""
        items = self.queue.claim_due(limit or self.batch_size, worker=f"pid-{threading.get_ident()}")
        if not items:
            return 0, 0
        try:
            embedder = self.embedder
            vectors = embedder.embed([item.source_text for item in items], role="document")
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
            self.vectors.upsert(item.target_id, item.vector_field, fingerprint.provider, fingerprint.model, vector)
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
    prepared = properties.get("embeddingText")
    if isinstance(prepared, str) and prepared:
        return prepared
    return f"{title}\n{content}".strip()[:3000]
