"""Vectors: durable float32 blobs in ``memory_vector_entries`` and an exact in-memory index over all of them.

Every vector row is stamped with the embedding provider, model and dimension that produced it. Search
never mixes spaces: the in-memory index holds only vectors of the current fingerprint, and rows with any
other stamp are re-embedded in the background. The index is exact (every row scored, no recency window) and
compact: a row is held as two int8 codes per dimension (:func:`quantize`): its values over the row's own scale
(max |x| / 127), and what those leave over a 254th of that scale. A search scans only the first codes with
SimSIMD's int8 dot product (one byte per dimension: a quarter of the float32 bytes, a third of float16's
time), which puts each row within a few thousandths of its cosine; the best few hundred rows are then scored
exactly from both codes (within 1e-5 of float32, closer than float16) and ranked by that. Two bytes a
dimension in all, as float16 took. Rows are kept as one contiguous block per project: a project-scoped query
scans its project and the shared rows only; an unscoped one scans every block.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import itertools
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simsimd
from numpy.typing import NDArray

from memmy.store.db import Database, utc_now

Vector = NDArray[np.float32]
Codes = NDArray[np.int8]
#: The residual codes count in steps of ``scale / RESIDUAL_STEPS``: a coarse code leaves at most half a step
#: of ``scale``, which 127 residual steps of either sign cover.
RESIDUAL_STEPS = 254
#: A search scores exactly this many times the rows it needs (per layer, two per memory) of the scan's best:
#: the scan's error (under 0.004 on MiniLM rows) moves a row a few places, not past that margin.
RERANK_FACTOR = 4


def release_freed_heap() -> None:
    """Hand the C heap's freed pages back to the system (glibc's ``malloc_trim``; elsewhere nothing happens).

    Loading the index frees, in the middle of the heap, a store's worth of chunks and batches that stay
    resident otherwise (40-55 MiB at 100k rows), since glibc only returns memory at the heap's top by itself.
    """
    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return
    trim(0)


def quantize(rows: Vector) -> tuple[Codes, Codes, Vector]:
    """The index's layout of float32 ``rows`` (n x dim): coarse codes, residual codes and each row's scale.

    A row ``x`` is ``scale * (coarse + residual / RESIDUAL_STEPS)`` to within ``scale / 508`` per dimension
    (about 4e-6 for a unit MiniLM row, against float16's 1e-4). A zero row gets scale 1 and zero codes.
    """
    return _quantize_consuming(np.array(rows, dtype=np.float32, copy=True))


def _quantize_consuming(work: Vector) -> tuple[Codes, Codes, Vector]:
    """:func:`quantize`, computed in ``work`` itself (overwritten): the start-up load quantises a store a chunk
    at a time in one buffer, and no temporary of a chunk's size is allocated (freed, they leave the heap larger)."""
    scale = np.maximum(work.max(axis=1), -work.min(axis=1)) / np.float32(127)
    scale[scale == 0] = 1.0
    work /= scale[:, None]  # now within [-127, 127]
    coarse = np.empty(work.shape, dtype=np.int8)
    np.rint(work, out=coarse, casting="unsafe")
    work -= coarse  # what the coarse codes leave, within half a step
    work *= RESIDUAL_STEPS
    residual = np.empty(work.shape, dtype=np.int8)
    np.rint(np.clip(work, -127, 127, out=work), out=residual, casting="unsafe")
    return coarse, residual, scale.astype(np.float32)


def scan(coarse: Codes, scale: Vector, query: Vector) -> Vector:
    """Approximately ``rows @ query`` for every row: SimSIMD's int8 dot product of the rows' coarse codes and
    the query's own int8 codes (exact integer sums; it releases the GIL), times both scales. Off the float32
    cosine by a few thousandths: good for choosing the rows :func:`exact_scores` then scores."""
    if coarse.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    query = np.asarray(query, dtype=np.float32)
    query_scale = float(np.abs(query).max()) / 127 or 1.0
    query_codes = np.clip(np.rint(query / query_scale), -127, 127).astype(np.int8)
    sums = simsimd.cdist(query_codes[None, :], coarse, metric="dot", out_dtype="float32")
    result: Vector = np.asarray(sums, dtype=np.float32).reshape(-1) * scale
    result *= np.float32(query_scale)
    return result


def exact_scores(coarse: Codes, residual: Codes, scale: Vector, rows: NDArray[np.intp], query: Vector) -> Vector:
    """``rows @ query`` for the listed rows from both codes (within 1e-5 of float32 for MiniLM rows)."""
    query = np.asarray(query, dtype=np.float32)
    whole = coarse[rows].astype(np.float32) @ query
    whole += (residual[rows].astype(np.float32) @ query) / np.float32(RESIDUAL_STEPS)
    result: Vector = whole * scale[rows]
    return result


def decoded(coarse: Codes, residual: Codes, scale: Vector, row: int) -> Vector:
    """One row back as float32 (within 1e-5 of what was stored)."""
    whole = coarse[row].astype(np.float32) + residual[row].astype(np.float32) / np.float32(RESIDUAL_STEPS)
    result: Vector = whole * scale[row]
    return result


@dataclass(frozen=True)
class VectorMeta:
    """What a search may filter on without touching SQLite: layer, project scope, source agent."""

    layer: str
    project_id: str | None = None  # None: visible from every project (no project, or marked global)
    source: str = "unknown"


class _Block:
    """The rows of one project scope (or of the memories every project sees), each kind of code contiguous."""

    def __init__(self, dim: int, capacity: int) -> None:
        self.dim = dim
        self.coarse: Codes = np.zeros((capacity, dim), dtype=np.int8)
        self.residual: Codes = np.zeros((capacity, dim), dtype=np.int8)
        self.scale: Vector = np.ones(capacity, dtype=np.float32)
        self.layer = np.zeros(capacity, dtype=np.int8)
        self.source = np.zeros(capacity, dtype=np.int32)
        self.keys: list[tuple[str, str]] = []

    @property
    def capacity(self) -> int:
        """Rows the block has room for."""
        return int(self.coarse.shape[0])

    def grow(self, needed: int) -> None:
        size = self.capacity
        if needed <= size:
            return
        new_size = max(64, size * 2, needed)
        for name in BLOCK_ARRAYS:
            old = getattr(self, name)
            # np.zeros leaves untouched pages unallocated, so spare capacity costs address space, not memory.
            grown = np.zeros((new_size, *old.shape[1:]), dtype=old.dtype)
            grown[:size] = old
            setattr(self, name, grown)

    def put(self, row: int, vector: Vector) -> None:
        """Store ``vector`` in ``row``."""
        coarse, residual, scale = quantize(vector[None, :])
        self.coarse[row], self.residual[row], self.scale[row] = coarse[0], residual[0], scale[0]

    def scan(self, query: Vector) -> Vector:
        """The scan's approximate score of every row in use (see :func:`scan`)."""
        n = len(self.keys)
        return scan(self.coarse[:n], self.scale[:n], query)

    def exact(self, rows: NDArray[np.intp], query: Vector) -> Vector:
        """Exact scores of ``rows`` (see :func:`exact_scores`)."""
        return exact_scores(self.coarse, self.residual, self.scale, rows, query)

    def vector(self, row: int) -> Vector:
        """One row as float32."""
        return decoded(self.coarse, self.residual, self.scale, row)


#: The per-row arrays of a block, moved together (growth, swap-with-last removal).
BLOCK_ARRAYS = ("coarse", "residual", "scale", "layer", "source")


class _Load:
    """The rows of one block while the index loads: quantised a chunk at a time, joined once into an exact-size
    block (only one chunk is ever held as float32)."""

    def __init__(self, dim: int, chunk_rows: int) -> None:
        self.dim = dim
        self.chunk_rows = max(1, chunk_rows)
        self.staged: Vector = np.empty((self.chunk_rows, dim), dtype=np.float32)
        self.chunks: list[tuple[Codes, Codes, Vector]] = []
        self.count = 0
        self.layers: list[int] = []
        self.sources: list[int] = []
        self.keys: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str], vector: Vector, layer: int, source: int) -> None:
        row = self.count % self.chunk_rows
        self.staged[row] = vector
        self.keys.append(key)
        self.layers.append(layer)
        self.sources.append(source)
        self.count += 1
        if row == self.chunk_rows - 1:
            self.chunks.append(_quantize_consuming(self.staged))

    def block(self) -> _Block:
        """The loaded rows as one block with room for 64 more."""
        left = self.count % self.chunk_rows
        if left:
            self.chunks.append(_quantize_consuming(self.staged[:left]))
        block = _Block(self.dim, self.count + 64)
        first = 0
        for coarse, residual, scale in self.chunks:
            rows = coarse.shape[0]
            block.coarse[first : first + rows] = coarse
            block.residual[first : first + rows] = residual
            block.scale[first : first + rows] = scale
            first += rows
        self.chunks.clear()
        block.layer[: self.count] = self.layers
        block.source[: self.count] = self.sources
        block.keys = self.keys
        return block


class VectorIndex:
    """Exact cosine search over L2-normalised vectors, kept in one contiguous block per project (int8 codes,
    see the module docstring).

    A scoped search (one project) scans only that project's block and the block of memories every project
    sees (no project, or global), so its cost follows the project's size, not the store's. Each row also
    carries small integer codes for its layer and source; layer and source filters are masks over a block.
    """

    NO_PROJECT = -1

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self._capacity = capacity
        self._lock = threading.RLock()
        self._blocks: dict[int, _Block] = {}
        self._pos: dict[tuple[str, str], tuple[int, int]] = {}
        self._codes: dict[str, dict[str, int]] = {"layer": {}, "project": {}, "source": {}}

    def __len__(self) -> int:
        return len(self._pos)

    def _code(self, kind: str, value: str) -> int:
        table = self._codes[kind]
        if value not in table:
            table[value] = len(table)
        return table[value]

    def _block(self, project: int) -> _Block:
        block = self._blocks.get(project)
        if block is None:
            first = self._capacity if not self._blocks else 64
            block = self._blocks[project] = _Block(self.dim, first)
        return block

    def upsert(self, memory_id: str, field: str, vector: Vector, meta: VectorMeta | None = None) -> None:
        """Insert or replace the vector of (memory, field)."""
        if vector.shape != (self.dim,):
            raise ValueError(f"vector has shape {vector.shape}, index expects ({self.dim},)")
        meta = meta or VectorMeta(layer="L1")
        key = (memory_id, field)
        with self._lock:
            project = self.NO_PROJECT if meta.project_id is None else self._code("project", meta.project_id)
            found = self._pos.get(key)
            if found is not None and found[0] != project:  # the memory moved to another scope
                self._remove_key(key)
                found = None
            block = self._block(project)
            if found is None:
                row = len(block.keys)
                block.grow(row + 1)
                block.keys.append(key)
                self._pos[key] = (project, row)
            else:
                row = found[1]
            block.put(row, vector)
            block.layer[row] = self._code("layer", meta.layer)
            block.source[row] = self._code("source", meta.source)

    def bulk_load(self, items: Iterable[tuple[str, str, Vector, VectorMeta]], chunk_rows: int = 1024) -> None:
        """Add many vectors (used at start-up).

        Into an empty index the rows are gathered per block in chunks of ``chunk_rows`` and each block is then
        allocated once, at its final size: blocks grown row by row double their capacity, and a block small
        enough to come from the heap keeps all of it resident (about 50 MiB more at 100k in 20 projects). The
        chunks freed then are handed back to the system (:func:`release_freed_heap`).
        """
        with self._lock:
            if self._pos:
                for memory_id, field, vector, meta in items:
                    self.upsert(memory_id, field, vector, meta)
                return
            loads: dict[int, _Load] = {}
            repeated: list[tuple[str, str, Vector, VectorMeta]] = []
            for memory_id, field, vector, meta in items:
                if vector.shape != (self.dim,):
                    raise ValueError(f"vector has shape {vector.shape}, index expects ({self.dim},)")
                key = (memory_id, field)
                if key in self._pos:  # the same row twice: the later one wins, through upsert below
                    repeated.append((memory_id, field, vector, meta))
                    continue
                project = self.NO_PROJECT if meta.project_id is None else self._code("project", meta.project_id)
                load = loads.get(project)
                if load is None:
                    load = loads[project] = _Load(self.dim, chunk_rows)
                self._pos[key] = (project, load.count)
                load.add(key, vector, self._code("layer", meta.layer), self._code("source", meta.source))
            for project, load in loads.items():
                self._blocks[project] = load.block()
            loads.clear()
            for memory_id, field, vector, meta in repeated:
                self.upsert(memory_id, field, vector, meta)
        release_freed_heap()

    def _remove_key(self, key: tuple[str, str]) -> None:
        found = self._pos.pop(key, None)
        if found is None:
            return
        project, row = found
        block = self._blocks[project]
        last = len(block.keys) - 1
        if row != last:  # swap-with-last, O(1) per row
            moved = block.keys[last]
            for name in BLOCK_ARRAYS:
                array = getattr(block, name)
                array[row] = array[last]
            block.keys[row] = moved
            self._pos[moved] = (project, row)
        block.keys.pop()

    def remove(self, memory_id: str) -> None:
        """Drop every vector of a memory."""
        with self._lock:
            for field in ("vec_summary", "vec_action", "vec"):
                self._remove_key((memory_id, field))

    def contains(self, memory_id: str) -> bool:
        """True when the memory has at least one indexed vector."""
        with self._lock:
            return any((memory_id, f) in self._pos for f in ("vec_summary", "vec_action", "vec"))

    def vector(self, memory_id: str) -> Vector | None:
        """The memory's first stored vector (summary, then action, then vec), or None."""
        with self._lock:
            for field in ("vec_summary", "vec", "vec_action"):
                found = self._pos.get((memory_id, field))
                if found is not None:
                    return self._blocks[found[0]].vector(found[1])
        return None

    def vectors(self, memory_ids: Iterable[str]) -> dict[str, Vector]:
        """:meth:`vector` of each listed memory that has one (one look-up for many)."""
        found = {memory_id: self.vector(memory_id) for memory_id in dict.fromkeys(memory_ids)}
        return {memory_id: vector for memory_id, vector in found.items() if vector is not None}

    def having_vectors(self, memory_ids: Iterable[str]) -> set[str]:
        """The listed memories that have an indexed vector (:meth:`contains` for many at once)."""
        return {memory_id for memory_id in memory_ids if self.contains(memory_id)}

    def similarities(self, memory_ids: Iterable[str], query: Vector) -> dict[str, float]:
        """Cosine of ``query`` with each listed memory that has a vector (best field), for candidates that
        another channel found: their semantic evidence is known exactly, not only when they made the top k.
        Scored from both codes, as :meth:`search_layers` scores the rows it returns, so both give the same score."""
        query = np.asarray(query, dtype=np.float32)
        wanted: dict[int, tuple[list[int], list[str]]] = {}
        with self._lock:
            for memory_id in memory_ids:
                for field in ("vec_summary", "vec", "vec_action"):
                    pos = self._pos.get((memory_id, field))
                    if pos is not None:
                        rows, owners = wanted.setdefault(pos[0], ([], []))
                        rows.append(pos[1])
                        owners.append(memory_id)
            scored = [
                (owners, self._blocks[code].exact(np.asarray(rows, dtype=np.intp), query))
                for code, (rows, owners) in wanted.items()
            ]
        found: dict[str, float] = {}
        for owners, scores in scored:
            for memory_id, score in zip(owners, scores.tolist(), strict=True):
                if score > found.get(memory_id, -np.inf):
                    found[memory_id] = score
        return found

    def _mask(
        self,
        layer_codes: NDArray[np.int8],
        source_codes: NDArray[np.int32],
        layers: Sequence[str] | None,
        source: str | None,
    ) -> NDArray[np.bool_] | None:
        mask: NDArray[np.bool_] | None = None
        if layers:
            codes = [self._codes["layer"].get(layer, -1) for layer in layers]
            mask = layer_codes == codes[0]  # equality is ~100x cheaper than np.isin on 100k rows
            for code in codes[1:]:
                mask |= layer_codes == code
        if source is not None:
            code = self._codes["source"].get(source, -2)
            same = source_codes == code
            mask = same if mask is None else mask & same
        return mask

    def search(
        self,
        query: Vector,
        k: int,
        *,
        layers: Sequence[str] | None = None,
        project_id: str | None = None,
        source: str | None = None,
    ) -> list[tuple[str, float]]:
        """Top-k memories by cosine similarity (best field per memory), best first, within the filters."""
        pools = {"*": k} if not layers else {layer: k for layer in layers}
        found = self.search_layers(query, pools, project_id=project_id, source=source, merge=bool(layers))
        return found["*"]

    def search_layers(
        self,
        query: Vector,
        pools: dict[str, int],
        *,
        project_id: str | None = None,
        source: str | None = None,
        merge: bool = False,
    ) -> dict[str, list[tuple[str, float]]]:
        """Top memories per layer (``{"L1": 20, ...}``; ``"*"`` = any layer), one scan per block.

        A ``project_id`` limits the scan to that project's block and the block every project sees. With
        ``merge`` the per-layer results are also merged into ``"*"`` (best first, capped at the largest k).
        The scan's best rows (:data:`RERANK_FACTOR` times those needed) are scored exactly, and ranked and
        returned with that score.
        """
        query = np.asarray(query, dtype=np.float32)
        with self._lock:
            if not self._pos or not pools:
                return {name: [] for name in [*pools, "*"]}
            if project_id is None:
                codes = list(self._blocks)
            else:
                codes = [self.NO_PROJECT]
                if project_id in self._codes["project"]:
                    codes.append(self._codes["project"][project_id])
            found: dict[str, list[tuple[str, float]]] = {name: [] for name in pools}
            # Every block is scanned on its own (a scoped query touches only its blocks), then the scores are
            # joined so that each layer takes one top-k pass, not one per block.
            scanned = [(block, len(block.keys)) for code in codes if (block := self._blocks.get(code)) and block.keys]
            if scanned:
                scores = _joined([block.scan(query) for block, _n in scanned])
                layer_codes = _joined([block.layer[:n] for block, n in scanned])
                source_codes = _joined([block.source[:n] for block, n in scanned])
                ends = list(itertools.accumulate(n for _block, n in scanned))

                def owner(row: int) -> str:
                    part = bisect.bisect_right(ends, row)
                    return scanned[part][0].keys[row - (ends[part - 1] if part else 0)][0]

                starts = np.array([0, *ends[:-1]], dtype=np.intp)

                def exact(rows: NDArray[np.intp]) -> Vector:
                    parts = np.searchsorted(ends, rows, side="right")
                    result: Vector = np.empty(rows.shape[0], dtype=np.float32)
                    for part in np.unique(parts).tolist():
                        here = parts == part
                        result[here] = scanned[part][0].exact(rows[here] - starts[part], query)
                    return result

                total = ends[-1]
                for name, k in pools.items():
                    mask = self._mask(layer_codes, source_codes, None if name == "*" else [name], source)
                    if mask is not None:
                        # A layer the scanned blocks do not hold (no Skill rows, say) costs no top-k pass, and
                        # a mask that keeps every row is no mask.
                        kept = int(np.count_nonzero(mask))
                        if kept == 0:
                            continue
                        if kept == total:
                            mask = None
                    found[name] = self._top(owner, exact, scores, mask, k)
        results: dict[str, list[tuple[str, float]]] = {}
        for name, k in pools.items():
            best: dict[str, float] = {}
            for memory_id, score in sorted(found[name], key=lambda hit: -hit[1]):
                if memory_id not in best:
                    best[memory_id] = score
                    if len(best) >= k:
                        break
            results[name] = list(best.items())
        if merge:
            results["*"] = merged_layers(results, max(pools.values()))
        return results

    @staticmethod
    def _top(
        owner: Callable[[int], str],
        exact: Callable[[NDArray[np.intp]], Vector],
        scores: Vector,
        mask: NDArray[np.bool_] | None,
        k: int,
    ) -> list[tuple[str, float]]:
        """The best ``k`` memories by exact score among the scan's best rows (``scores`` is the scan's)."""
        n = scores.shape[0]
        if k <= 0:
            return []
        masked = scores if mask is None else np.where(mask, scores, np.float32(-np.inf))
        take = min(n, k * 2 * RERANK_FACTOR)  # a memory may own two fields; over-take then de-duplicate
        top = top_rows(masked, take) if take < n else np.arange(n)
        top = top[np.isfinite(masked[top])]
        exact_top = exact(top)
        best: dict[str, float] = {}
        for position in np.argsort(-exact_top, kind="stable").tolist():
            memory_id = owner(int(top[position]))
            if memory_id not in best:
                best[memory_id] = float(exact_top[position])
                if len(best) >= k:
                    break
        return list(best.items())


def merged_layers(results: dict[str, list[tuple[str, float]]], k: int) -> list[tuple[str, float]]:
    """The per-layer results (``"*"`` left out) as one list, best first, cut at ``k``."""
    merged = sorted((hit for name, hits in results.items() if name != "*" for hit in hits), key=lambda hit: -hit[1])
    return merged[:k]


def top_rows(scores: Vector, take: int) -> NDArray[np.intp]:
    """Positions of the ``take`` highest ``scores`` (``0 < take < len(scores)``), in no particular order.

    The same set as ``np.argpartition(-scores, take - 1)[:take]`` (ties at the cut aside), at a fraction of its
    cost on a large index: a threshold read off a strided sample of ~2,048 scores keeps a few times ``take`` rows,
    and only those are partitioned. When at least ``take`` scores reach the threshold, every one of the ``take``
    highest does, so the result is exact; when the sample misjudges (too few or too many rows kept, ``-inf``
    masks), it falls back to partitioning every score.
    """
    n = scores.shape[0]
    if n >= 8192 and take * 32 <= n:
        sample = scores[:: n // 2048]
        size = sample.shape[0]
        above = min(size - 1, 4 * take * size // n + 8)  # sample scores expected above the threshold
        threshold = np.partition(sample, size - above)[size - above]
        if np.isfinite(threshold):
            rows = np.flatnonzero(scores >= threshold)
            if take <= rows.shape[0] <= 64 * take:
                picked: NDArray[np.intp] = rows[np.argpartition(-scores[rows], take - 1)[:take]]
                return picked
    everything: NDArray[np.intp] = np.argpartition(-scores, take - 1)[:take]
    return everything


def _joined(parts: list[NDArray[Any]]) -> NDArray[Any]:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def meta_of(layer: str, project_id: str | None, visibility: str | None, source: str | None) -> VectorMeta:
    """Index metadata of a memory: global memories belong to no project."""
    scoped = None if visibility == "global" else project_id
    return VectorMeta(layer=layer, project_id=scoped, source=source or "unknown")


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

    def upsert(self, memory_id: str, field: str, provider: str, model: str, vector: Vector) -> bool:
        """Write (or replace) the vector of (memory, field); False when the memory is gone (deleted while its
        vector was being computed: nothing is written)."""
        try:
            with self.db.transaction() as conn:
                written = conn.execute(
                    "INSERT INTO memory_vector_entries(memory_id, vector_field, embedding_provider, embedding_model, "
                    "embedding_dim, embedding, updated_at) SELECT ?,?,?,?,?,?,? "
                    "WHERE EXISTS (SELECT 1 FROM memories WHERE id = ?) "
                    "ON CONFLICT(memory_id, vector_field) DO UPDATE SET "
                    "embedding_provider=excluded.embedding_provider, embedding_model=excluded.embedding_model, "
                    "embedding_dim=excluded.embedding_dim, embedding=excluded.embedding, "
                    "updated_at=excluded.updated_at",
                    (memory_id, field, provider, model, int(vector.shape[0]), to_blob(vector), utc_now(), memory_id),
                ).rowcount
        except sqlite3.IntegrityError:  # deleted after the check, before the commit (the foreign key refused it)
            return False
        return written > 0

    def delete_for(self, memory_id: str) -> None:
        """Remove every vector of a memory."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM memory_vector_entries WHERE memory_id = ?", (memory_id,))

    def iter_current(
        self, provider: str, model: str, dim: int, batch: int = 5000
    ) -> Iterable[tuple[str, str, Vector, VectorMeta]]:
        """Yield (memory_id, field, vector, meta) of recallable memories stamped with this fingerprint
        (archived, deleted and superseded ones stay in the table but not in the index)."""
        last_id = 0
        while True:
            last_id, rows = self.current_after(last_id, provider, model, dim, batch)
            if not rows:
                return
            yield from rows

    def current_after(
        self, after_id: int, provider: str, model: str, dim: int, batch: int = 5000
    ) -> tuple[int, list[tuple[str, str, Vector, VectorMeta]]]:
        """Up to ``batch`` recallable vector rows of this fingerprint with an id above ``after_id``, and the last
        id among them (``after_id`` when there are none)."""
        rows = self.db.query(
            "SELECT v.id, v.memory_id, v.vector_field, v.embedding, m.memory_layer, m.project_id, m.visibility, "
            "m.source_agent FROM memory_vector_entries v JOIN memories m ON m.id = v.memory_id "
            "WHERE v.id > ? AND v.embedding_provider = ? AND v.embedding_model = ? AND v.embedding_dim = ? "
            "AND m.status = 'activated' AND (m.valid_to IS NULL OR m.valid_to > ?) ORDER BY v.id LIMIT ?",
            (after_id, provider, model, dim, utc_now(), batch),
        )
        found = [
            (
                row["memory_id"],
                row["vector_field"],
                from_blob(row["embedding"], dim),
                meta_of(row["memory_layer"], row["project_id"], row["visibility"], row["source_agent"]),
            )
            for row in rows
        ]
        return (int(rows[-1]["id"]) if rows else after_id), found

    def last_id(self) -> int:
        """The highest vector row id so far (0 when there is none)."""
        row = self.db.query_one("SELECT MAX(id) FROM memory_vector_entries")
        return int(row[0] or 0) if row else 0

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
