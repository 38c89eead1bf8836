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
from memmy.kinds.catalog import KINDS, kind_of
from memmy.kinds.policy import AVOID, PREFER
from memmy.kinds.text import ITEM_CHARS, norm_line, whole_sentences

BODY_CAP = 640
SNIPPET_CAP = 320
GUIDANCE_LINE_CAP = 220
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


@dataclass(frozen=True)
class RenderItem:
    """One selected memory (or episode rollup) to render, with why it was recalled and how relevant it is."""

    memory: Memory
    source: str = "search"
    reason: str = ""
    score: float = 0.0


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


def _guidance_lines(memories: list[Memory], prefer: bool) -> list[str]:
    """The three Prefer (else Avoid) lines most episodes back among what ``memories`` offer."""
    counts: Counter[str] = Counter()
    for memory in memories:
        offered = kind_of(memory).guidance(memory)
        if offered is None:
            continue
        for value in offered.prefer if prefer else offered.avoid:
            line = " ".join(value.split())[:GUIDANCE_LINE_CAP]
            if line:
                counts[line] += offered.weight
    return [line for line, _ in counts.most_common(3)]


def render_context(
    items: list[RenderItem],
    *,
    mode: str = "turn_start",
    skill_mode: str = "summary",
    skill_summary_chars: int = 200,
    token_budget: int = 0,
) -> RenderedContext:
    """Build the markdown for the selected memories; empty input renders to ``""``.

    With a ``token_budget`` (what the agent reads at turn start) the compact layout of :func:`render_budgeted`
    is used; without one, the reference layout (sections per layer) of ``memory/search``.
    """
    if not items:
        return RenderedContext("", [], 0)
    if token_budget > 0:
        return render_budgeted(items, mode=mode, token_budget=token_budget)
    blocks: list[str] = [MODE_HEADERS[mode]] if mode in MODE_HEADERS else []
    sections: list[str] = []
    for kind in KINDS:
        memories = [i.memory for i in items if kind_of(i.memory, i.source) is kind]
        if not memories:
            continue
        sections.append(kind.heading.removeprefix("## "))
        lines = [kind.heading]
        for number, memory in enumerate(memories, start=1):
            lines.append(f"{number}. {kind.label}")
            lines.append(_indent(cap(kind.body(memory, skill_mode, skill_summary_chars))))
        blocks.append("\n".join(lines))
    guided = [i.memory for i in items]
    prefer, avoid = _guidance_lines(guided, prefer=True), _guidance_lines(guided, prefer=False)
    if prefer or avoid:
        guidance = [GUIDANCE_INTRO]
        if prefer:
            guidance.append(f"**{PREFER}**\n" + "\n".join(f"{n}. {line}" for n, line in enumerate(prefer, 1)))
        if avoid:
            guidance.append(f"**{AVOID}**\n" + "\n".join(f"{n}. {line}" for n, line in enumerate(avoid, 1)))
        blocks.append("\n".join(guidance))
        sections.append("Decision guidance")
    if any(kind_of(i.memory, i.source).name != "trace" for i in items):
        blocks.append(FOOTER)
    # Stored text was neutralised on the way in; this second pass covers older rows and every field the
    # sections above read, so the rendered block can never open or close the agent-side wrapper.
    markdown = neutralize_tags("\n\n".join(blocks))
    return RenderedContext(markdown, sections, math.ceil(len(markdown) / 4))


def snippet(memory: Memory) -> str:
    """Short preview used in hits (<= 320 characters)."""
    text = " ".join(memory.content.split())
    return text if len(text) <= SNIPPET_CAP else text[: SNIPPET_CAP - 1] + "…"


# --------------------------------------------------------------------------- the budgeted injection layout

GUIDANCE_LINES = 3
BUDGETED_INTRO = "## Memory recalled for this prompt (most useful first)"
BUDGETED_GUIDANCE = "## Decision guidance (learned from past episodes)"
BUDGETED_FOOTER = "Details: `memmy_memory_get(id)` with an id above."


def usefulness(item: RenderItem) -> float:
    """How useful an item is to the agent: its relevance, weighted by what it offers (a known fix first, then
    skills and policies, then past exchanges and environment notes)."""
    return (item.score or 0.0) * kind_of(item.memory, item.source).weight(item.memory)


_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def estimate_tokens(text: str) -> int:
    """Tokens of a mixed text: a CJK character is about one token, other text about four characters a token."""
    cjk = len(_CJK_CHAR.findall(text))
    return math.ceil((len(text) - cjk) / 4 + cjk)


def item_text(memory: Memory, source: str) -> str:
    """What one recalled memory says, in plain words: no ids, labels or scores, whole sentences only."""
    return kind_of(memory, source).line(memory)


def render_budgeted(items: list[RenderItem], *, mode: str = "turn_start", token_budget: int = 400) -> RenderedContext:
    """The injection the agent reads: one numbered item per memory, most useful first, each with its id and a
    one-line reason; no internal labels, no item cut mid-sentence (items are shortened to whole sentences or
    left out), no repeated lines, and the whole text within ``token_budget`` tokens."""
    ranked = sorted(items, key=lambda i: -usefulness(i))
    header = [MODE_HEADERS[mode]] if mode in MODE_HEADERS else []
    used = estimate_tokens("\n\n".join([*header, BUDGETED_INTRO, BUDGETED_FOOTER]))
    lines: list[str] = []
    seen: set[str] = set()
    shown: list[Memory] = []
    for item in ranked:
        text = whole_sentences(item_text(item.memory, item.source), ITEM_CHARS)
        key = norm_line(text)
        instead = norm_line(text.split("Instead: ", 1)[1]) if "Instead: " in text else ""
        if not text or key in seen or (instead and instead in seen):
            continue  # the same line, or the same fix for the same failure, once
        ident = item.memory.id
        entry = f"{len(lines) + 1}. {text}\n   ({ident}" + (f"; why: {item.reason})" if item.reason else ")")
        cost = estimate_tokens(entry) + 1
        if used + cost > token_budget:
            continue
        seen.update(k for k in (key, instead) if k)
        used += cost
        lines.append(entry)
        shown.append(item.memory)
    if not lines:
        return RenderedContext("", [], 0)
    blocks = [*header, BUDGETED_INTRO + "\n" + "\n".join(lines)]
    sections = ["Recalled memory"]
    shown_text = {norm_line(part) for line in lines for part in re.split(rf"{AVOID}: |Instead: ", line)}
    guidance: list[str] = []
    for label in (PREFER, AVOID):
        fresh = [
            line
            for line in _guidance_lines(shown, prefer=label == PREFER)[:GUIDANCE_LINES]
            if not any(norm_line(line) in t or t in norm_line(line) for t in shown_text if t)
            and whole_sentences(line, GUIDANCE_LINE_CAP)
        ]
        if fresh:
            block = f"**{label}**\n" + "\n".join(f"{n}. {line}" for n, line in enumerate(fresh, 1))
            cost = estimate_tokens(block) + 1
            if used + cost <= token_budget:
                used += cost
                guidance.append(block)
    if guidance and used + estimate_tokens(BUDGETED_GUIDANCE) + 2 <= token_budget:
        blocks.append(BUDGETED_GUIDANCE + "\n" + "\n".join(guidance))
        sections.append("Decision guidance")
    blocks.append(BUDGETED_FOOTER)
    markdown = "\n\n".join(blocks)
    if estimate_tokens(markdown) > token_budget and "Decision guidance" in sections:  # rounding: drop the extras
        blocks = [b for b in blocks if not b.startswith(BUDGETED_GUIDANCE)]
        sections.remove("Decision guidance")
        markdown = "\n\n".join(blocks)
    markdown = neutralize_tags(markdown)  # as in render_context: no stored text can close or forge the wrapper
    return RenderedContext(markdown, sections, estimate_tokens(markdown))
