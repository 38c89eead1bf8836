"""Read-only views of the memories the evolution rules work on (with their vectors); the drafts they return are
the kinds' own (:mod:`memmy.kinds`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memmy.kinds.policy import PolicyDraft as PolicyDraft
from memmy.kinds.skill import SkillDraft as SkillDraft
from memmy.kinds.world import WorldModelDraft as WorldModelDraft

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
