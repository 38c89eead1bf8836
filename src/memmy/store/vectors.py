"""Vectors: durable float32 blobs in ``memory_vector_entries`` and an exact in-memory index over all of them.

Every vector row is stamped with the embedding provider, model and dimension that produced it. Search
never mixes spaces: the in-memory index holds only vectors of the current fingerprint, and rows with any
other stamp are re-embedded in the background. The index is exact (a float32 matrix product over the whole
corpus, no recency window); at 100k x 384 one query costs a few milliseconds on two cores.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from memmy.store.db import Database, utc_now

Vector = NDArray[np.float32]


class VectorIndex:
    """Exact cosine search over L2-normalised vectors kept in one growable float32 matrix."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self._lock = threading.RLock()
        self._matrix: Vector = np.zeros((capacity, dim), dtype=np.float32)
        self._keys: list[tuple[str, str]] = []
        self._pos: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def upsert(self, memory_id: str, field: str, vector: Vector) -> None:
        """Insert or replace the vector of (memory, field)."""
        if vector.shape != (self.dim,):
            raise ValueError(f"vector has shape {vector.shape}, index expects ({self.dim},)")
        key = (memory_id, field)
        with self._lock:
            row = self._pos.get(key)
            if row is None:
                row = len(self._keys)
                if row >= self._matrix.shape[0]:
                    grown = np.zeros((max(1024, self._matrix.shape[0] * 2), self.dim), dtype=np.float32)
                    grown[:row] = self._matrix[:row]
                    self._matrix = grown
                self._keys.append(key)
                self._pos[key] = row
            self._matrix[row] = vector

    def bulk_load(self, items: Iterable[tuple[str, str, Vector]]) -> None:
        """Add many vectors (used at start-up)."""
        for memory_id, field, vector in items:
            self.upsert(memory_id, field, vector)

    def remove(self, memory_id: str) -> None:
        """Drop every vector of a memory (swap-with-last, O(1) per row)."""
        with self._lock:
            for field in ("vec_summary", "vec_action", "vec"):
                row = self._pos.pop((memory_id, field), None)
                if row is None:
                    continue
                last = len(self._keys) - 1
                if row != last:
                    moved = self._keys[last]
                    self._matrix[row] = self._matrix[last]
                    self._keys[row] = moved
                    self._pos[moved] = row
                self._keys.pop()

    def contains(self, memory_id: str) -> bool:
        """True when the memory has at least one indexed vector."""
        with self._lock:
            return any((memory_id, f) in self._pos for f in ("vec_summary", "vec_action", "vec"))

    def search(self, query: Vector, k: int) -> list[tuple[str, float]]:
        """Top-k memories by cosine similarity (best field per memory), best first."""
        with self._lock:
            n = len(self._keys)
            if n == 0 or k <= 0:
                return []
            scores = self._matrix[:n] @ query.astype(np.float32, copy=False)
            take = min(n, k * 2)  # a memory may own two fields; over-take then de-duplicate
            top = np.argpartition(-scores, take - 1)[:take] if take < n else np.arange(n)
            order = top[np.argsort(-scores[top])]
            keys = [self._keys[i] for i in order]
            values = scores[order].tolist()
        best: dict[str, float] = {}
        for (memory_id, _field), score in zip(keys, values, strict=True):
            if memory_id not in best:
                best[memory_id] = float(score)
            if len(best) >= k:
                break
        return list(best.items())


def to_blob(vector: Vector) -> bytes:
    """Little-endian float32 bytes."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes, dim: int) -> Vector:
    """Inverse of :func:`to_blob`."""
    vector: Vector = np.frombuffer(blob, dtype="<f4", count=dim).astype(np.float32)
    return vector


class VectorRepository:
    """Durable vector rows, stamped with the fingerprint that produced them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def upsert(self, memory_id: str, field: str, provider: str, model: str, vector: Vector) -> None:
        """Write (or replace) the vector of (memory, field)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO memory_vector_entries(memory_id, vector_field, embedding_provider, embedding_model, "
                "embedding_dim, embedding, updated_at) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT(memory_id, vector_field) DO UPDATE SET embedding_provider=excluded.embedding_provider, "
                "embedding_model=excluded.embedding_model, embedding_dim=excluded.embedding_dim, "
                "embedding=excluded.embedding, updated_at=excluded.updated_at",
                (memory_id, field, provider, model, int(vector.shape[0]), to_blob(vector), utc_now()),
            )

    def delete_for(self, memory_id: str) -> None:
        """Remove every vector of a memory."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM memory_vector_entries WHERE memory_id = ?", (memory_id,))

    def iter_current(self, provider: str, model: str, dim: int, batch: int = 5000) -> Iterable[tuple[str, str, Vector]]:
        """Yield (memory_id, field, vector) of live memories stamped with this fingerprint."""
        last_id = 0
        while True:
            rows = self.db.query(
                "SELECT v.id, v.memory_id, v.vector_field, v.embedding FROM memory_vector_entries v "
                "JOIN memories m ON m.id = v.memory_id WHERE v.id > ? AND v.embedding_provider = ? "
                "AND v.embedding_model = ? AND v.embedding_dim = ? AND m.status != 'deleted' "
                "ORDER BY v.id LIMIT ?",
                (last_id, provider, model, dim, batch),
            )
            if not rows:
                return
            for row in rows:
                yield row["memory_id"], row["vector_field"], from_blob(row["embedding"], dim)
            last_id = rows[-1]["id"]

    def stale_memory_ids(self, provider: str, model: str, dim: int) -> list[str]:
        """Live memories whose vectors were made by another provider/model/dimension."""
        rows = self.db.query(
            "SELECT DISTINCT v.memory_id FROM memory_vector_entries v JOIN memories m ON m.id = v.memory_id "
            "WHERE m.status != 'deleted' AND NOT (v.embedding_provider = ? AND v.embedding_model = ? "
            "AND v.embedding_dim = ?)",
            (provider, model, dim),
        )
        return [row["memory_id"] for row in rows]

    def fingerprints(self) -> list[dict[str, object]]:
        """Count of vector rows per stamped fingerprint."""
        rows = self.db.query(
            "SELECT embedding_provider, embedding_model, embedding_dim, COUNT(*) AS n FROM memory_vector_entries "
            "GROUP BY 1, 2, 3"
        )
        return [{"provider": r[0], "model": r[1], "dim": r[2], "count": r["n"]} for r in rows]
