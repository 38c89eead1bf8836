"""Calibrated fusion and identity-based selection, the two ranking steps of the recall pipeline.

``calibrate`` puts every channel on one [0, 1] scale per query and tier and fuses the evidence families
(lexical, semantic, date) with equal weights; ``select`` picks the results, diversified by identity (turn
windows, episodes) and never by shared text. See docs/recall.md (Fusion, Selection).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memmy.domain import Memory
from memmy.kinds import trace
from memmy.recall.dates import DateRange, parse_moment
from memmy.store.memories import MemoryFilter

if TYPE_CHECKING:
    from memmy.recall.candidate import Candidate, RecallRequest, RecallSettings

KEYWORD_CHANNELS = frozenset({"fts", "pattern", "structural", "prf"})
#: Lexical channels that say less than a graded BM25 match of the user's own words: a short token present
#: (pattern, ranked by recency) and BM25 of the query widened by pseudo-relevance feedback (prf).
HALF_WEIGHT = frozenset({"pattern", "prf"})


def episode_of(cand: Candidate) -> str:
    if cand.rollup_of:
        return cand.memory.id
    return trace.episode_of(cand.memory) or ""


def calibrate(candidates: list[Candidate], settings: RecallSettings, dates: Sequence[DateRange] = ()) -> None:
    """Put every channel on one [0, 1] scale per query and tier, then fuse (CombSUM of two families).

    BM25 is already relative to the tier's best match (0 = no match). Cosine has no natural zero (unrelated
    texts score 0.1-0.3 with MiniLM), so it is scaled between the floor below which a vector hit is no
    evidence at all (``minTraceSim``, 0.15 for L3: MiniLM cosines, put on the embedding model's scale by
    ``settings.scale``) and the tier's best vector hit (1). Lexical evidence is the best of fts, structural
    and half the pattern channel (a token present, ranked by recency, says less than a graded BM25 score);
    lexical and semantic evidence count equally, and so does date evidence when the query names a date (the
    memory's time is in range).
    """
    for tier in (1, 2, 3):
        in_tier = [c for c in candidates if c.tier == tier and "vec" in c.channels]
        if not in_tier:
            continue
        high = max(c.channels["vec"] for c in in_tier)
        for cand in in_tier:
            floor = 0.15 if cand.memory.layer == "L3" else settings.min_trace_sim
            low = min(settings.scale.from_reference(floor), high - 1e-6)
            cand.calibrated["vec"] = max(0.0, (cand.channels["vec"] - low) / (high - low))
    for cand in candidates:
        for channel in KEYWORD_CHANNELS:
            if channel in cand.channels:
                weight = 0.5 if channel in HALF_WEIGHT else 1.0
                cand.calibrated[channel] = weight * cand.channels[channel]
        lexical = max((cand.calibrated.get(ch, 0.0) for ch in KEYWORD_CHANNELS), default=0.0)
        families = [lexical, cand.calibrated.get("vec", 0.0)]
        if dates:  # the query names a date: a memory from that time is a third, equal piece of evidence
            moment = parse_moment(cand.memory.valid_from or cand.memory.created_at)
            if moment is not None and any(d.contains(moment) for d in dates):
                cand.calibrated["date"] = 1.0
            families.append(cand.calibrated.get("date", 0.0))
        cand.fused = sum(families) / len(families)


def turn_tokens(chars: int, utf8_bytes: int) -> int:
    """Estimated tokens of a text from its length in characters and in UTF-8 bytes (what SQL can read without
    the text): a CJK character (3 bytes) is about one token, other text about four characters a token."""
    wide = max(0, (utf8_bytes - chars) // 2)
    return math.ceil((chars - wide) / 4 + wide)


def memory_tokens(memory: Memory) -> int:
    """Estimated tokens of a memory's content (see :func:`turn_tokens`)."""
    return turn_tokens(len(memory.content), len(memory.content.encode("utf-8", "surrogatepass")))


def window_positions(
    tokens: Sequence[int], position: int, size: int, budget: int, shown: Sequence[bool] | None = None
) -> list[int]:
    """Positions, in time order, of the turn window around ``position`` in a session of turns of ``tokens``.

    The window holds the hit and its ``2 x size`` nearest turns not ``shown`` by a better result (ties go to the
    earlier turn); then, while the whole window stays within ``budget`` tokens, up to ``2 x size`` more turns,
    nearest first. A window is a passage of about a fixed size rather than a fixed number of turns: short chat
    lines bring more of their conversation, long agent turns only their direct neighbours.
    """
    free = [i for i in range(len(tokens)) if i != position and not (shown is not None and shown[i])]
    free.sort(key=lambda i: (abs(i - position), i))
    chosen = [position, *free[: 2 * size]]
    used = sum(tokens[i] for i in chosen)
    for i in free[2 * size : 4 * size]:
        if used + tokens[i] > budget:
            break
        chosen.append(i)
        used += tokens[i]
    return sorted(chosen)


def turn_window(hit: Memory, around: Sequence[Memory], covered: set[str], size: int, budget: int = 0) -> list[Memory]:
    """The hit and its nearest turns of ``around`` (its session, in time order) not yet shown.

    A turn that a better result's window already holds is not repeated: the window takes the next nearest
    turn instead, so every result shows ``2 x size + 1`` distinct turns where the session has them, and ten
    results cover ten places rather than overlapping ones; short turns bring more while the window fits in
    ``budget`` tokens (:func:`window_positions`). The result is in time order.
    """
    position = next((i for i, m in enumerate(around) if m.id == hit.id), None)
    if position is None:
        return [hit]
    tokens = [memory_tokens(m) for m in around]
    shown = [m.id in covered for m in around]
    return [around[i] for i in window_positions(tokens, position, size, budget, shown)]


def select(
    candidates: list[Candidate],
    settings: RecallSettings,
    request: RecallRequest,
    dropped: list[dict[str, Any]],
    neighbours: Callable[[Memory, int, MemoryFilter], list[Memory]],
) -> list[Candidate]:
    """Pick up to ``limit`` results, diversified by identity rather than by shared text.

    Order is by relevance (smart seed first: the best of each tier if it reaches ``smartSeedRatio`` x
    best). A trace hit brings ``2 x contextWindow`` neighbouring turns of the same session as one result
    (the nearest ones no better result shows already, more while they fit in ``contextWindowTokens``, see
    ``turn_window``); a later candidate that is already inside a selected window is absorbed (``in_window``)
    instead of taking a slot. Only the first ``contextWindowResults`` trace results bring a window (0 = all): a
    neighbour costs the reader as much as a result, and next to the best match it is more often the evidence
    than a lower result is, further down less often (docs/recall.md, Quality: LoCoMo). Traces of an episode
    already selected are penalised by ``(1 - mmrLambda)`` x their relevance, so one task's steps do not crowd
    out everything else.
    """
    if not candidates:
        return []
    # The hook's injected text renders each result alone (recall/render.py), so on turn start a window would
    # only hide its neighbours: windows apply to searches until the renderer shows them.
    window = 0 if request.mode == "turn_start" else settings.context_window
    windowed = settings.context_window_results or request.limit
    pool = sorted(candidates, key=lambda c: (-c.relevance, -c.rrf, c.memory.id))
    selected: list[Candidate] = []
    covered: set[str] = set()
    episodes: set[str] = set()
    limit = request.limit

    def take(cand: Candidate, score: float) -> None:
        cand.mmr = score
        selected.append(cand)
        covered.add(cand.memory.id)
        covered.update(cand.rollup_of)
        episode = episode_of(cand)
        if episode:
            episodes.add(episode)
        shown_windows = sum(1 for c in selected if c.window)  # this one's is not set yet
        if window > 0 and shown_windows < windowed and cand.memory.layer == "L1" and not cand.rollup_of:
            around = neighbours(cand.memory, 4 * window, request.scope)
            cand.window = turn_window(cand.memory, around, covered, window, settings.context_window_tokens)
            covered.update(m.id for m in cand.window)

    if settings.smart_seed:
        cutoff = settings.smart_seed_ratio * pool[0].relevance
        for tier in (1, 2, 3):
            best = next((c for c in pool if c.tier == tier), None)
            if best is not None and best.relevance >= cutoff and len(selected) < limit:
                take(best, best.relevance)
    remaining = [c for c in pool if c not in selected]
    lam = settings.mmr_lambda
    while remaining and len(selected) < limit:
        best_cand, best_score = None, -math.inf
        for cand in list(remaining):
            if cand.memory.id in covered and not cand.rollup_of:
                dropped.append({"id": cand.memory.id, "reason": "in_window"})
                remaining.remove(cand)
                continue
            episode = episode_of(cand)
            score = cand.relevance if not (episode and episode in episodes) else lam * cand.relevance
            if score > best_score:
                best_cand, best_score = cand, score
        if best_cand is None:
            break
        take(best_cand, best_score)
        remaining.remove(best_cand)
    selected.sort(key=lambda c: (-c.mmr, -c.rrf))
    return selected
