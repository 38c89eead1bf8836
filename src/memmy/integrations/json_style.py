"""JSON written back the way the user (or the agent) wrote it: same indentation, key order, escaping and final
newline. Key order is kept by construction (``json`` keeps dict order); the rest is read off the original text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_INDENT = re.compile(r"^[{\[][^\n]*\n([ \t]+)\S", re.MULTILINE)
_ASCII_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class JsonStyle:
    """How a JSON document is laid out."""

    indent: str | None = "  "  # None: everything on one line
    ensure_ascii: bool = False
    final_newline: bool = True
    colon: str = ": "
    comma: str = ", "  # between items on one line: ", " as Python writes it, "," when minified

    @classmethod
    def of(cls, text: str | None) -> JsonStyle:
        """The style of ``text`` (the default style for a missing or empty file)."""
        if text is None or not text.strip():
            return cls()
        body = text.strip()
        shape = _STRING.sub('""', body)  # the layout without the strings, whose commas and colons are content
        if "\n" not in shape and ":" not in shape:  # ``{}``: nothing to go by, so the agents' own 2-space layout
            return cls(final_newline=text.endswith("\n"))
        match = _INDENT.search(body)
        indent = match.group(1) if match else ("  " if "\n" in shape else None)
        ensure_ascii = bool(_ASCII_ESCAPE.search(body)) and body.isascii()
        colon = ": " if re.search(r'"\s*:\s', shape) or not re.search(r'":\S', shape) else ":"
        comma = ", " if re.search(r",\s", shape) or "," not in shape else ","
        return cls(indent, ensure_ascii, text.endswith("\n"), colon, comma)

    def dumps(self, data: Mapping[str, Any]) -> str:
        """Serialise ``data`` in this style."""
        separators = ("," if self.indent is not None else self.comma, self.colon)
        text = json.dumps(data, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=separators)
        return text + ("\n" if self.final_newline else "")


def dump_like(data: Mapping[str, Any], original: str | None) -> str:
    """``data`` as JSON in the style of ``original`` (2-space indent and a final newline when there is none)."""
    return JsonStyle.of(original).dumps(data)
