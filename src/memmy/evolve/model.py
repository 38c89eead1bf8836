"""Read-only views of the memories the evolution rules work on, and the drafts they return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


@dataclass
class TraceView:
    """One L1 trace (one captured turn) as the evolution rules see it."""

    id: str
    episode_id: str | None
    session_id: str | None
    created_at: str  # ISO-8601 UTC
    user_text: str
    agent_text: str
    summary: str
    tags: list[str]
    signature: str  # "primaryTag|secondaryTag|tool|errCode", "_" for a missing part
    error_signatures: list[str]
    tool_calls: list[dict[str, Any]]  # normalised: name, input, output, error, success, errorCode
    status: str = "succeeded"  # turn status: succeeded | failed | cancelled
    reflection: str | None = None  # IRRELEVANT | RELATED | PIVOTAL | RELATED_DEFAULT | free text
    alpha: float = 0.0
    value: float = 0.0
    priority: float = 0.5
    vector: Vector | None = None  # unit-length vec_summary, when embedded


@dataclass
class PolicyView:
    """One L2 policy (experience) as the evolution rules see it."""

    id: str
    title: str
    trigger: str
    procedure: str
    verification: str = ""
    boundary: str = ""
    experience_type: str = "success_pattern"  # success_pattern | failure_avoidance | preference | repair_instruction
    signature: str = ""
    status: str = "candidate"  # candidate | active | archived
    support: int = 0
    gain: float = 0.0
    raw_gain: float = 0.0
    confidence: float = 0.5
    preference: list[str] = field(default_factory=list)
    anti_pattern: list[str] = field(default_factory=list)
    source_episode_ids: list[str] = field(default_factory=list)
    source_trace_ids: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    vector: Vector | None = None
    updated_at: str = ""


@dataclass
class PolicyDraft:
    """A policy to create or merge: what induction (heuristic or LLM) produced."""

    title: str
    trigger: str
    procedure: str
    verification: str
    boundary: str
    experience_type: str
    evidence_polarity: str  # positive | negative | mixed
    signature: str
    confidence: float
    support_trace_ids: list[str]
    caveats: list[str] = field(default_factory=list)
    preference: list[str] = field(default_factory=list)
    anti_pattern: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    origin: str = "heuristic"  # heuristic | llm


@dataclass
class WorldModelDraft:
    """An L3 world-model note over one domain bucket of active policies."""

    domain_key: str
    title: str
    body: str
    domain_tags: list[str]
    environment: list[dict[str, Any]]
    inference: list[dict[str, Any]]
    constraints: list[dict[str, Any]]
    policy_ids: list[str]
    cohesion: float
    confidence: float
    admission: str  # strict | loose
    origin: str = "heuristic"
    supersedes: list[str] = field(default_factory=list)  # ids of other world models this note replaces


@dataclass
class SkillDraft:
    """A Skill crystallised from one active policy."""

    policy_id: str
    name: str  # snake_case, <= 48 chars
    summary: str
    trigger_context: str
    steps: list[dict[str, str]]  # [{title, body}], 2-6
    tools: list[str]
    preconditions: list[str]
    examples: list[str]
    preference: list[str]
    anti_pattern: list[str]
    tags: list[str]
    eta: float
    invocation_guide: str  # markdown rendered from the above
    evidence_trace_ids: list[str]
    origin: str = "heuristic"
