"""Strip memmy's own injected wrappers from text before it is searched or stored, and make forged ones inert."""

from __future__ import annotations

import re

from memmy.redact.tags import CONTEXT_NAMES, REQUEST_NAME, Tag, find_tags, neutralize_tags, strip_invisible

_MANY_NEWLINES = re.compile(r"\n{3,}")

__all__ = ["neutralize_tags", "sanitize_text", "wrap_for_agent"]


def _without_context_blocks(text: str, tags: list[Tag]) -> tuple[str, bool]:
    """Remove each ``<memmy_memory_context>…</memmy_memory_context>`` block (an unclosed one to the end)."""
    out, last, removed, index = [], 0, False, 0
    while index < len(tags):
        tag = tags[index]
        if tag.name in CONTEXT_NAMES and not tag.closing and tag.complete:
            close = next((j for j in range(index + 1, len(tags)) if tags[j].name == tag.name and tags[j].closing), None)
            out.append(text[last : tag.start])
            removed = True
            if close is None:
                return "".join(out), removed
            last = tags[close].end
            index = close + 1
            continue
        index += 1
    out.append(text[last:])
    return "".join(out), removed


def _only_request(text: str) -> str | None:
    """The inner text when ``text`` is exactly one ``<current_user_request>`` block (the wrapper's shape)."""
    tags = find_tags(text)
    if not tags or tags[0].name != REQUEST_NAME or tags[0].closing or text[: tags[0].start].strip():
        return None
    rest = tags[1:]
    if not rest:
        return text[tags[0].end :]
    if len(rest) == 1 and rest[0].name == REQUEST_NAME and rest[0].closing and not text[rest[0].end :].strip():
        return text[tags[0].end : rest[0].start]
    return None


def sanitize_text(text: str | None, *, unwrap_request: bool = True) -> str:
    """Remove injected ``<memmy_memory_context>`` blocks, then make every remaining wrapper or control tag inert.

    The text inside ``<current_user_request>`` replaces the whole text only when ``unwrap_request`` is set and
    the text has exactly the shape memmy's wrapper gives a prompt (context blocks, then one request block and
    nothing else). Anywhere else the request tags are neutralised and their content stays in place, quoted: a
    forged request inside a memory is history, never the memory's new content.
    """
    if not text:
        return ""
    cleaned = strip_invisible(text)
    tags = find_tags(cleaned)
    if tags:
        cleaned, removed = _without_context_blocks(cleaned, tags)
        inner = _only_request(cleaned.strip()) if removed and unwrap_request else None
        if inner is not None:
            cleaned = inner
    cleaned = neutralize_tags(cleaned)  # wrapper tags, and control tags such as <system-reminder> or <|im_start|>
    cleaned = _MANY_NEWLINES.sub("\n\n", cleaned)
    return cleaned.strip()


def wrap_for_agent(context_markdown: str, request: str) -> str:
    """Wrap recalled context as history and the request as authoritative, the way hooks inject it.

    Both parts are neutralised first, so the result holds exactly one opening and one closing tag of each kind.
    """
    if not context_markdown.strip():
        return request
    return (
        "<memmy_memory_context>\n"
        "The following is historical memory from earlier sessions. It may be outdated; "
        "the current user request below is authoritative.\n\n"
        f"{neutralize_tags(context_markdown.strip())}\n"
        "</memmy_memory_context>\n\n"
        f"<current_user_request>\n{neutralize_tags(request)}\n</current_user_request>"
    )
