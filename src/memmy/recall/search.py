"""Fused search: BM25 full-text plus exact full-corpus vector search, merged with reciprocal rank fusion.

relevance = max(channel scores) + 0.4 * RRF, where RRF sums 1 / (rrfConstant + rank + 1) over the
channels that found the memory. Vector hits below ``minTraceSim`` are ignored; hits below
``relativeThresholdFloor`` x the best relevance are dropped unless two channels agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memmy.domain import Memory
from memmy.store.memories import MemoryFilter, MemoryRepository
from memmy.store.vectors import Vector, VectorIndex

#: How retrieval tiers map to layers (tier 1 = Skill, tier 2 = L2 + L1, tier 3 = L3).
LAYER_ORDER = ("Skill", "L2", "L1", "L3")


@dataclass
class Candidate:
    """One memory found by at least one channel, with its per-channel scores and ranks."""

    memory: Memory
    channels: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    relevance: float = 0.0
    rrf: float = 0.0

    def to_debug(self) -> dict[str, Any]:
        """Per-channel evidence for ``--verbose``."""
        return {
            "id": self.memory.id,
            "channels": {k: round(v, 4) for k, v in self.channels.items()},
            "ranks": self.ranks,
            "rrf": round(self.rrf, 4),
            "relevance": round(self.relevance, 4),
        }


@dataclass
class SearchOutcome:
    """What one search found: selected candidates plus every candidate id considered."""

    selected: list[Candidate]
    candidate_ids: list[str]
    dropped: list[dict[str, Any]]
    status: list[str]


@dataclass(frozen=True)
class SearchSettings:
    """The retrieval settings this search uses (read from config.yaml at call time)."""

    keyword_top_k: int = 20
    candidate_pool_factor: int = 4
    tier_top_k: int = 10
    rrf_constant: int = 60
    min_trace_sim: float = 0.25
    relative_threshold_floor: float = 0.2
    multi_channel_bypass: bool = True

    @classmethod
    def from_algorithm(cls, retrieval: dict[str, Any], limit: int) -> SearchSettings:
        """Build from the ``algorithm.retrieval`` config section."""
        return cls(
            keyword_top_k=int(retrieval["keywordTopK"]),
            candidate_pool_factor=int(retrieval["candidatePoolFactor"]),
            tier_top_k=max(
                limit, int(retrieval["tier1TopK"]) + int(retrieval["tier2TopK"]) + int(retrieval["tier3TopK"])
            ),
            rrf_constant=int(retrieval["rrfConstant"]),
            min_trace_sim=float(retrieval["minTraceSim"]),
            relative_threshold_floor=float(retrieval["relativeThresholdFloor"]),
            multi_channel_bypass=bool(retrieval["multiChannelBypass"]),
        )


def vector_channel(
    index: VectorIndex | None,
    query_vector: Vector | None,
    repo: MemoryRepository,
    flt: MemoryFilter,
    want: int,
) -> list[tuple[Memory, float]]:
    """Top ``want`` visible memories by cosine over the whole index (widening past filtered-out rows)."""
    if index is None or query_vector is None or len(index) == 0:
        return []
    k = want
    while True:
        raw = index.search(query_vector, k)
        visible = repo.get_many([memory_id for memory_id, _ in raw], flt)
        hits = [(visible[mid], score) for mid, score in raw if mid in visible]
        if len(hits) >= want or len(raw) < k or k >= len(index):
            return hits[:want]
        k = min(len(index), k * 4)


def fused_search(
    query: str,
    *,
    repo: MemoryRepository,
    flt: MemoryFilter,
    settings: SearchSettings,
    limit: int,
    embed_query: Callable[[str], Vector | None],
    index: VectorIndex | None,
    exclude_ids: frozenset[str] = frozenset(),
) -> SearchOutcome:
    """Run the FTS and vector channels, fuse and threshold them, return the best ``limit`` candidates."""
    status: list[str] = []
    pool = max(limit, settings.tier_top_k) * settings.candidate_pool_factor
    candidates: dict[str, Candidate] = {}

    fts_hits = repo.fts_search(query, max(settings.keyword_top_k, pool), flt)
    fts_memories = repo.get_many([mid for mid, _ in fts_hits], flt)
    rank = 0
    for memory_id, _bm25 in fts_hits:
        memory = fts_memories.get(memory_id)
        if memory is None or memory_id in exclude_ids:
            continue
        cand = candidates.setdefault(memory_id, Candidate(memory))
        cand.channels["fts"] = 1.0 / (rank + 1)
        cand.ranks["fts"] = rank
        rank += 1

    query_vector = embed_query(query) if index is not None and len(index) else None
    if index is not None and len(index) and query_vector is None:
        status.append("vector:unavailable")
    vector_hits = vector_channel(index, query_vector, repo, flt, pool)
    rank = 0
    for memory, score in vector_hits:
        if memory.id in exclude_ids or score < settings.min_trace_sim:
            continue
        cand = candidates.setdefault(memory.id, Candidate(memory))
        cand.channels["vec"] = float(score)
        cand.ranks["vec"] = rank
        rank += 1

    for cand in candidates.values():
        cand.rrf = sum(1.0 / (settings.rrf_constant + r + 1) for r in cand.ranks.values())
        cand.relevance = max(cand.channels.values()) + 0.4 * cand.rrf

    ordered = sorted(candidates.values(), key=lambda c: (-c.relevance, -len(c.channels), c.memory.id))
    dropped: list[dict[str, Any]] = []
    if ordered:
        floor = settings.relative_threshold_floor * ordered[0].relevance
        kept = []
        for cand in ordered:
            if cand.relevance >= floor or (settings.multi_channel_bypass and len(cand.channels) >= 2):
                kept.append(cand)
            else:
                dropped.append({"id": cand.memory.id, "reason": "rank_threshold"})
        ordered = kept
    return SearchOutcome(
        selected=ordered[:limit],
        candidate_ids=[c for c in candidates],
        dropped=dropped,
        status=status,
    )


def as_vector(values: Any) -> Vector:
    """Coerce an embedder row to a float32 vector."""
    vector: Vector = np.asarray(values, dtype=np.float32)
    return vector
