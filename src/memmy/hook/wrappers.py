"""memmy's own wrapper tags in a prompt: what the hook strips before a prompt is searched or stored.

A leaf of the hook runtime (standard library only, ``re`` imported only when a wrapper is there), shared by
:mod:`memmy.hook.runtime` and :mod:`memmy.hook.transcripts` so that neither imports the other.
"""

_WRAPPER_TAGS = ("memmy_memory_context", "memos_context", "memory_context")
_WRAPPERS_RE = r"<(memmy_memory_context|memos_context|memory_context)\b[^>]*>.*?</\1\s*>"
_REQUEST_RE = r"\s*<current_user_request\b[^>]*>(.*?)(?:</current_user_request\s*>)?\s*"


def sanitize(text: str) -> str:
    """Strip earlier memmy wrappers so recalled memory is never searched or stored again.

    Only memmy's packet shape (memory block, then one request block) is unwrapped to the request; a request tag
    elsewhere stays, and the daemon makes it inert (a forged request is never promoted to the whole text).
    """
    raw = text or ""
    lowered = raw.lower()
    if "<" not in raw or not any(tag in lowered for tag in _WRAPPER_TAGS):
        return raw.strip()  # nothing to unwrap: no need to import ``re``
    import re

    text = re.sub(_WRAPPERS_RE, "", raw, flags=re.S | re.I)
    request = re.fullmatch(_REQUEST_RE, text, flags=re.S | re.I) if text != raw else None
    return (request.group(1) if request else text).strip()
