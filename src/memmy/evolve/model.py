"""The memories the evolution rules work on: the kinds' own payloads (:mod:`memmy.kinds`), with the memory's id,
time and index vector beside them; the drafts the rules return are the kinds' own too.

A rule that reads only a payload takes :class:`~memmy.kinds.trace.Trace` or :class:`~memmy.kinds.policy.Policy`;
one that also needs which memory it is (its id, time, session) or its vector takes the indexed form below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from memmy.kinds.policy import Policy
from memmy.kinds.policy import PolicyDraft as PolicyDraft
from memmy.kinds.skill import SkillDraft as SkillDraft
from memmy.kinds.trace import Trace
from memmy.kinds.world import WorldModelDraft as WorldModelDraft

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class IndexedTrace(Trace):
    """An L1 trace (one captured turn) with its memory's id, session, time and unit-length summary vector."""

    id: str = ""
    session_id: str | None = None
    created_at: str = ""  # ISO-8601 UTC
    status: str = "succeeded"  # the rules read a turn without a recorded status as succeeded
    vector: Vector | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class IndexedPolicy(Policy):
    """An L2 policy (experience) with its memory's id, tags, last update and vector."""

    id: str = ""
    tags: tuple[str, ...] = ()
    updated_at: str = ""
    vector: Vector | None = field(default=None, compare=False, repr=False)
