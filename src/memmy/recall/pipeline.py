"""The recall pipeline: layers by mode, channels, per-candidate scoring, fusion, thresholds, selection, dedup.

Fusion is CombSUM of calibrated evidence: every channel's scores are put on one [0, 1] scale per query
(BM25 relative to the best match, cosine min-max over the channel's pool), the lexical family (best of fts,
pattern, structural) and the semantic family (vector) count equally, and
relevance = (fused + layer bonus + 0.4 * RRF) x freshness factor (memories with a decay profile only:
0.2 + 0.8 x freshness). Where trace hits come back as turn windows, a trace's vector evidence is the cosine of its
window (the mean of the window's vectors). Selection diversifies by identity (episode, turn window), never by
shared text: a hit on a dialogue turn brings its neighbouring turns as one result, and a later hit inside that
window is absorbed instead of taking another slot. Every stage is timed and every drop has a reason, so ``--verbose``
can explain why a memory was or was not recalled.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memmy.domain import Memory
from memmy.errors import StoreError
from memmy.kinds import episode, policy, skill, trace, world
from memmy.kinds import memory as stored
from memmy.kinds.catalog import EPISODE_SOURCE
from memmy.kinds.text import SENTENCE_END, whole_sentences
from memmy.recall.candidate import TIER_OF as TIER_OF
from memmy.recall.candidate import Candidate as Candidate
from memmy.recall.candidate import RecallRequest as RecallRequest
from memmy.recall.candidate import RecallSettings as RecallSettings
from memmy.recall.channels import (
    ChannelHit,
    fts_channel,
    pattern_channel,
    structural_channel,
    vector_channel,
    vector_fill,
    window_cosines,
)
from memmy.recall.expansion import expansion_terms, prf_hits
from memmy.recall.freshness import freshness_factor
from memmy.recall.fusion import KEYWORD_CHANNELS as FUSION_KEYWORD_CHANNELS
from memmy.recall.fusion import calibrate, select, turn_tokens, window_positions
from memmy.store.memories import MemoryRepository
from memmy.store.reader import ReadOnlyDatabase
from memmy.store.vectors import Vector, VectorIndex

MODE_LAYERS: dict[str, tuple[str, ...]] = {
    "turn_start": ("Skill", "L2", "L1", "L3"),
    "search": ("Skill", "L2", "L1", "L3"),
    "tool_driven": ("L2", "L1", "L3"),
    "sub_agent": ("L2", "L1", "L3"),
    "skill_invoke": ("Skill", "L2", "L1"),
    "decision_repair": ("Skill", "L2", "L1"),
    "world_model": ("L3",),
}
RESEARCH_PROFILES: dict[str, tuple[str, ...] | None] = {
    "all": None,
    "experience": ("L2",),
    "skill": ("Skill",),
    "skill_experience": ("Skill", "L2"),
}
KEYWORD_CHANNELS = FUSION_KEYWORD_CHANNELS
#: The keyword work split between the two keyword workers: BM25 (fts) and exact tokens (pattern, structural).
KEYWORD_PARTS = ("fts", "tokens")
DAY_S = 86_400.0


@dataclass
class RecallOutcome:
    """Selected candidates plus everything ``--verbose`` shows."""

    selected: list[Candidate]
    candidate_ids: list[str]
    dropped: list[dict[str, Any]]
    status: list[str]
    timings_ms: dict[str, float]
    layers: tuple[str, ...]


def resolve_layers(mode: str, requested: Sequence[str], domain: str, profile: str) -> tuple[str, ...]:
    """Layers for a mode, intersected with the request and (research domain) the injection profile."""
    if mode not in MODE_LAYERS:
        raise ValueError(f"unknown retrieval mode {mode!r}: expected one of {', '.join(MODE_LAYERS)}")
    layers = MODE_LAYERS[mode]
    if requested:
        layers = tuple(layer for layer in layers if layer in requested)
    if domain == "research":
        allowed = RESEARCH_PROFILES.get(profile)
        if allowed is not None:
            layers = tuple(layer for layer in layers if layer in allowed)
    return layers


def _age_days(memory: Memory, now: float) -> float:
    try:
        ts = datetime.fromisoformat(memory.updated_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, (now - ts) / DAY_S)


def _value(memory: Memory) -> float:
    """A trace's value (0 when it has none)."""
    return stored.value(memory) or 0.0


def _outcome_parts(memory: Memory) -> list[str]:
    """The sentences of a trace's outcome as a rollup's text would carry them (each closed the same way)."""
    outcome = episode.trace_outcome(trace.of(memory))
    return [part.rstrip(".。") for part in SENTENCE_END.split(outcome) if part.strip()]


def _rank_key(channel: str) -> Callable[[Candidate], int]:
    return lambda cand: cand.ranks[channel]


class RecallEngine:
    """Runs one recall over the repository and the in-memory vector index."""

    def __init__(
        self,
        repo: MemoryRepository,
        index: Callable[[], VectorIndex | None],
        embed_query: Callable[[str], Vector | None],
    ) -> None:
        self.repo = repo
        self.index = index
        self.embed_query = embed_query
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memmy-recall-keyword")
        self._keyword_repos: list[MemoryRepository] = []  # [fts, pattern + structural]: one connection each
        self._reader_failed = False

    def recall(self, request: RecallRequest, settings: RecallSettings) -> RecallOutcome:
        """Run every stage and return the selected candidates (at most ``request.limit``)."""
        timings: dict[str, float] = {}
        status: list[str] = []
        dropped: list[dict[str, Any]] = []
        clock = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[stage] = round((now - clock) * 1000, 3)
            clock = now

        layers = request.layers
        if not layers:
            return RecallOutcome([], [], [], ["layers:none"], timings, layers)
        index = self.index()
        # The keyword channels need no query vector: they run in worker threads, each on its own read-only
        # connection to the store, while the query is embedded (SQLite, onnxruntime and BLAS all release the GIL),
        # so a recall costs about max(fts, embed + scan) instead of their sum. fts runs in one worker, pattern and
        # structural (when the query has terms for them) in the other, so a core that the embedding leaves idle
        # takes their share.
        readers = self._readers()
        keyword_jobs = []
        if readers:
            keyword_jobs.append(
                self._pool.submit(self._keyword_channels, request, settings, layers, readers[0], KEYWORD_PARTS[:1])
            )
            if self._token_work(request, layers):
                keyword_jobs.append(
                    self._pool.submit(self._keyword_channels, request, settings, layers, readers[1], KEYWORD_PARTS[1:])
                )
        query_vector: Vector | None = None
        if "vec" in request.channels and index is not None and len(index):
            query_vector = self.embed_query(request.query.vector_text)
            if query_vector is None:
                status.append("vector:unavailable")
        lap("embed")
        hits = self._vector_hits(request, settings, layers, index, query_vector)
        lap("vector")
        keyword_results = (
            [job.result() for job in keyword_jobs]
            if keyword_jobs
            else [self._keyword_channels(request, settings, layers, self.repo, KEYWORD_PARTS)]
        )
        keyword_memories: dict[str, Memory] = {}
        for keyword_hits, _ms, found in keyword_results:  # fts, then pattern and structural: the inline order
            hits.extend(keyword_hits)
            keyword_memories.update(found)
        keyword_ms = max(ms for _hits, ms, _found in keyword_results)
        if query_vector is not None and index is not None and "vec" in request.channels:
            hits.extend(vector_fill(hits, index, query_vector))
        timings["keyword"] = round(keyword_ms, 3)  # its own duration (the longer worker); it overlapped embed+vector
        lap("keyword_wait")
        timings["channels"] = round(timings["vector"] + timings["keyword_wait"], 3)  # the pre-parallel key

        # The keyword worker read its hits' rows already (the join that filtered them): only the rest is loaded.
        memories = {k: m for k, m in keyword_memories.items() if k not in request.exclude_ids}
        candidate_ids = self._load(hits, memories, request)
        if query_vector is not None and index is not None and self._windowed(request, settings):
            hits = window_cosines(hits, self._windows(hits, memories, request, settings), index, query_vector)
        lap("load")
        candidates = self._rank(hits, memories, request, settings, index, dropped)
        lap("fuse")
        expand = settings.query_expansion == "prf" and request.mode != "turn_start" and "fts" in request.channels
        if expand and candidates:
            # Pseudo-relevance feedback: words the best hits share but the query lacks widen the BM25 query
            # (recall/expansion.py); its hits are a separate, half-weight lexical channel, then everything is
            # ranked again. Not on turn_start: a second keyword pass does not fit the per-prompt budget.
            terms = expansion_terms(candidates, request.query.fts_terms)
            if terms:
                status.append(f"query_expansion:prf:{len(terms)}")
                scope = request.scope
                layered = dataclasses.replace(scope, layers=layers, include_pending_imports=False)
                limit = max(settings.keyword_top_k, sum(self._pools(request, settings, layers).values()))
                vectors = (index, query_vector) if "vec" in request.channels else None
                hits.extend(prf_hits(self.repo, [*request.query.fts_terms, *terms], layered, limit, hits, vectors))
                candidate_ids = self._load(hits, memories, request)
                dropped.clear()
                candidates = self._rank(hits, memories, request, settings, index, dropped)
            lap("expand")

        if request.admit is not None:  # the caller's gates (scope of derived memory, topic) before selection
            candidates = request.admit(candidates, status)
        selected = select(candidates, settings, request, dropped, self.repo.neighbours)
        selected = self._dedup(selected, dropped)
        lap("select")
        return RecallOutcome(selected[: request.limit], candidate_ids, dropped, status, timings, layers)

    # -- stages -----------------------------------------------------------------------------------
    def _rank(
        self,
        hits: list[ChannelHit],
        memories: dict[str, Memory],
        request: RecallRequest,
        settings: RecallSettings,
        index: VectorIndex | None,
        dropped: list[dict[str, Any]],
    ) -> list[Candidate]:
        """Score, calibrate, cap, roll up, weigh and threshold the hits of the loaded ``memories``."""
        candidates = self._score(hits, memories, request, settings, dropped)
        calibrate(candidates, settings, request.query.dates)
        candidates = self._pool_cap(candidates, settings, request.limit)
        rollups = self._episode_rollups(candidates, settings, index)
        candidates.extend(rollups)
        now = time.time()
        for cand in candidates:
            cand.rrf = sum(1.0 / (settings.rrf_constant + r + 1) for r in cand.ranks.values())
            cand.relevance = cand.fused + cand.bonus + 0.4 * cand.rrf
            cand.relevance *= freshness_factor(cand.memory, now)  # 1.0 unless the memory has a decay profile
        candidates = self._threshold(candidates, settings, dropped)
        if request.query.identifier_like and request.mode != "decision_repair":
            candidates = self._keyword_confirmation(candidates, dropped)
        return candidates

    def _load(self, hits: list[ChannelHit], memories: dict[str, Memory], request: RecallRequest) -> list[str]:
        """Load the visible candidates not yet in ``memories``; return every visible candidate id, in order."""
        candidate_ids = list(dict.fromkeys(h.memory_id for h in hits if h.memory_id not in request.exclude_ids))
        missing = [memory_id for memory_id in candidate_ids if memory_id not in memories]
        if missing:
            memories.update(self.repo.get_many(missing, request.scope))
        return [memory_id for memory_id in candidate_ids if memory_id in memories]

    @staticmethod
    def _windowed(request: RecallRequest, settings: RecallSettings) -> bool:
        """Whether trace hits come back as turn windows (not on turn start: see ``select``)."""
        return settings.context_window > 0 and request.mode != "turn_start" and "vec" in request.channels

    def _windows(
        self, hits: list[ChannelHit], memories: dict[str, Memory], request: RecallRequest, settings: RecallSettings
    ) -> dict[str, list[str]]:
        """``{memory id: ids of its turn window}`` for every loaded trace with a vector hit and a session.

        The same turns as ``MemoryRepository.neighbours``, read for all candidates' sessions in one query
        (``MemoryRepository.session_turn_sizes``) instead of one per trace.
        """
        traces = [
            memory
            for memory_id in dict.fromkeys(h.memory_id for h in hits if h.channel == "vec")
            if (memory := memories.get(memory_id)) is not None and memory.layer == "L1" and memory.session_id
        ]
        ordered = self.repo.session_turn_sizes(sorted({str(m.session_id) for m in traces}), "L1", request.scope)
        position = {turn[0]: (session, i) for session, turns in ordered.items() for i, turn in enumerate(turns)}
        windows: dict[str, list[str]] = {}
        for memory in traces:
            if memory.id in position:
                session, i = position[memory.id]
                turns = ordered[session]
                tokens = [turn_tokens(chars, size) for _, chars, size in turns]
                span = window_positions(tokens, i, settings.context_window, settings.context_window_tokens)
                windows[memory.id] = [turns[j][0] for j in span]
        return windows

    def _pools(self, request: RecallRequest, settings: RecallSettings, layers: tuple[str, ...]) -> dict[str, int]:
        return {layer: max(settings.pool(layer), 3 * request.limit) for layer in layers}

    def _vector_hits(
        self,
        request: RecallRequest,
        settings: RecallSettings,
        layers: tuple[str, ...],
        index: VectorIndex | None,
        query_vector: Vector | None,
    ) -> list[ChannelHit]:
        if "vec" not in request.channels:
            return []
        return vector_channel(index, query_vector, request.scope, self._pools(request, settings, layers))

    def _readers(self) -> list[MemoryRepository]:
        """Two repositories over read-only connections to the store, one per keyword worker (empty where they
        cannot be opened: the keyword channels then run inline)."""
        if not self._keyword_repos and not self._reader_failed:
            if self.repo.db.backend == "postgres":  # outside a transaction its reads run on pool connections at once
                self._keyword_repos = [MemoryRepository(self.repo.db) for _ in KEYWORD_PARTS]
                return self._keyword_repos
            try:
                self._keyword_repos = [MemoryRepository(ReadOnlyDatabase(self.repo.db.path)) for _ in KEYWORD_PARTS]
            except (StoreError, sqlite3.Error, AttributeError):
                self._reader_failed = True  # e.g. a store without a file: keyword channels run inline
        return self._keyword_repos

    @staticmethod
    def _token_work(request: RecallRequest, layers: tuple[str, ...]) -> bool:
        """Whether the pattern or structural channel has anything to look for."""
        pattern = "pattern" in request.channels and bool(request.query.pattern_terms)
        structural = "structural" in request.channels and "L1" in layers and bool(request.query.structural)
        return pattern or structural

    def close(self) -> None:
        """Stop the keyword workers and close their read-only connections."""
        self._pool.shutdown(wait=False)
        repos, self._keyword_repos = self._keyword_repos, []
        for repo in repos:
            if repo.db is not self.repo.db:  # (on PostgreSQL they share the store's pool)
                repo.db.close()

    def _keyword_channels(
        self,
        request: RecallRequest,
        settings: RecallSettings,
        layers: tuple[str, ...],
        repo: MemoryRepository,
        parts: Sequence[str],
    ) -> tuple[list[ChannelHit], float, dict[str, Memory]]:
        """The hits of the keyword channels in ``parts`` (``"fts"``; ``"tokens"``: pattern and structural) from
        ``repo``, how long they took (ms), and the hits' memories.

        The memories come from the join that filters each channel's hits (the layered scope, stricter than the
        request's scope), read here, beside the embedding, instead of once more by ``_load`` after it.
        """
        started = time.perf_counter()
        hits: list[ChannelHit] = []
        loaded: dict[str, Memory] = {}
        scope = request.scope
        layered = dataclasses.replace(scope, layers=layers, include_pending_imports=False)
        pools = self._pools(request, settings, layers)
        keyword_limit = max(settings.keyword_top_k, sum(pools.values()))
        if "fts" in parts and "fts" in request.channels:
            hits.extend(fts_channel(repo, request.query.fts_terms, layered, keyword_limit, loaded))
        if "tokens" in parts and "pattern" in request.channels:
            # Ranked by recency, not graded: it proposes no more candidates than one layer's pool keeps (its
            # 31st hit would add 0.5/31 of lexical evidence), so it reads a quarter of the rows BM25 does.
            pattern_limit = max(pools.values())
            hits.extend(pattern_channel(repo, request.query.pattern_terms, layered, pattern_limit, loaded))
        if "tokens" in parts and "structural" in request.channels and "L1" in layers:
            hits.extend(structural_channel(repo, request.query.structural, layered, loaded=loaded))
        return hits, (time.perf_counter() - started) * 1000, loaded

    def _score(
        self,
        hits: list[ChannelHit],
        memories: dict[str, Memory],
        request: RecallRequest,
        settings: RecallSettings,
        dropped: list[dict[str, Any]],
    ) -> list[Candidate]:
        now = time.time()
        by_id: dict[str, Candidate] = {}
        query_tags = set(request.query.tags)
        for hit in hits:
            memory = memories.get(hit.memory_id)
            if memory is None or memory.layer not in request.layers:
                continue
            if request.required_tags and not request.required_tags <= set(memory.tags):
                continue
            if hit.channel == "vec":
                floor = 0.15 if memory.layer == "L3" else settings.min_trace_sim
                if hit.score < floor:
                    continue
            cand = by_id.setdefault(memory.id, Candidate(memory))
            if hit.channel not in cand.channels or hit.score > cand.channels[hit.channel]:
                cand.channels[hit.channel] = hit.score
                cand.ranks[hit.channel] = hit.rank
        if query_tags and settings.tag_filter != "off":
            tagged = [
                c
                for c in by_id.values()
                if c.memory.layer == "L1" and "vec" in c.channels and query_tags & set(c.memory.tags)
            ]
            if tagged or settings.tag_filter == "on":
                for cand in by_id.values():
                    if cand.memory.layer == "L1" and "vec" in cand.channels and not query_tags & set(cand.memory.tags):
                        del cand.channels["vec"]
                        cand.ranks.pop("vec", None)
        kept: list[Candidate] = []
        for cand in by_id.values():
            if not cand.channels:
                continue
            reason = self._layer_gate(cand.memory, settings)
            if reason:
                dropped.append({"id": cand.memory.id, "reason": reason})
                continue
            cand.bonus = self._bonus(cand.memory, settings, now)
            kept.append(cand)
        # Keyword channels are re-ranked within each tier: BM25 keeps its score gaps (relative to the tier's
        # best match, so an exact match scores 1.0 and a weak one stays weak); pattern and structural hits,
        # which have no graded score, get 1/(rank+1).
        for channel in KEYWORD_CHANNELS:
            for tier in (1, 2, 3):
                ranked = [c for c in kept if channel in c.channels and c.tier == tier]
                ranked.sort(key=_rank_key(channel))
                top = ranked[0].channels[channel] if ranked else 0.0
                for position, cand in enumerate(ranked):
                    if channel in ("fts", "prf"):
                        cand.channels[channel] = cand.channels[channel] / top if top > 0 else 0.0
                    else:
                        cand.channels[channel] = 1.0 / (position + 1)
                    cand.ranks[channel] = position
        return kept

    @staticmethod
    def _layer_gate(memory: Memory, settings: RecallSettings) -> str | None:
        if memory.layer == "Skill":
            found = skill.of(memory)
            if not found.recallable:
                return "skill_not_active"
            if (1.0 if found.eta is None else found.eta) < settings.min_skill_eta:
                return "skill_eta_below_min"
        if memory.layer == "L3" and world.of(memory).confidence < settings.min_l3_confidence:
            return "l3_confidence_below_min"
        return None

    @staticmethod
    def _bonus(memory: Memory, settings: RecallSettings, now: float) -> float:
        if memory.layer == "Skill":
            eta = skill.of(memory).eta
            return settings.skill_eta_blend * (0.5 if eta is None else eta)
        if memory.layer == "L1":
            value = max(_value(memory), 0.0)
            decay = 0.5 ** (_age_days(memory, now) / 30.0)
            return float(min(settings.weight_priority, 0.3) * value * decay)
        if memory.layer == "L2":
            found = policy.of(memory)
            salience = found.gain
            if found.source == "feedback" or found.is_guardrail:
                salience = max(salience, found.salience, found.confidence)
            return 0.2 * min(1.0, max(0.0, salience))
        return 0.0

    @staticmethod
    def _pool_cap(candidates: list[Candidate], settings: RecallSettings, limit: int = 0) -> list[Candidate]:
        kept: list[Candidate] = []
        for tier in (1, 2, 3):
            tier_cands = [c for c in candidates if c.tier == tier]
            tier_cands.sort(key=lambda c: (-(c.fused + c.bonus), -len(c.channels), -c.channels.get("vec", 0.0)))
            cap = max(math.ceil(settings.tier_top_k[tier] * settings.candidate_pool_factor), 3 * limit)
            kept.extend(tier_cands[:cap])
        return kept

    @staticmethod
    def _episode_rollups(
        candidates: list[Candidate], settings: RecallSettings, index: VectorIndex | None
    ) -> list[Candidate]:
        traces = sorted(
            (c for c in candidates if c.memory.layer == "L1"), key=lambda c: -(max(c.channels.values()) + c.bonus)
        )[:5]
        groups: dict[str, list[Candidate]] = {}
        for cand in traces:
            episode_id = trace.episode_of(cand.memory)
            if episode_id:
                groups.setdefault(episode_id, []).append(cand)
        rollups: list[Candidate] = []
        for episode_id, members in groups.items():
            if len({m.memory.id for m in members}) < 2:
                continue
            rep = max(members, key=lambda c: (_value(c.memory), c.channels.get("vec", 0.0)))
            cosine = settings.scale.to_reference(rep.channels.get("vec", 0.0))  # the gate is a MiniLM cosine
            if cosine < settings.episode_goal_min_sim or _value(rep.memory) < 0:
                continue
            members.sort(key=lambda c: -(c.fused + c.bonus))
            best = members[0]  # the strongest match: the rollup ranks where it would, and shows it first
            steps = [
                episode.step_line(number, trace.of(member.memory), member.memory.summary)
                for number, member in enumerate(members[:6], start=1)
            ]
            rollup_memory = Memory(
                id=episode_id,
                layer="L1",
                content="\n".join(steps)[:800],
                title=f"{episode.TITLE_PREFIX}{rep.memory.summary}",
                created_at=rep.memory.created_at,
                updated_at=rep.memory.updated_at,
            )
            # It stands in only for the members whose conclusion its injected text carries; the rest stay.
            shown = whole_sentences(episode.line(rollup_memory))
            covered = [m.memory.id for m in members[:6] if all(part in shown for part in _outcome_parts(m.memory))]
            if not covered:
                continue
            rollup = Candidate(
                rollup_memory,
                channels=dict(best.channels),
                ranks=dict(best.ranks),
                source=EPISODE_SOURCE,
                rollup_of=covered,
                calibrated=dict(best.calibrated),
                fused=best.fused,
            )
            rollup.bonus = 0.3 * max(_value(m.memory) for m in members)
            rollups.append(rollup)
        return rollups

    @staticmethod
    def _threshold(
        candidates: list[Candidate], settings: RecallSettings, dropped: list[dict[str, Any]]
    ) -> list[Candidate]:
        if not candidates:
            return []
        top = max(c.relevance for c in candidates)
        floor = settings.relative_threshold_floor * top
        kept = []
        for cand in candidates:
            if cand.relevance >= floor or (settings.multi_channel_bypass and len(cand.channels) >= 2):
                kept.append(cand)
            else:
                dropped.append({"id": cand.memory.id, "reason": "rank_threshold"})
        return kept

    @staticmethod
    def _keyword_confirmation(candidates: list[Candidate], dropped: list[dict[str, Any]]) -> list[Candidate]:
        kept = []
        for cand in candidates:
            if cand.memory.layer in ("L1", "L2") and not KEYWORD_CHANNELS & set(cand.channels):
                dropped.append({"id": cand.memory.id, "reason": "keyword_unconfirmed"})
            else:
                kept.append(cand)
        return kept

    @staticmethod
    def _dedup(selected: list[Candidate], dropped: list[dict[str, Any]]) -> list[Candidate]:
        rolled: set[str] = set()  # traces a rollup selected before them stands in for
        shown: set[str] = set()
        skill_policies: dict[str, str] = {}
        for cand in selected:
            if cand.memory.layer == "Skill":
                for policy_id in skill.of(cand.memory).source_policy_ids:
                    skill_policies[policy_id] = cand.memory.updated_at
        kept = []
        seen_exchanges: set[str] = set()
        for cand in selected:
            if cand.rollup_of:  # members selected before it keep their place; it stands in for the others
                rest = [mid for mid in cand.rollup_of if mid not in shown]
                if not rest:
                    dropped.append({"id": cand.memory.id, "reason": "episode_members_shown"})
                    continue
                rolled.update(rest)
            elif cand.memory.id in rolled:
                dropped.append({"id": cand.memory.id, "reason": "covered_by_episode_rollup"})
                continue
            shown.add(cand.memory.id)
            if cand.memory.layer == "L1" and not cand.rollup_of:
                exchange = " ".join(trace.of(cand.memory).exchange(cand.memory.content).split())
                if exchange in seen_exchanges:  # the same exchange captured again (another session) adds nothing
                    dropped.append({"id": cand.memory.id, "reason": "duplicate_exchange"})
                    continue
                seen_exchanges.add(exchange)
            skill_time = skill_policies.get(cand.memory.id)
            if cand.memory.layer == "L2" and skill_time is not None and cand.memory.updated_at <= skill_time:
                dropped.append({"id": cand.memory.id, "reason": "covered_by_skill"})
                continue
            kept.append(cand)
        return kept
