"""Readers and JSON Schema fragments several request types share (ids, text, tags, layers, paging)."""

from __future__ import annotations

from typing import Any, Final

from memmy.commands.validate import layer_of, layers_of, opt_iso_time, opt_str, opt_tags
from memmy.domain import Layer

#: Text the service requires to hold more than whitespace.
#: (Python's ``str.strip()`` whitespace, spelled out: regex engines disagree on ``\\s``.)
NOT_BLANK: Final = "[^\\x09-\\x0d\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
TEXT: Final[dict[str, Any]] = {"type": "string", "pattern": NOT_BLANK}
STR_LIST: Final[dict[str, Any]] = {"type": "array", "items": {"type": "string"}}
#: Tags: an array of strings or one comma-separated string.
TAGS_SCHEMA: Final[dict[str, Any]] = {"anyOf": [STR_LIST, {"type": "string", "description": "comma-separated"}]}
LAYER_NAMES: Final = ("L1", "L2", "L3", "Skill")
_LAYER_RE = "(L1|L2|L3|Skill)"
LAYERS_SCHEMA: Final[dict[str, Any]] = {
    "oneOf": [
        {"type": "array", "items": {"enum": list(LAYER_NAMES)}},
        {"type": "string", "pattern": f"^({_LAYER_RE}(,{_LAYER_RE})*)?$", "description": "comma-separated"},
    ]
}
MAX_CONTENT_CHARS: Final = 200_000


def loose_str(body: dict[str, Any], key: str) -> str | None:
    """An optional string where an empty one means absent (``source``, ``workspacePath``); another type is a 400."""
    return opt_str(body, key) or None


def tags_field(body: dict[str, Any], key: str) -> tuple[str, ...]:
    """Tags as an array of strings or one comma-separated string."""
    return tuple(opt_tags(body, key))


def layer_field(body: dict[str, Any], key: str) -> Layer:
    """A memory layer (L1 when absent; case-insensitive)."""
    return layer_of(body.get(key), key)


def layers_field(body: dict[str, Any], key: str) -> tuple[Layer, ...]:
    """Layers as an array or a comma-separated string; empty means every layer."""
    return tuple(layers_of(body, key))


def iso_time_field(body: dict[str, Any], key: str) -> str | None:
    """An ISO-8601 date-time with a timezone, normalised to UTC."""
    return opt_iso_time(body, key)
