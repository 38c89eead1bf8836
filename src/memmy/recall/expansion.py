"""Query expansion without an LLM: pseudo-relevance feedback (PRF) over the best hits of a first pass.

The words a query does not say but its best hits share are likely words of the topic ("been playing **it** for a
month" answers a question about the guitar only through its neighbours' words). Classic PRF (Rocchio 1971;
RM3, Lavrenko & Croft 2001) adds the terms that are frequent in the top documents and rare elsewhere. Here the
"elsewhere" is the candidate pool of the same recall, so no collection statistics are read: a term counts by how
many of the top hits contain it, times its inverse frequency over the pool. Only terms that at least two of the
top hits share are used (one document's idiosyncratic words are drift, not topic), and only a few of them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memmy.recall.channels import ChannelHit, fts_channel, vector_fill
from memmy.recall.query import extract_keywords
from memmy.store.memories import MemoryFilter, MemoryRepository
from memmy.store.vectors import Vector, VectorIndex

if TYPE_CHECKING:
    from memmy.recall.candidate import Candidate

TOP_DOCS = 3
MAX_TERMS = 4
POOL_DOCS = 40
MIN_SHARED = 2
STEM_PREFIX = 4


def _words(text: str) -> set[str]:
    """The content words of a text, as the query side extracts them (lower-cased, no stopwords)."""
    return {w for w in extract_keywords(text, limit=64) if len(w) >= 3 and not w.isdigit()}


def _same_stem(term: str, query_terms: set[str]) -> bool:
    return any(term[:STEM_PREFIX] == q[:STEM_PREFIX] for q in query_terms if len(q) >= STEM_PREFIX)


def expansion_terms(
    candidates: Sequence[Candidate], query_terms: Sequence[str], top: int = TOP_DOCS, limit: int = MAX_TERMS
) -> list[str]:
    """Up to ``limit`` words shared by the best ``top`` candidates, not in the query, rare in the pool.

    Candidates are ranked by relevance; episode rollups are skipped (their text is a summary of others).
    Fewer than ``MIN_SHARED`` top hits, or no shared word, gives no expansion.
    """
    ranked = sorted((c for c in candidates if not c.rollup_of), key=lambda c: -c.relevance)[:POOL_DOCS]
    best = ranked[:top]
    if len(best) < MIN_SHARED:
        return []
    asked = {t.lower() for t in query_terms}
    pool = Counter(w for cand in ranked for w in _words(cand.memory.content))
    shared = Counter(w for cand in best for w in _words(cand.memory.content))
    size = len(ranked)
    scored = [
        (count * math.log((size + 1) / (pool[word] + 0.5)), word)
        for word, count in shared.items()
        if count >= MIN_SHARED and word not in asked and not _same_stem(word, asked)
    ]
    scored = [item for item in scored if item[0] > 0]
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [word for _, word in scored[:limit]]


def prf_hits(
    repo: MemoryRepository,
    terms: Sequence[str],
    flt: MemoryFilter,
    limit: int,
    hits: Sequence[ChannelHit],
    vectors: tuple[VectorIndex | None, Vector | None] | None,
) -> list[ChannelHit]:
    """BM25 hits of the expanded query (the query's terms plus the expansion) as channel ``prf``, and the exact
    cosine of the candidates they add (``vectors`` = index and query vector, None without the vector channel)."""
    extra = [ChannelHit(h.memory_id, "prf", h.score, h.rank) for h in fts_channel(repo, terms, flt, limit)]
    if vectors is not None and vectors[0] is not None and vectors[1] is not None:
        extra.extend(vector_fill([*hits, *extra], vectors[0], vectors[1]))
    return extra
