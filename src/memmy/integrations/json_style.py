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


@dataclass(frozen=True)
class JsonStyle:
    """How a JSON document is laid out."""

    indent: str | None = "  "  # None: everything on one line
    ensure_ascii: bool = False
    final_newline: bool = True
    colon: str = ": "

    @classmethod
    def of(cls, text: str | None) -> JsonStyle:
        """The style of ``text`` (the default style for a missing or empty file)."""
        if text is None or not text.strip():
            return cls()
        body = text.strip()
        match = _INDENT.search(body)
        indent = match.group(1) if match else ("  " if "\n" in body else None)
        ensure_ascii = bool(_ASCII_ESCAPE.search(body)) and body.isascii()
        colon = ": " if re.search(r'"\s*:\s', body) or not re.search(r'":\S', body) else ":"
        return cls(indent=indent, ensure_ascii=ensure_ascii, final_newline=text.endswith("\n"), colon=colon)

    def dumps(self, data: Mapping[str, Any]) -> str:
        """Serialise ``data`` in this style."""
        separators = ("," if self.indent is not None else ", ", self.colon)
        text = json.dumps(data, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=separators)
        return text + ("\n" if self.final_newline else "")


def dump_like(data: Mapping[str, Any], original: str | None) -> str:
    """``data`` as JSON in the style of ``original`` (2-space indent and a final newline when there is none)."""
    return JsonStyle.of(original).dumps(data)
