"""Request bodies into clean JSON values: invalid UTF-8 and lone surrogates become U+FFFD, depth is bounded.

Agents' plugins cut strings on UTF-16 units (``slice(0, 12000)`` on an emoji leaves ``"\\ud800"``), terminals
paste invalid bytes: none of that may cost a turn. Text is repaired here, at the edge, so nothing below ever sees
a string SQLite, the FTS tokenizer or ``str.encode`` would refuse.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memmy.errors import MemmyError

#: Deepest nesting of arrays/objects a body may have (real bodies stay under ten levels).
MAX_DEPTH = 128
_SURROGATE = re.compile("[\ud800-\udfff]")


class InvalidJson(MemmyError):
    """The body is not JSON the service can take: malformed, or nested deeper than :data:`MAX_DEPTH`."""

    code = "invalid_json"


def clean_text(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate replaced by U+FFFD (a valid pair becomes its character)."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _depth_ok(raw: str) -> bool:
    """Bracket nesting of a JSON text (outside strings) stays within :data:`MAX_DEPTH`; a linear scan."""
    depth, in_string, escaped = 0, False, False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif char in "]}":
            depth -= 1
    return True


def clean(value: Any) -> Any:
    """A JSON value with every string (keys included) passed through :func:`clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, dict):
        return {clean_text(key): clean(item) for key, item in value.items()}
    return value


def parse_body(raw: bytes) -> Any:
    """Decode a request body: empty is ``{}``; invalid UTF-8 and lone surrogates become U+FFFD.

    Raises :class:`InvalidJson` (HTTP 400) for malformed JSON or nesting deeper than :data:`MAX_DEPTH`.
    """
    text = raw.decode("utf-8", "replace")
    if not text.strip():
        return {}
    if len(text) > 2 * MAX_DEPTH and not _depth_ok(text):
        raise InvalidJson(f"request body is nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidJson(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise InvalidJson(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    return clean(value)
