"""Text hygiene: lone UTF-16 surrogates (a string cut inside an emoji) become U+FFFD instead of failing writes."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # the hook imports this module for one prompt: no typing at run time
if TYPE_CHECKING:
    from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (unchanged, and cheap, when there is none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def replace_surrogates_json(value: Any) -> Any:
    """A JSON value with :func:`replace_surrogates` applied to every string (keys included)."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, list):
        return [replace_surrogates_json(item) for item in value]
    if isinstance(value, dict):
        return {replace_surrogates_json(k): replace_surrogates_json(v) for k, v in value.items()}
    return value
