"""Confirmation freshness (keymem's decay profiles), shared by the recall pipeline and the key graph.

A memory's freshness decays from its last confirmation with the half-life of its decay profile
(transient 7 d, standard 90 d, stable 365 d, permanent never). It is soft: ranking is multiplied by
``0.2 + 0.8 x freshness`` and nothing is ever deleted for being old. The state lives in the memory's
``properties["validity"]`` (``decayProfile``, ``lastConfirmedAt``, ``confirmationCount``); a memory without
an explicit profile is shown as ``standard`` from its ``valid_from`` but is not re-ranked by the pipeline.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from memmy.domain import Memory
from memmy.kinds import memory as stored

HALF_LIFE_DAYS: dict[str, float | None] = {"transient": 7.0, "standard": 90.0, "stable": 365.0, "permanent": None}
DECAY_PROFILES: tuple[str, ...] = tuple(HALF_LIFE_DAYS)
DEFAULT_PROFILE = "standard"
FRESH_AT = 0.5
AGING_AT = 0.125
DAY_S = 86_400.0


def parse_time(value: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 timestamp, or None."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def freshness(profile: str, age_days: float) -> float:
    """``0.5 ** (age / half-life)``; 1.0 for ``permanent``."""
    half_life = HALF_LIFE_DAYS.get(profile, HALF_LIFE_DAYS[DEFAULT_PROFILE])
    if half_life is None:
        return 1.0
    return float(0.5 ** (max(0.0, age_days) / half_life))


def status_of(value: float) -> str:
    """fresh (>= 0.5), aging (>= 0.125) or stale."""
    if value >= FRESH_AT:
        return "fresh"
    if value >= AGING_AT:
        return "aging"
    return "stale"


def explicit_profile(memory: Memory) -> str | None:
    """The memory's decay profile when one was set explicitly (key-graph memories), else None."""
    state = stored.validity(memory.properties)
    if state is not None:
        profile = state.get("decayProfile")
        if isinstance(profile, str) and profile in HALF_LIFE_DAYS:
            return profile
    return None


def _state(memory: Memory) -> tuple[str, str | None, int]:
    state = stored.validity(memory.properties) or {}
    profile = explicit_profile(memory) or DEFAULT_PROFILE
    confirmed = state.get("lastConfirmedAt")
    last = confirmed if isinstance(confirmed, str) else (memory.valid_from or memory.created_at or None)
    count = state.get("confirmationCount")
    return profile, last, int(count) if isinstance(count, int) and not isinstance(count, bool) else 0


def memory_freshness(memory: Memory, now: float | None = None) -> float:
    """Freshness of a memory now (1.0 when the time is unknown)."""
    profile, last, _count = _state(memory)
    confirmed = parse_time(last)
    if confirmed is None:
        return 1.0
    return freshness(profile, ((now if now is not None else time.time()) - confirmed) / DAY_S)


def freshness_factor(memory: Memory, now: float | None = None) -> float:
    """Ranking factor ``0.2 + 0.8 x freshness`` for memories with a decay profile; 1.0 for the others."""
    if explicit_profile(memory) is None:
        return 1.0
    return 0.2 + 0.8 * memory_freshness(memory, now)


def validity_payload(memory: Memory, now: float | None = None) -> dict[str, Any]:
    """keymem's ``validity`` object: freshness, status, age, confirmation and verification advice."""
    current = now if now is not None else time.time()
    profile, last, count = _state(memory)
    confirmed = parse_time(last)
    age_days = max(0.0, (current - confirmed) / DAY_S) if confirmed is not None else 0.0
    value = freshness(profile, age_days) if confirmed is not None else 1.0
    status = status_of(value)
    return {
        "freshness": round(value, 4),
        "status": status,
        "age_days": round(age_days, 3),
        "last_confirmed_at": last,
        "confirmation_count": count,
        "decay_profile": profile,
        "verification_recommended": status != "fresh",
        "verification_required": status == "stale",
    }
