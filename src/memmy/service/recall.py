"""Recall operations of the facade: scope resolution, the pipeline, optional LLM steps, rendering, logging."""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memmy.capture.sanitize import sanitize_text
from memmy.commands.answers import SearchAnswer
from memmy.commands.memory import RecallOptions, SearchMemory
from memmy.config import Configured, Settings
from memmy.domain import sha256_hex
from memmy.embed.scale import SimilarityScale
from memmy.errors import InvalidArgument
from memmy.evolve.scope import visible_in
from memmy.evolve.topics import STRONG_SIMILARITY, Topic, content_keywords, evidence_covers
from memmy.indexing import Indexer
from memmy.kinds import memory as stored
from memmy.kinds import policy
from memmy.namespace import Namespace
from memmy.recall.channels import CHANNELS
from memmy.recall.llm_steps import extract_query, merge_by_rrf, relevance_filter, rewrite_queries
from memmy.recall.pipeline import (
    Candidate,
    RecallEngine,
    RecallRequest,
    RecallSettings,
    resolve_layers,
)
from memmy.recall.query import PreparedQuery, prepare_query
from memmy.recall.render import RenderItem, render_context, snippet
from memmy.service.models import ModelClients
from memmy.store.db import utc_now
from memmy.store.memories import MemoryFilter
from memmy.store.text import CJK_RUN, cjk_bigrams, without_markers
from memmy.store.unit import Store

SCOPES = ("auto", "pooled", "project", "agent")


def hit_of(candidate: Candidate) -> dict[str, Any]:
    """The ``RecallHit`` shape, plus per-channel scores."""
    memory = candidate.memory
    return {
        "id": memory.id,
        "kind": "episode" if candidate.source == "episode" else memory.kind,
        "memoryLayer": memory.layer,
        "status": memory.status,
        "title": memory.title or memory.summary,
        "snippet": snippet(memory),
        "score": round(candidate.relevance, 4),
        "channels": {k: round(v, 4) for k, v in candidate.channels.items()},
        "tags": memory.tags,
        "updatedAt": memory.updated_at,
        "source": candidate.source,
        "sourceAgent": memory.source_agent,
        "projectId": memory.project_id,
        "sessionId": memory.session_id,
        "createdAt": memory.created_at,
        **({"window": [m.id for m in candidate.window]} if len(candidate.window) > 1 else {}),
    }


@dataclass
class SearchResult:
    """A rendered recall, as turn start and memory search both need it."""

    candidates: list[Candidate]
    candidate_ids: list[str]
    markdown: str
    sections: list[str]
    token_estimate: int
    status: list[str]
    search_event_id: str
    dropped: list[dict[str, Any]]
    scope: str
    layers: list[str]
    query: PreparedQuery
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def hits(self) -> list[dict[str, Any]]:
        """Hits in API shape."""
        return [hit_of(c) for c in self.candidates]

    @property
    def source_memory_ids(self) -> list[str]:
        """Ids rendered into the context."""
        return [c.memory.id for c in self.candidates]

    def debug(self) -> dict[str, Any]:
        """The ``--verbose`` payload."""
        return {
            "searchEventId": self.search_event_id,
            "scope": self.scope,
            "layers": self.layers,
            "query": self.query.to_debug(),
            "candidateMemoryIds": self.candidate_ids,
            "hits": self.hits,
            "channels": [c.to_debug() for c in self.candidates],
            "dropped": self.dropped,
            "sourceMemoryIds": self.source_memory_ids,
            "status": self.status,
            "sections": self.sections,
            "tokenEstimate": self.token_estimate,
            "timingsMs": self.timings_ms,
            "serverTime": utc_now(),
        }


def mostly_cjk(text: str) -> bool:
    """True when most letters of ``text`` are CJK (the English MiniLM cannot judge such text by meaning)."""
    letters = [ch for ch in text if ch.isalpha()]
    return bool(letters) and sum(1 for ch in letters if CJK_RUN.match(ch)) * 2 > len(letters)


def keyword_coverage(memory_text: str, keywords: Sequence[str]) -> float:
    """Share of the prompt's keyword units found in the memory: words, and CJK runs as their bigrams (Chinese
    has no spaces, so a run like 部署生产环境之前要做 is judged by 部署, 生产, 环境 ... rather than whole)."""
    units = [unit for k in keywords for unit in (cjk_bigrams(k) if CJK_RUN.fullmatch(k) else [k.lower()])]
    if not units:
        return 0.0
    lowered = without_markers(memory_text).lower()
    return sum(1 for unit in units if unit in lowered) / len(units)


GUIDANCE_LAYERS = frozenset({"L2", "Skill"})


def semantic_gate(
    selected: list[Candidate],
    min_sim: float,
    has_vector: Callable[[str], bool],
    query: PreparedQuery,
    vocabulary: str | None = None,
    scale: SimilarityScale = SimilarityScale(),  # noqa: B008 - frozen, so one shared default is safe
) -> tuple[list[Candidate], int]:
    """Injection stays silent on mere word overlap: keep a hit only if its meaning matches the prompt (vector
    similarity >= ``min_sim``, a MiniLM cosine: another model's is put on that scale by ``scale``) or the
    prompt's error text, path or code was found in it (structural channel).

    BM25 is normalised per query, so the best keyword match of an unrelated prompt still scores 1.0; without an
    LLM filter this gate is what keeps off-topic prompts from receiving memory. Memories that have no vector yet
    are judged by their keyword evidence alone. Derived guidance (policies, skills) is also kept when its
    evidence (the tasks it was seen in, their commands, files and error) covers the prompt's content words
    (:func:`memmy.evolve.topics.evidence_covers`): a repeat of a task is recognised by what the task touched,
    not only by how it was worded, in both languages.
    """

    def by_evidence(c: Candidate) -> bool:
        return c.memory.layer in GUIDANCE_LAYERS and evidence_covers(query.text, _topic_text(c), vocabulary)

    if mostly_cjk(query.text):  # MiniLM maps most CJK text to the same unknown tokens: use keyword coverage
        kept = [c for c in selected if keyword_coverage(c.memory.content, query.keywords) >= 0.5 or by_evidence(c)]
        return kept, len(selected) - len(kept)
    kept = [
        c
        for c in selected
        if reference_similarity(c, scale) >= min_sim
        or "structural" in c.channels
        or (not c.rollup_of and not has_vector(c.memory.id))  # not embedded yet: keyword evidence decides
        or by_evidence(c)
    ]
    return kept, len(selected) - len(kept)


_ERROR_PART = re.compile(r"[(（]([^()（）]+)[)）]?\s*[.。]?\s*$")


def restates_failure(properties: dict[str, Any], prompt: str) -> bool:
    """Whether a failure-avoidance policy with no fix (Avoid lines, no Prefer) only tells the agent what the
    prompt already says: the failure its first Avoid line names (the error in its closing parentheses) shares
    content words with the prompt ("生产构建又内存不足了" and "… JavaScript heap out of memory 内存不足"). Such a
    line warns of nothing the user has not just reported; one whose failure the prompt does not mention warns of
    it, and one without an error (a feedback note: "never delete the lock table") is guidance of its own."""
    found = policy.Policy.of(properties)
    if not found.is_guardrail or found.preference or not found.anti_pattern:
        return False
    error = _ERROR_PART.search(found.anti_pattern[0])
    return error is not None and bool(content_keywords(error.group(1)) & content_keywords(prompt))


def reference_similarity(candidate: Candidate, scale: SimilarityScale) -> float:
    """The candidate's cosine to the prompt as all-MiniLM-L6-v2 would score it (``scale``), 0 without one: the
    scale the gates' thresholds are set on."""
    return scale.to_reference(candidate.channels["vec"]) if "vec" in candidate.channels else 0.0


def _topic_text(candidate: Candidate) -> str:
    memory = candidate.memory
    return f"{memory.title}\n{memory.content}\n{stored.embedding_text(memory.properties)}"[:6000]


def vocabulary_of(candidates: list[Candidate]) -> str:
    """The lower-cased text of every candidate of a recall: which of the prompt's words the store knows."""
    return "\n".join(_topic_text(c) for c in candidates).lower()


def recall_reason(
    candidate: Candidate,
    query: PreparedQuery,
    scale: SimilarityScale = SimilarityScale(),  # noqa: B008 - frozen, so one shared default is safe
) -> str:
    """One line on why a memory was recalled: the prompt words it shares, its meaning match, its layer.

    A meaning match is called similar only at ``STRONG_SIMILARITY`` (a MiniLM cosine, another model's read on
    that scale through ``scale``); below it the line says the meaning is only loosely related, so a score
    that merely ranked the memory is not passed off as relevance."""
    memory = candidate.memory
    text = without_markers(f"{memory.title}\n{memory.content}").lower()
    words = [k for k in query.keywords if len(k) >= 3 and k.lower() in text][:3]
    parts = []
    if words:
        parts.append("shares " + ", ".join(f'"{w}"' for w in words))
    if candidate.channels.get("vec", 0.0) > 0:
        close = reference_similarity(candidate, scale) >= STRONG_SIMILARITY
        parts.append(f"{'similar' if close else 'loosely related'} meaning ({candidate.channels['vec']:.2f})")
    if "structural" in candidate.channels:
        parts.append("same error or path")
    kind = {"L2": "learned policy", "L3": "environment note", "Skill": "skill"}.get(memory.layer)
    if candidate.source == "episode":
        kind = "similar past task"
    if kind:
        parts.append(kind)
    return "; ".join(parts)


class RecallOps(Configured):
    """Runs recalls for ``memory/search`` and ``turns/start``.

    LLM steps use ``models`` (budgeted clients, shared with the facade, which refreshes them on reload).
    """

    def __init__(self, settings: Settings, store: Store, indexer: Indexer, models: ModelClients) -> None:
        self.settings = settings
        self.models = models
        self.logs = store.logs
        self.indexer = indexer
        self.engine = RecallEngine(store.memories, lambda: indexer.index, indexer.embed_query)

    def scope_filter(self, options: RecallOptions, ns: Namespace) -> tuple[str, MemoryFilter]:
        """Resolve the scope (auto -> project inside a repository, else pooled) into a filter."""
        scope = options.scope or self.config.retrieval.default_scope
        if scope not in SCOPES:
            raise InvalidArgument(f"scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
        if scope == "auto":
            explicit_project = ns.project_id is not None and (ns.workspace_path is None or ns.team_project is not None)
            scope = "project" if ns.in_repository or explicit_project else "pooled"
        who = MemoryFilter(reader=ns.reader, team_project=ns.team_project)
        if scope == "project":
            if not ns.project_id:
                raise InvalidArgument("scope 'project' needs a project: send workspacePath or x-memmy-project-id")
            return scope, dataclasses.replace(who, project_id=ns.project_id)
        if scope == "agent":
            return scope, dataclasses.replace(who, source_agent=ns.source)
        return scope, who

    def run(
        self,
        query: str,
        *,
        options: RecallOptions,
        ns: Namespace,
        limit: int,
        layers: Sequence[str],
        mode: str,
        session_id: str | None = None,
        turn_id: str | None = None,
        exclude_ids: frozenset[str] = frozenset(),
    ) -> SearchResult:
        """Prepare the query, run the pipeline (+ optional LLM steps), render and log one recall."""
        started = time.perf_counter()
        retrieval = self.config.retrieval
        scope, flt = self.scope_filter(options, ns)
        status: list[str] = [f"scope:{scope}"]
        prepared = prepare_query(query, options.context_hints)
        hook_path = mode == "turn_start" and not retrieval.llm_in_hook_path
        timeout_s = retrieval.llm_timeout_ms / 1000
        evolution_llm = None if hook_path else self.models.evolution
        filter_llm = None if hook_path else (self.models.summary or evolution_llm)
        if evolution_llm is not None and retrieval.llm_query_extract:
            prepared, extract_status = extract_query(evolution_llm, prepared, timeout_s)
            status.append(extract_status)
        channels = frozenset(options.channels or CHANNELS)
        resolved = resolve_layers(mode, layers, self.config.domain, retrieval.read_only_injection_profile)
        scale = self.indexer.cosine_scale("query-passage")  # of the model that made the vectors searched
        settings = dataclasses.replace(RecallSettings.from_config(self.config.algorithm), scale=scale)
        tags = frozenset(options.tags)
        request = RecallRequest(
            prepared,
            mode,
            resolved,
            limit,
            flt,
            exclude_ids,
            channels,
            self.config.domain,
            tags,
            admit=self._admission(query, prepared, flt.project_id, settings.scale, gated=mode == "turn_start"),
        )
        outcome = self.engine.recall(request, settings)
        selected = outcome.selected
        status.extend(outcome.status)
        if evolution_llm is not None and self.config.flags.enable_query_rewrite:
            rewrites, rewrite_status = rewrite_queries(evolution_llm, query, timeout_s)
            status.append(rewrite_status)
            if rewrites:
                extra = [
                    self.engine.recall(dataclasses.replace(request, query=prepare_query(q)), settings).selected
                    for q in rewrites
                ]
                selected = merge_by_rrf([selected, *extra], limit)
        selected, filter_status = relevance_filter(
            filter_llm,
            query,
            selected,
            self.config.algorithm["retrieval"],
            timeout_s,
            apply_fallback_cap=mode == "turn_start",
        )
        status.append(filter_status)
        rendered = render_context(
            [RenderItem(c.memory, c.source, recall_reason(c, prepared, settings.scale), c.relevance) for c in selected],
            mode=mode,
            skill_mode=retrieval.skill_injection_mode,
            skill_summary_chars=retrieval.skill_summary_chars,
            token_budget=retrieval.injection_token_budget if mode != "search" else 0,
        )
        timings = dict(outcome.timings_ms)
        timings["total"] = round((time.perf_counter() - started) * 1000, 3)
        with self.logs.together():  # the API log and the recall event: one round trip on PostgreSQL
            self.logs.api_call(
                "memory_search",
                ns.source,
                {"query": query[:500], "layers": list(resolved), "limit": limit, "scope": scope, "mode": mode},
                {
                    "candidates": len(outcome.candidate_ids),
                    "filtered": [c.memory.id for c in selected],
                    "dropped": outcome.dropped[:50],
                    "status": status,
                    "stats": timings,
                },
                timings["total"],
                True,
                ns.user_id,
            )
            event_id = self.logs.recall_event(
                session_id=session_id,
                turn_id=turn_id,
                user_id=ns.user_id,
                query=query,
                query_hash=sha256_hex(query),
                layers=list(resolved),
                candidate_ids=outcome.candidate_ids,
                hit_ids=[c.memory.id for c in outcome.selected],
                injected_ids=[c.memory.id for c in selected],
                request={
                    "limit": limit,
                    "scope": scope,
                    "mode": mode,
                    "source": ns.source,
                    "topScore": round(selected[0].relevance, 4) if selected else None,
                    "dropped": outcome.dropped,
                    "injectedText": rendered.markdown,
                    "tokens": rendered.token_estimate,
                    "latencyMs": timings["total"],
                },
            )
        return SearchResult(
            candidates=selected,
            candidate_ids=outcome.candidate_ids,
            markdown=rendered.markdown,
            sections=rendered.sections,
            token_estimate=rendered.token_estimate,
            status=status,
            search_event_id=event_id,
            dropped=outcome.dropped,
            scope=scope,
            layers=list(resolved),
            query=prepared,
            timings_ms=timings,
        )

    def _admission(
        self, query: str, prepared: PreparedQuery, project_id: str | None, scale: SimilarityScale, *, gated: bool
    ) -> Callable[[list[Candidate], list[str]], list[Candidate]]:
        """The rules a candidate must pass before selection: derived memory resting on other projects stays
        there (evolve/scope.py); at turn start, the semantic gate and the topic gate (what the agent reads must
        be on topic; cosines judged on MiniLM's scale through ``scale``). Each drop is counted in the status."""
        retrieval = self.config.retrieval
        gate = gated and retrieval.injection_semantic_gate

        def admit(candidates: list[Candidate], status: list[str]) -> list[Candidate]:
            if project_id is not None:
                candidates = [c for c in candidates if visible_in(c.memory.properties, project_id)]
            vocabulary = vocabulary_of(candidates) if gate else None
            if gate and "vector:unavailable" not in status:
                index = self.engine.index()
                listed = [c.memory.id for c in candidates]
                # on first use, one look-up for every candidate (on PostgreSQL each is a round trip to the server)
                with_vectors = functools.cache(lambda: index.having_vectors(listed) if index is not None else set())
                candidates, dropped = semantic_gate(
                    candidates,
                    retrieval.min_trace_sim,
                    lambda mid: mid in with_vectors(),
                    prepared,
                    vocabulary,
                    scale,
                )
                if dropped:
                    status.append(f"semantic_gate:dropped:{dropped}")
            if gate:
                before = len(candidates)
                topic = Topic.of(query, vocabulary)  # the prompt's words are read once, not once per candidate
                candidates = [c for c in candidates if topic.covers(_topic_text(c), reference_similarity(c, scale))]
                if len(candidates) < before:
                    status.append(f"topic_gate:dropped:{before - len(candidates)}")
            if gate:
                before = len(candidates)
                candidates = [c for c in candidates if not restates_failure(c.memory.properties, query)]
                if len(candidates) < before:
                    status.append(f"restated_failure:dropped:{before - len(candidates)}")
            return candidates

        return admit

    def search(self, cmd: SearchMemory, ns: Namespace) -> SearchAnswer:
        """``POST /memory/search``: the recall pipeline rendered as injectable markdown."""
        started = time.perf_counter()
        ns = ns.with_body(cmd.source, cmd.workspace_path)
        query = sanitize_text(cmd.query)
        if not self.config.flags.enable_memory_search:
            return {
                "injectedContext": "",
                "hits": [],
                "sourceMemoryIds": [],
                "status": ["memory_search:disabled"],
                "serverTime": utc_now(),
            }
        if not query:
            raise InvalidArgument("query: nothing left after removing injected memmy context")
        result = self.run(
            query,
            options=cmd.options,
            ns=ns,
            limit=cmd.limit,
            layers=cmd.layers,
            mode=cmd.mode,
            session_id=cmd.session_id,
        )
        duration = (time.perf_counter() - started) * 1000
        response: SearchAnswer = {
            "injectedContext": result.markdown,
            "hits": result.hits,
            "sourceMemoryIds": result.source_memory_ids,
            "status": result.status,
            "serverTime": utc_now(),
        }
        if cmd.verbose:
            response["debug"] = {**result.debug(), "durationMs": round(duration, 2)}
        return response
