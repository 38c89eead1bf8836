"""Render recalled memories as the injected markdown (section order and caps of the reference)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from memmy.domain import Memory

BODY_CAP = 640
SNIPPET_CAP = 320

_SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("L1", "## L1 Trace Memories", "Trace"),
    ("L2", "## L2 Experience Memories", "Experience"),
    ("L3", "## L3 Environment Knowledge", "Environment Knowledge"),
    ("Skill", "## Skill Memories", "Skill"),
)
FOOTER = (
    "## Follow-up memory tools\n"
    "If details are needed, use `memmy_memory_get(id)` with one of the ids above.\n"
    "Use `memmy_memory_search(query)` only when the recalled memory is insufficient or ambiguous."
)


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


def _trace_body(memory: Memory) -> str:
    trace = memory.properties.get("trace") or {}
    user = trace.get("userText")
    agent = trace.get("agentText")
    lines = [f"id: {memory.id}", f"timestamp: {memory.created_at}", ""]
    if user is not None or agent is not None:
        lines += ["Historical user statement:", user or "", "", "Historical assistant response:", agent or ""]
    else:
        if memory.title:
            lines.append(f"Title: {memory.title}")
        lines.append(memory.content)
    return "\n".join(lines)


def _generic_body(memory: Memory, label: str) -> str:
    lines = [f"id: {memory.id}"]
    if memory.title:
        lines.append(f"{'Name' if label == 'Skill' else 'Title'}: {memory.title}")
    lines.append(f"{'Description' if label == 'Skill' else 'Content'}: {memory.content}")
    return "\n".join(lines)


def _indent(body: str) -> str:
    return "\n".join(("   " + line) if line else "" for line in body.splitlines())


def render_context(memories: list[Memory]) -> RenderedContext:
    """Build the markdown for the selected memories; empty input renders to ``""``."""
    if not memories:
        return RenderedContext("", [], 0)
    blocks: list[str] = []
    sections: list[str] = []
    for layer, heading, label in _SECTIONS:
        items = [m for m in memories if m.layer == layer]
        if not items:
            continue
        sections.append(heading.removeprefix("## "))
        lines = [heading]
        for number, memory in enumerate(items, start=1):
            body = _trace_body(memory) if layer == "L1" else _generic_body(memory, label)
            lines.append(f"{number}. {label}")
            lines.append(_indent(cap(body)))
        blocks.append("\n".join(lines))
    if any(m.layer != "L1" for m in memories):
        blocks.append(FOOTER)
    markdown = "\n\n".join(blocks)
    return RenderedContext(markdown, sections, math.ceil(len(markdown) / 4))


def snippet(memory: Memory) -> str:
    """Short preview used in hits (<= 320 characters)."""
    text = " ".join(memory.content.split())
    return text if len(text) <= SNIPPET_CAP else text[: SNIPPET_CAP - 1] + "…"
