"""Recall channels: vector (whole corpus, per layer), fts (BM25), pattern (short CJK/ASCII), structural (L1).

Each channel returns ranked memory ids; scores and ranks are fused later. All of them respect the
caller's scope and layer filter; visibility (status, validity, unfinished imports) is applied when the
candidates are loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memmy.domain import Memory
from memmy.store.memories import MemoryFilter, MemoryRepository
from memmy.store.vectors import Vector, VectorIndex

CHANNELS = ("vec", "fts", "pattern", "structural")


@dataclass(frozen=True)
class ChannelHit:
    """One memory found by one channel."""

    memory_id: str
    channel: str
    score: float
    rank: int


def vector_channel(
    index: VectorIndex | None,
    query_vector: Vector | None,
    flt: MemoryFilter,
    pools: dict[str, int],
) -> list[ChannelHit]:
    """Top memories of each layer (``{layer: pool}``) by cosine over the whole in-memory index.

    One matrix product serves every layer; the layer, project and source filters are masks over it.
    """
    if index is None or query_vector is None or len(index) == 0 or not pools:
        return []
    found = index.search_layers(query_vector, pools, project_id=flt.project_id, source=flt.source_agent)
    return [
        ChannelHit(memory_id, "vec", score, rank)
        for layer in pools
        for rank, (memory_id, score) in enumerate(found[layer])
    ]


def vector_fill(hits: Sequence[ChannelHit], index: VectorIndex, query_vector: Vector) -> list[ChannelHit]:
    """The exact cosine of every candidate another channel found but the vector top-k missed.

    A candidate outside the vector channel's pool is not without semantic evidence: its cosine is merely below
    the pool's cut. Counting it as 0 made fusion punish exactly the lexical hits (a BM25 match with cosine 0.45
    scored as if unrelated), so the full pipeline ranked below its own FTS channel. The scores are exact (same
    index, same query vector); the ranks continue after the pool.
    """
    in_pool = {h.memory_id for h in hits if h.channel == "vec"}
    missing = list(dict.fromkeys(h.memory_id for h in hits if h.memory_id not in in_pool))
    if not missing:
        return []
    ranked = sorted(index.similarities(missing, query_vector).items(), key=lambda item: -item[1])
    return [ChannelHit(mid, "vec", score, len(in_pool) + i) for i, (mid, score) in enumerate(ranked)]


def window_cosines(
    hits: Sequence[ChannelHit], windows: dict[str, list[str]], index: VectorIndex, query_vector: Vector
) -> list[ChannelHit]:
    """``hits`` with the ``vec`` score of every memory in ``windows`` replaced by the cosine of its turn window.

    A trace hit is returned as a window of neighbouring turns (one result), so its semantic evidence is the
    meaning of that window: the query's cosine with the normalised mean of the window's vectors. A turn that
    only says "been playing it for a month" gets the meaning of the turns around it. ``windows`` maps a
    memory id to the ids of its window (itself included); other hits, and windows without vectors, are kept.
    """
    query = np.asarray(query_vector, dtype=np.float32)
    scores: dict[str, float] = {}
    stored = index.vectors(m for members in windows.values() for m in members)  # one look-up for every window
    for memory_id, members in windows.items():
        rows = [stored[m] for m in members if m in stored]
        if len(rows) < 2:
            continue
        mean = np.mean(np.stack(rows).astype(np.float32), axis=0)
        norm = float(np.linalg.norm(mean))
        if norm > 0:
            scores[memory_id] = float(mean @ query) / norm
    return [
        ChannelHit(h.memory_id, h.channel, scores[h.memory_id], h.rank)
        if h.channel == "vec" and h.memory_id in scores
        else h
        for h in hits
    ]


def fts_channel(
    repo: MemoryRepository,
    terms: Sequence[str],
    flt: MemoryFilter,
    limit: int,
    loaded: dict[str, Memory] | None = None,
) -> list[ChannelHit]:
    """BM25 over title/key, body and tags (raw BM25 scores; the pipeline normalises them per tier).

    With ``loaded`` the hits' memories are put there as they are read (see ``MemoryRepository.fts_search_terms``).
    """
    hits = repo.fts_search_terms(terms, limit, flt, loaded)
    return [ChannelHit(memory_id, "fts", s, rank) for rank, (memory_id, s) in enumerate(hits)]


def pattern_channel(
    repo: MemoryRepository,
    terms: Sequence[str],
    flt: MemoryFilter,
    limit: int,
    loaded: dict[str, Memory] | None = None,
) -> list[ChannelHit]:
    """Exact short patterns (CJK words and bigrams, two-letter ASCII words), most recent first.

    Backed by the bigram-segmented FTS index instead of ``LIKE '%x%'`` scans, so it stays fast at 100k rows.
    ``loaded`` as in :func:`fts_channel`.
    """
    if not terms:
        return []
    hits = repo.token_search(terms, limit, flt, order="recent", loaded=loaded)
    return [ChannelHit(memory_id, "pattern", 1.0 / (rank + 1), rank) for rank, memory_id in enumerate(hits)]


def structural_channel(
    repo: MemoryRepository,
    fragments: Sequence[str],
    flt: MemoryFilter,
    limit: int = 10,
    loaded: dict[str, Memory] | None = None,
) -> list[ChannelHit]:
    """L1 traces that contain the query's error fragments, paths or codes as phrases (``loaded`` as in
    :func:`fts_channel`)."""
    if not fragments:
        return []
    l1_filter = dataclasses.replace(flt, layers=("L1",), include_pending_imports=False)
    hits = repo.token_search(fragments, limit, l1_filter, order="rank", phrases=True, loaded=loaded)
    return [ChannelHit(memory_id, "structural", 1.0 / (rank + 1), rank) for rank, memory_id in enumerate(hits)]
