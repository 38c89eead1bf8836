"""Strip memmy's own injected wrappers from text before it is searched or stored."""

from __future__ import annotations

import re

_WRAPPER_TAGS = ("memmy_memory_context", "memos_context", "memory_context")
_BLOCK = re.compile(r"<(?P<tag>" + "|".join(_WRAPPER_TAGS) + r")\b[^>]*>.*?</(?P=tag)\s*>", re.DOTALL | re.IGNORECASE)
_UNCLOSED = re.compile(r"<(?:" + "|".join(_WRAPPER_TAGS) + r")\b[^>]*>.*\Z", re.DOTALL | re.IGNORECASE)
_REQUEST = re.compile(r"<current_user_request\b[^>]*>(.*?)(?:</current_user_request\s*>|\Z)", re.DOTALL | re.IGNORECASE)
_MANY_NEWLINES = re.compile(r"\n{3,}")


def sanitize_text(text: str | None) -> str:
    """Remove ``<memmy_memory_context>`` blocks (and an unclosed tail), unwrap ``<current_user_request>``."""
    if not text:
        return ""
    cleaned = _BLOCK.sub("", text)
    cleaned = _UNCLOSED.sub("", cleaned)
    request = _REQUEST.search(cleaned)
    if request:
        cleaned = request.group(1)
    cleaned = _MANY_NEWLINES.sub("\n\n", cleaned)
    return cleaned.strip()


def wrap_for_agent(context_markdown: str, request: str) -> str:
    """Wrap recalled context as history and the request as authoritative, the way hooks inject it."""
    if not context_markdown.strip():
        return request
    return (
        "<memmy_memory_context>\n"
        "The following is historical memory from earlier sessions. It may be outdated; "
        "the current user request below is authoritative.\n\n"
        f"{context_markdown.strip()}\n"
        "</memmy_memory_context>\n\n"
        f"<current_user_request>\n{request}\n</current_user_request>"
    )
