"""What the recall stages pass along: the request, the retrieval settings and one candidate with its evidence.

A leaf of ``recall/``: the pipeline builds these, and fusion, expansion and the optional LLM steps read them, so
none of those imports the pipeline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memmy.domain import Memory
from memmy.embed.scale import SimilarityScale
from memmy.recall.query import PreparedQuery
from memmy.store.memories import MemoryFilter

TIER_OF = {"Skill": 1, "L2": 2, "L1": 2, "L3": 3}


@dataclass(frozen=True)
class RecallSettings:
    """Retrieval settings (``algorithm.retrieval`` plus two thresholds from other sections)."""

    tier_top_k: dict[int, int]
    candidate_pool_factor: int
    weight_priority: float
    mmr_lambda: float
    rrf_constant: int
    relative_threshold_floor: float
    min_skill_eta: float
    min_trace_sim: float
    min_l3_confidence: float
    episode_goal_min_sim: float
    tag_filter: str
    keyword_top_k: int
    skill_eta_blend: float
    smart_seed: bool
    smart_seed_ratio: float
    multi_channel_bypass: bool
    read_only_profile: str
    context_window: int = 1
    context_window_tokens: int = 256
    #: How many of the best trace results bring their turn window (0 = every one).
    context_window_results: int = 1
    query_expansion: str = "off"
    #: Where the embedding model's cosines stand on MiniLM's (``from_reference(minTraceSim)`` is fusion's zero).
    scale: SimilarityScale = field(default_factory=SimilarityScale)

    @classmethod
    def from_config(cls, algorithm: dict[str, Any]) -> RecallSettings:
        """Read the settings from the merged ``algorithm`` config tree (hot-reloadable)."""
        r = algorithm["retrieval"]
        return cls(
            tier_top_k={1: int(r["tier1TopK"]), 2: int(r["tier2TopK"]), 3: int(r["tier3TopK"])},
            candidate_pool_factor=int(r["candidatePoolFactor"]),
            weight_priority=float(r["weightPriority"]),
            mmr_lambda=float(r["mmrLambda"]),
            rrf_constant=int(r["rrfConstant"]),
            relative_threshold_floor=float(r["relativeThresholdFloor"]),
            min_skill_eta=float(r["minSkillEta"]),
            min_trace_sim=float(r["minTraceSim"]),
            min_l3_confidence=float(algorithm["l3Abstraction"]["minConfidenceForRetrieval"]),
            episode_goal_min_sim=float(r["episodeGoalMinSim"]),
            tag_filter=str(r["tagFilter"]),
            keyword_top_k=int(r["keywordTopK"]),
            skill_eta_blend=float(r["skillEtaBlend"]),
            smart_seed=bool(r["smartSeed"]),
            smart_seed_ratio=float(r["smartSeedRatio"]),
            multi_channel_bypass=bool(r["multiChannelBypass"]),
            read_only_profile=str(r["readOnlyInjectionProfile"]),
            context_window=max(0, int(r.get("contextWindow", 1))),
            context_window_tokens=max(0, int(r.get("contextWindowTokens", 256))),
            context_window_results=max(0, int(r.get("contextWindowResults", 1))),
            query_expansion=str(r.get("queryExpansion", "off")),
        )

    def pool(self, layer: str) -> int:
        """Per-layer candidate pool: ``ceil(tierTopK x candidatePoolFactor)``."""
        return math.ceil(self.tier_top_k[TIER_OF[layer]] * self.candidate_pool_factor)


@dataclass
class Candidate:
    """One memory with its channel evidence and scores."""

    memory: Memory
    channels: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    bonus: float = 0.0
    rrf: float = 0.0
    relevance: float = 0.0
    mmr: float = 0.0
    source: str = "search"
    rollup_of: list[str] = field(default_factory=list)
    calibrated: dict[str, float] = field(default_factory=dict)
    fused: float = 0.0
    window: list[Memory] = field(default_factory=list)

    @property
    def tier(self) -> int:
        """1 = Skill, 2 = L2/L1, 3 = L3."""
        return TIER_OF[self.memory.layer]

    def to_debug(self) -> dict[str, Any]:
        """Per-channel evidence for ``--verbose``."""
        return {
            "id": self.memory.id,
            "layer": self.memory.layer,
            "channels": {k: round(v, 4) for k, v in self.channels.items()},
            "ranks": self.ranks,
            "bonus": round(self.bonus, 4),
            "rrf": round(self.rrf, 4),
            "calibrated": {k: round(v, 4) for k, v in self.calibrated.items()},
            "fused": round(self.fused, 4),
            "relevance": round(self.relevance, 4),
            "source": self.source,
            "window": [m.id for m in self.window],
        }


@dataclass(frozen=True)
class RecallRequest:
    """What to recall and under which constraints."""

    query: PreparedQuery
    mode: str
    layers: tuple[str, ...]
    limit: int
    scope: MemoryFilter
    exclude_ids: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset({"vec", "fts", "pattern", "structural"})
    domain: str = ""
    required_tags: frozenset[str] = frozenset()
    # the caller's admission rules (scope of derived memory, injection gates), applied before selection so
    # that a candidate they would drop takes no slot and hides nothing (a skill that covers a policy)
    admit: Callable[[list[Candidate], list[str]], list[Candidate]] | None = None
