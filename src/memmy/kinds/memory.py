"""Properties every kind of memory may carry beside its own section: the stored summary, the text it is
embedded by, the review state, the validity of a key-graph fact, the scope of a derived memory, the memory it
corrects, and the trace-level numbers mirrored at the top (``value``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memmy.domain import Memory
from memmy.kinds.stored import maybe_number, section_of, text

SUMMARY = "summary"
EMBEDDING_TEXT = "embeddingText"
REVIEW = "review"
VALIDITY = "validity"
SCOPE = "scope"
SUPERSEDES = "supersedes"
SOURCE_MESSAGE_IDS = "sourceMessageIds"
#: Stored names SQL reads by JSON path (``$.review.state``, ``$.priority``).
REVIEW_STATE = "state"
PRIORITY = "priority"
VALUE = "value"


def path(*names: str) -> str:
    """The JSON path of a top-level property (``$.priority``, ``$.review.state``)."""
    return "$." + ".".join(names)


def embedding_text(properties: Mapping[str, Any]) -> str:
    """The text prepared for embedding ("" when none was: the caller embeds title and content)."""
    return text(properties.get(EMBEDDING_TEXT))


def value(memory: Memory) -> float | None:
    """A trace's value as mirrored at the top of its properties (None when not a number)."""
    return maybe_number(memory.properties.get(VALUE))


def alpha(memory: Memory) -> float | None:
    """A trace's reflection weight as mirrored at the top of its properties (None when not a number)."""
    return maybe_number(memory.properties.get("alpha"))


def reflected(memory: Memory) -> bool:
    """Whether reflection has scored the trace."""
    return bool(memory.properties.get("reflection"))


def review(properties: Mapping[str, Any]) -> dict[str, Any] | None:
    """The review state of a derived memory (``{state, proposedStatus, …}``), None when never reviewed."""
    found = properties.get(REVIEW)
    return dict(found) if isinstance(found, Mapping) else None


def validity(properties: Mapping[str, Any]) -> dict[str, Any] | None:
    """A key-graph fact's validity (``decayProfile``, ``lastConfirmedAt``, ``confirmationCount``, …)."""
    found = properties.get(VALIDITY)
    return dict(found) if isinstance(found, Mapping) else None


def scope(properties: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recorded scope of a derived memory (``{projects, global}``), None when none was recorded."""
    found = properties.get(SCOPE)
    return dict(found) if isinstance(found, Mapping) else None


def supersedes(properties: Mapping[str, Any]) -> str | None:
    """The id of the memory this one corrects."""
    return text(properties.get(SUPERSEDES)) or None


def evidence_ids(properties: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """A derived memory's evidence: ``(episode ids, memory ids)`` — an L2's source episodes and traces, an L3's or
    Skill's source policies."""
    policy = section_of(properties, "policy")
    episodes = [str(e) for e in policy.get("sourceEpisodeIds") or []]
    memories = [str(t) for t in policy.get("sourceTraceIds") or []]
    for key in ("world_model", "skill"):
        payload = section_of(properties, key)
        memories += [str(p) for p in payload.get("policyIds") or payload.get("sourcePolicyIds") or []]
    return episodes, memories


def metrics(memory: Memory) -> dict[str, Any]:
    """A trace's evolution numbers as stored (value and alpha, 0 when missing) and whether it was reflected on."""
    props = memory.properties
    return {"value": props.get(VALUE, 0), "alpha": props.get("alpha", 0), "reflectionDone": reflected(memory)}


def with_values(properties: Mapping[str, Any], **values: Any) -> dict[str, Any]:
    """``properties`` with the top-level ``values`` (stored names) set."""
    return {**properties, **values}
