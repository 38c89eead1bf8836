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
#: Most digits a JSON number may have (2**63 has 19; a longer one is no id, count or bound the API takes).
MAX_NUMBER_CHARS = 40
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


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidJson(f"request body has a {len(text)}-digit number (at most {MAX_NUMBER_CHARS} digits)")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text) if len(text) <= MAX_NUMBER_CHARS * 2 else float("inf")
    if value in (float("inf"), float("-inf")):
        raise InvalidJson(f"request body has a number too large for a float ({text[:20]}...)")
    return value


def _refuse_constant(name: str) -> Any:
    raise InvalidJson(f"request body is not valid JSON: {name} is not a JSON number")


def parse_body(raw: bytes) -> Any:
    """Decode a request body: no bytes is ``{}`` (blanks alone are not JSON); invalid UTF-8 and lone surrogates
    become U+FFFD.

    Raises :class:`InvalidJson` (HTTP 400) for malformed JSON, nesting deeper than :data:`MAX_DEPTH`, a number
    longer than :data:`MAX_NUMBER_CHARS` digits or beyond a float's range, and ``NaN``/``Infinity`` (not JSON).
    """
    if not raw:
        return {}
    text = raw.decode("utf-8", "replace")
    if len(text) > 2 * MAX_DEPTH and not _depth_ok(text):
        raise InvalidJson(f"request body is nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InvalidJson(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise InvalidJson(f"request body is nested deeper than {MAX_DEPTH} levels") from None
    return clean(value)
