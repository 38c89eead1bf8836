"""Skill: a reusable procedure crystallised from an active policy, with its invocation guide, lifecycle (eta,
trials) and the Prefer / Avoid lines it carries (``properties["skill"]``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memmy.domain import Memory
from memmy.kinds.policy import AVOID, PREFER, labelled, unlabelled_lines
from memmy.kinds.stored import Stored, count, entries, maybe_number, number, strings, text
from memmy.kinds.text import ITEM_CHARS, first_paragraph, one_line

KEY = "skill"
STEPS = 4  # steps an item shows


@dataclasses.dataclass(frozen=True)
class Skill(Stored):
    """The stored payload of one Skill."""

    KEY: ClassVar[str] = KEY
    NAMES: ClassVar[dict[str, str]] = {
        "name": "name",
        "summary": "summary",
        "invocation_guide": "invocationGuide",
        "steps": "steps",
        "status": "status",
        "eta": "eta",
        "prior_eta": "priorEta",
        "trials": "trials",
        "passes": "passes",
        "origin": "origin",
        "rebuilds": "rebuilds",
        "drifted_at_stats_run": "driftedAtStatsRun",
        "source_policy_ids": "sourcePolicyIds",
        "preference": "preference",
        "anti_pattern": "anti_pattern",
        "source_episode_ids": "sourceEpisodeIds",
    }

    name: str = ""
    summary: str = ""
    invocation_guide: str = ""
    steps: tuple[str | Mapping[str, Any], ...] = ()  # {title, body} or text
    status: str = "candidate"  # candidate | active | archived
    eta: float | None = None  # None when not recorded (each reader has its default)
    prior_eta: float | None = None
    trials: int = 0
    passes: int = 0
    origin: str = ""  # heuristic | llm
    rebuilds: int = 0
    drifted_at_stats_run: int | None = None
    source_policy_ids: tuple[str, ...] = ()
    preference: tuple[str, ...] = ()  # without the "Prefer:" label
    anti_pattern: tuple[str, ...] = ()  # without the "Avoid:" label
    source_episode_ids: tuple[str, ...] = ()

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> Skill:
        """The skill of a stored section."""
        prior, drifted = section.get("priorEta"), section.get("driftedAtStatsRun")
        return cls(
            stored=dict(section),
            name=text(section.get("name")),
            summary=text(section.get("summary")),
            invocation_guide=text(section.get("invocationGuide")),
            steps=entries(section.get("steps")),
            status=text(section.get("status"), "candidate"),
            eta=maybe_number(section.get("eta")),
            prior_eta=number(prior) if prior not in (None, "", 0) else None,
            trials=count(section.get("trials")),
            passes=count(section.get("passes")),
            origin=text(section.get("origin")),
            rebuilds=count(section.get("rebuilds")),
            drifted_at_stats_run=count(drifted) if drifted is not None else None,
            source_policy_ids=strings(section.get("sourcePolicyIds")),
            preference=unlabelled_lines(section.get("preference")),
            anti_pattern=unlabelled_lines(section.get("anti_pattern")),
            source_episode_ids=strings(section.get("sourceEpisodeIds")),
        )

    @property
    def recallable(self) -> bool:
        """A skill in use: active, or a candidate on trial."""
        return self.status in ("active", "candidate")


def of(memory: Memory) -> Skill:
    """The skill of a Skill memory (defaults when it has none)."""
    return Skill.of(memory.properties)


def description(guide: str, limit: int) -> str:
    """First paragraph of an invocation guide, headings stripped, cut at ``limit`` with an ellipsis."""
    return first_paragraph(guide, limit)


def body(memory: Memory, mode: str = "summary", summary_chars: int = 200) -> str:
    """The reference layout of ``memory/search``: id, name, then the whole guide (``full``) or its description."""
    skill = of(memory)
    guide = skill.invocation_guide or memory.content
    lines = [f"id: {memory.id}", f"Name: {skill.name or memory.title or memory.summary}"]
    if mode == "full":
        lines.append(f"Guide: {guide}")
    else:
        lines.append(f"Description: {description(guide, summary_chars)}")
    return "\n".join(lines)


def line(memory: Memory) -> str:
    """What the agent reads of a skill: its summary and up to four steps (else its guide's description)."""
    skill = of(memory)
    steps = [one_line(s).strip().rstrip(".。") for s in skill.steps if one_line(s).strip()]
    summary = skill.summary.strip().rstrip(".。")
    out = "Skill" if summary else f"Skill {skill.name or memory.title}"
    if summary:
        out += f": {summary}."
    if steps:
        out += " Steps: " + "; ".join(steps[:STEPS]) + "."
    if not summary and not steps:
        out += ": " + description(skill.invocation_guide or memory.content, ITEM_CHARS)
    return out


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
    preference: list[str]  # without the "Prefer:" label (stored with it)
    anti_pattern: list[str]  # without the "Avoid:" label (stored with it)
    tags: list[str]
    eta: float
    invocation_guide: str  # markdown rendered from the above
    evidence_trace_ids: list[str]
    origin: str = "heuristic"


def draft_section(draft: SkillDraft, previous: Mapping[str, Any], coverage: float, resonance: float) -> dict[str, Any]:
    """The stored section of a skill written from ``draft`` over its ``previous`` section, with its verification
    (tool coverage, resonance); a new skill starts as a candidate without trials."""
    payload = dict(previous)
    payload.update(
        {
            "name": draft.name,
            "summary": draft.summary,
            "triggerContext": draft.trigger_context,
            "steps": draft.steps,
            "tools": draft.tools,
            "preconditions": draft.preconditions,
            "examples": draft.examples,
            "preference": [labelled(PREFER, line) for line in draft.preference],
            "anti_pattern": [labelled(AVOID, line) for line in draft.anti_pattern],
            "invocationGuide": draft.invocation_guide,
            "policyId": draft.policy_id,
            "sourcePolicyIds": [draft.policy_id],
            "evidenceTraceIds": draft.evidence_trace_ids,
            "verification": {"toolCoverage": round(coverage, 3), "resonance": round(resonance, 3)},
            "origin": draft.origin,
        }
    )
    payload.setdefault("eta", round(draft.eta, 4))
    payload.setdefault("status", "candidate")
    payload.setdefault("trials", 0)
    payload.setdefault("passes", 0)
    return payload
