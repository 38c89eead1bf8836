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


# --------------------------------------------------------------------------- the budgeted injection layout

ITEM_CHARS = 360  # one item's text (whole sentences only)
GUIDANCE_LINES = 3
BUDGETED_INTRO = "## Memory recalled for this prompt (most useful first)"
BUDGETED_GUIDANCE = "## Decision guidance (learned from past episodes)"
BUDGETED_FOOTER = "Details: `memmy_memory_get(id)` with an id above."
_LAYER_WEIGHT = {"Skill": 1.0, "L2": 1.0, "L1": 0.7, "L3": 0.6}


def usefulness(item: RenderItem) -> float:
    """How useful an item is to the agent: its relevance, weighted by what it offers (a known fix first, then
    skills and policies, then past exchanges and environment notes)."""
    weight = 0.6 if item.source == "episode" else _LAYER_WEIGHT.get(item.memory.layer, 0.6)
    policy = item.memory.properties.get("policy") or {}
    if item.memory.layer == "L2" and policy.get("preference") and policy.get("anti_pattern"):
        weight = 1.3  # an Avoid line with what to do instead
    return (item.score or 0.0) * weight


SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|\n+|(?<=[。！？；])")
_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def estimate_tokens(text: str) -> int:
    """Tokens of a mixed text: a CJK character is about one token, other text about four characters a token."""
    cjk = len(_CJK_CHAR.findall(text))
    return math.ceil((len(text) - cjk) / 4 + cjk)


def whole_sentences(text: str, limit: int = ITEM_CHARS) -> str:
    """The leading whole sentences of ``text`` that fit in ``limit`` characters ("" when not even one fits)."""
    out = ""
    for sentence in (" ".join(s.split()) for s in SENTENCE_END.split(text)):
        if not sentence:
            continue
        candidate = f"{out} {sentence}".strip()
        if len(candidate) > limit:
            break
        out = candidate
    return out


def _norm_line(line: str) -> str:
    return re.sub(r"[\W_]+", "", _LABEL.sub("", line).casefold())


def _lines(values: Any, limit: int) -> list[str]:
    """Up to ``limit`` distinct guidance lines without their Prefer/Avoid label or a closing period."""
    out: list[str] = []
    for value in [values] if isinstance(values, str) else values or []:
        line = _LABEL.sub("", " ".join(str(value).split())).rstrip("。.")
        if line and _norm_line(line) not in {_norm_line(o) for o in out}:
            out.append(line)
    return out[:limit]


def _evidence_words(line: str) -> set[str]:
    """Words of three or more letters or digits (commands, files, error text) of a guidance line."""
    return set(re.findall(r"[a-z0-9]{3,}", line.lower()))


def _plain(value: Any) -> str:
    """A step or fact as text: a string as is, a structured one by its body, description or label."""
    if isinstance(value, dict):
        for key in ("body", "description", "text", "label", "title"):
            if str(value.get(key) or "").strip():
                return " ".join(str(value[key]).split())
        return ""
    return " ".join(str(value).split())


ARROW = " → "  # between a rollup step's ask and its outcome (memmy.recall.rollup.step_line)
_STEP = re.compile(r"^step \d+ / (.*?)(?: / (?:IRRELEVANT|RELATED\w*|PIVOTAL\w*|[A-Z_]{6,}))?$")


def parse_step(line: str) -> tuple[str, str]:
    """``(ask, outcome)`` of a rollup step line (outcome "" when the step has none; a plain line is its ask)."""
    match = _STEP.match(line.strip())
    body = (match.group(1) if match else line).strip()
    ask, _, outcome = body.partition(ARROW.strip())
    return ask.strip(), outcome.strip()


def _sentence(text: str) -> str:
    """``text`` closed by a period unless it already ends a sentence."""
    return text if re.search(r"[.!?。！？]$", text) else text + "."


def episode_text(memory: Memory) -> str:
    """A rollup in plain words: the task, what it concluded, then its other steps with theirs (best match first)."""
    title = memory.title.removeprefix("Past similar episode: ").strip()
    steps: list[tuple[str, str]] = []
    for line in memory.content.splitlines():
        ask, outcome = parse_step(line)
        if ask and _norm_line(ask) not in {_norm_line(a) for a, _ in steps}:
            steps.append((ask, outcome))
    text = f"Past task: {_sentence(title)}"
    result = next((o for a, o in steps if _norm_line(a) == _norm_line(title)), "")
    if result:
        text += f" Result: {_sentence(result)}"
    others = [f"{a} → {o.rstrip('.。')}" if o else a for a, o in steps if _norm_line(a) != _norm_line(title)][:3]
    return text + (" Steps: " + "; ".join(others).rstrip(".。") + "." if others else "")


def item_text(memory: Memory, source: str) -> str:
    """What one recalled memory says, in plain words: no ids, labels or scores, whole sentences only."""
    if source == "episode":
        return episode_text(memory)
    if memory.layer == "L1":
        trace = memory.properties.get("trace") or {}
        asked, answer = str(trace.get("userText") or ""), str(trace.get("agentText") or "")
        if asked or answer:
            return f'Past exchange: asked "{whole_sentences(asked, 160) or asked[:0]}"; answer: {answer}'
        return memory.content
    if memory.layer == "L2":
        policy = memory.properties.get("policy") or {}
        avoid, prefer = _lines(policy.get("anti_pattern"), 2), _lines(policy.get("preference"), GUIDANCE_LINES * 2)
        if avoid:  # what to do instead: the line about the same command, file and error as the Avoid line
            anchor = _evidence_words(avoid[0])
            prefer.sort(key=lambda line: -len(_evidence_words(line) & anchor))
        prefer = prefer[:2]
        if policy.get("type") in ("failure_avoidance", "repair_instruction") and (avoid or prefer):
            # the first Avoid line and what to do instead come first, so that shortening keeps the pair
            first = avoid[0] if avoid else ""
            if prefer and len(first) + len(prefer[0]) > ITEM_CHARS - 30:  # keep the pair: drop the error's detail
                first = re.sub(r"\s*[(（][^()（）]*[)）]?\s*$", "", first) or first  # closed, or cut off
            parts = [f"Avoid: {first}." if first else "", f"Instead: {prefer[0]}." if prefer else ""]
            parts += [f"Also avoid: {line}." for line in avoid[1:]] + [f"Or: {line}." for line in prefer[1:]]
            return " ".join(p for p in parts if p)
        trigger = str(policy.get("trigger") or memory.title)
        procedure = str(policy.get("procedure") or memory.content)
        check = str(policy.get("verification") or "")
        return f"{trigger.rstrip('.')}: {procedure}" + (f" Check: {check}" if check else "")
    if memory.layer == "L3":
        world = memory.properties.get("world_model") or {}
        title = str(world.get("title") or memory.title).strip()
        body = str(world.get("body") or memory.content)
        bullets = [line.strip()[2:] for line in body.splitlines() if line.strip().startswith("- ")]
        facts = [_plain(f) for f in [*(world.get("environment") or []), *(world.get("constraints") or [])]]
        points = list(dict.fromkeys(p.rstrip(".。") + "." for p in (bullets or facts) if p.strip()))[:3]
        return f"{title} — " + " ".join(points) if points else whole_sentences(body.replace(title, "", 1))
    skill = memory.properties.get("skill") or {}
    steps = [_plain(s).strip().rstrip(".。") for s in skill.get("steps") or [] if _plain(s).strip()]
    summary = str(skill.get("summary") or "").strip().rstrip(".。")
    text = "Skill" if summary else f"Skill {skill.get('name') or memory.title}"
    if summary:
        text += f": {summary}."
    if steps:
        text += " Steps: " + "; ".join(steps[:4]) + "."
    if not summary and not steps:
        text += ": " + skill_description(str(skill.get("invocationGuide") or memory.content), ITEM_CHARS)
    return text


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
        text = whole_sentences(item_text(item.memory, item.source))
        key = _norm_line(text)
        instead = _norm_line(text.split("Instead: ", 1)[1]) if "Instead: " in text else ""
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
    shown_text = {_norm_line(part) for line in lines for part in re.split(r"Avoid: |Instead: ", line)}
    guidance: list[str] = []
    for label, key in (("Prefer", "preference"), ("Avoid", "anti_pattern")):
        fresh = [
            line
            for line in _guidance_lines([m for m in shown if m.layer in ("L2", "Skill")], key)[:GUIDANCE_LINES]
            if not any(_norm_line(line) in t or t in _norm_line(line) for t in shown_text if t)
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
