"""Text helpers the kinds share when they write the line an agent reads: whole sentences, one-line values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: What one recalled item may say (whole sentences only).
ITEM_CHARS = 360
SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|\n+|(?<=[。！？；])")


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


def norm_line(line: str) -> str:
    """A line reduced to its letters and digits, case-folded: two lines that say the same thing compare equal."""
    return re.sub(r"[\W_]+", "", line.casefold())


def one_line(value: Any) -> str:
    """A step or fact as one line: a string as is, a structured one by its body, description or label."""
    if isinstance(value, Mapping):
        for key in ("body", "description", "text", "label", "title"):
            if str(value.get(key) or "").strip():
                return " ".join(str(value[key]).split())
        return ""
    return " ".join(str(value).split())


def sentence(text: str) -> str:
    """``text`` closed by a period unless it already ends a sentence."""
    return text if re.search(r"[.!?。！？]$", text) else text + "."


def first_paragraph(guide: str, limit: int) -> str:
    """First paragraph of a markdown text, headings stripped, cut at ``limit`` with an ellipsis."""
    paragraph = next((p for p in re.split(r"\n\s*\n", guide.strip()) if p.strip()), "")
    flat = " ".join(line.lstrip("#").strip() for line in paragraph.splitlines()).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
