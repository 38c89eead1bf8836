"""Render recalled memories as the injected markdown (section order, numbering and caps of the reference).

Sections: L1 Trace Memories, Similar Past Episodes, L2 Experience Memories, L3 Environment Knowledge, Skill
Memories; then "Decision guidance" (Prefer/Avoid lines from policies and skills) and the follow-up tools
footer (omitted when only traces were recalled). Each body is capped at 640 characters.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from memmy.capture.sanitize import neutralize_tags
from memmy.domain import Memory

BODY_CAP = 640
SNIPPET_CAP = 320
GUIDANCE_LINE_CAP = 220
_LABEL = re.compile(r"^(?:prefer|avoid|偏好|避免)\s*[:：]\s*", re.IGNORECASE)
FOOTER = (
    "## Follow-up memory tools\n"
    "If details are needed, use `memmy_memory_get(id)` with one of the ids above.\n"
    "Use `memmy_memory_search(query)` only when the recalled memory is insufficient or ambiguous."
)
GUIDANCE_INTRO = (
    "## Decision guidance (distilled from past similar situations)\n"
    "Apply these BEFORE choosing your next action. Each line was learned from one or more past episodes where "
    "the user told us what to prefer or avoid in this kind of context."
)
MODE_HEADERS = {
    "skill_invoke": "# Invoked skill: recalled memory for this skill",
    "sub_agent": "# Parent-agent context: recalled memory",
    "decision_repair": "# Decision repair — please read before your next action",
}
_USE_HINTS = {
    "failure_avoidance": "Use as a guardrail before planning.",
    "repair": "Use as repair guidance when the current attempt is failing.",
    "repair_instruction": "Use as repair guidance when the current attempt is failing.",
    "verification": "Use as a verification checklist.",
    "preference": "Use as a user preference.",
}


@dataclass(frozen=True)
class RenderItem:
    """One selected memory (or episode rollup) to render."""

    memory: Memory
    source: str = "search"


@dataclass(frozen=True)
class RenderedContext:
    """The injected markdown plus its section names and a token estimate (chars / 4)."""

    markdown: str
    sections: list[str]
    token_estimate: int

    def to_json(self) -> dict[str, Any]:
        """API shape of ``injectedContext`` in turn responses."""
        return {"markdown": self.markdown, "sections": self.sections, "tokenEstimate": self.token_estimate}


def cap(text: str, limit: int = BODY_CAP) -> str:
    """Cut a body at ``limit`` characters with a visible truncation marker."""
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + "\n...[truncated]"


def _indent(body: str) -> str:
    return "\n".join(("   " + line) if line else "" for line in body.splitlines())


def _trace_body(memory: Memory) -> str:
    trace = memory.properties.get("trace") or {}
    lines = [f"id: {memory.id}", f"timestamp: {memory.created_at}", ""]
    if "userText" in trace or "agentText" in trace:
        lines += [
            "Historical user statement:",
            str(trace.get("userText") or ""),
            "",
            "Historical assistant response:",
            str(trace.get("agentText") or ""),
        ]
    else:
        if memory.title:
            lines.append(f"Title: {memory.title}")
        lines.append(memory.content)
    return "\n".join(lines)


def _episode_body(memory: Memory) -> str:
    return "\n".join([f"id: {memory.id}", f"timestamp: {memory.created_at}", "", memory.title, memory.content])


def _policy_body(memory: Memory) -> str:
    policy = memory.properties.get("policy") or {}
    kind = str(policy.get("type") or "")
    lines = [
        f"id: {memory.id}",
        f"Use: {_USE_HINTS.get(kind, 'Use as prior successful guidance when the current task matches.')}",
    ]
    fields = (
        ("Trigger", "trigger"),
        ("Guidance", "procedure"),
        ("Avoid", "avoid"),  # Prefer/Avoid lists (preference, anti_pattern) go to the Decision guidance block
        ("Scope", "boundary"),
        ("Check", "verification"),
    )
    structured = False
    for label, key in fields:
        value = policy.get(key)
        if value:
            structured = True
            lines.append(f"{label}: {value if isinstance(value, str) else '; '.join(map(str, value))}")
    if not structured:
        if memory.title:
            lines.append(f"Trigger: {memory.title}")
        lines.append(f"Guidance: {memory.content}")
    return "\n".join(lines)


def _world_body(memory: Memory) -> str:
    world = memory.properties.get("world_model") or {}
    return "\n".join(
        [
            f"id: {memory.id}",
            f"Title: {world.get('title') or memory.title or memory.summary}",
            f"Content: {world.get('body') or memory.content}",
        ]
    )


def skill_description(guide: str, limit: int) -> str:
    """First paragraph of an invocation guide, headings stripped, cut at ``limit`` with an ellipsis."""
    paragraph = next((p for p in re.split(r"\n\s*\n", guide.strip()) if p.strip()), "")
    text = " ".join(line.lstrip("#").strip() for line in paragraph.splitlines()).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _skill_body(memory: Memory, mode: str, summary_chars: int) -> str:
    skill = memory.properties.get("skill") or {}
    guide = str(skill.get("invocationGuide") or memory.content)
    lines = [f"id: {memory.id}", f"Name: {skill.get('name') or memory.title or memory.summary}"]
    if mode == "full":
        lines.append(f"Guide: {guide}")
    else:
        lines.append(f"Description: {skill_description(guide, summary_chars)}")
    return "\n".join(lines)


def _guidance_lines(memories: list[Memory], key: str) -> list[str]:
    counts: Counter[str] = Counter()
    for memory in memories:
        payload = memory.properties.get("policy") or memory.properties.get("skill") or {}
        values = payload.get(key) or []
        for value in [values] if isinstance(values, str) else values:
            line = _LABEL.sub("", " ".join(str(value).split()))[:GUIDANCE_LINE_CAP]
            if line:
                counts[line] += max(1, len(payload.get("sourceEpisodeIds") or []))
    return [line for line, _ in counts.most_common(3)]


def render_context(
    items: list[RenderItem],
    *,
    mode: str = "turn_start",
    skill_mode: str = "summary",
    skill_summary_chars: int = 200,
) -> RenderedContext:
    """Build the markdown for the selected memories; empty input renders to ``""``."""
    if not items:
        return RenderedContext("", [], 0)
    traces = [i.memory for i in items if i.memory.layer == "L1" and i.source != "episode"]
    episodes = [i.memory for i in items if i.source == "episode"]
    groups: list[tuple[str, str, list[Memory]]] = [
        ("## L1 Trace Memories", "Trace", traces),
        ("## Similar Past Episodes", "Episode", episodes),
        ("## L2 Experience Memories", "Experience", [i.memory for i in items if i.memory.layer == "L2"]),
        ("## L3 Environment Knowledge", "Environment Knowledge", [i.memory for i in items if i.memory.layer == "L3"]),
        ("## Skill Memories", "Skill", [i.memory for i in items if i.memory.layer == "Skill"]),
    ]
    blocks: list[str] = [MODE_HEADERS[mode]] if mode in MODE_HEADERS else []
    sections: list[str] = []
    for heading, label, memories in groups:
        if not memories:
            continue
        sections.append(heading.removeprefix("## "))
        lines = [heading]
        for number, memory in enumerate(memories, start=1):
            if label == "Trace":
                body = _trace_body(memory)
            elif label == "Episode":
                body = _episode_body(memory)
            elif label == "Experience":
                body = _policy_body(memory)
            elif label == "Skill":
                body = _skill_body(memory, skill_mode, skill_summary_chars)
            else:
                body = _world_body(memory)
            lines.append(f"{number}. {label}")
            lines.append(_indent(cap(body)))
        blocks.append("\n".join(lines))
    guided = [i.memory for i in items if i.memory.layer in ("L2", "Skill")]
    prefer, avoid = _guidance_lines(guided, "preference"), _guidance_lines(guided, "anti_pattern")
    if prefer or avoid:
        guidance = [GUIDANCE_INTRO]
        if prefer:
            guidance.append("**Prefer**\n" + "\n".join(f"{n}. {line}" for n, line in enumerate(prefer, 1)))
        if avoid:
            guidance.append("**Avoid**\n" + "\n".join(f"{n}. {line}" for n, line in enumerate(avoid, 1)))
        blocks.append("\n".join(guidance))
        sections.append("Decision guidance")
    if any(i.memory.layer != "L1" or i.source == "episode" for i in items):
        blocks.append(FOOTER)
    # Stored text was neutralised on the way in; this second pass covers older rows and every field the
    # sections above read, so the rendered block can never open or close the agent-side wrapper.
    markdown = neutralize_tags("\n\n".join(blocks))
    return RenderedContext(markdown, sections, math.ceil(len(markdown) / 4))


def snippet(memory: Memory) -> str:
    """Short preview used in hits (<= 320 characters)."""
    text = " ".join(memory.content.split())
    return text if len(text) <= SNIPPET_CAP else text[: SNIPPET_CAP - 1] + "…"
