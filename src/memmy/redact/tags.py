"""The injection wrapper's own tags, found in any disguise and made inert.

memmy wraps recalled memory in ``<memmy_memory_context>`` and the live prompt in ``<current_user_request>``.
A stored text that carries those tags could end the wrapper early or pose as the user's request, so every form a
model might still read as the tag is found: any case, spaces or ``-``/``.`` inside the name, spaces around ``/``,
attributes, HTML entities (``&lt;``, ``&#60;``, ``&#x3c;``), URL escapes (``%3C``), full-width or angle-quote
brackets, full-width letters, and zero-width characters between letters. Found tags are replaced by a visible,
inert marker such as ``[quoted /current_user_request tag]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Canonical names: the memmy wrapper, the wrappers of memmy's predecessors, and the request tag.
CONTEXT_NAMES = ("memmy_memory_context", "memos_context", "memory_context")
REQUEST_NAME = "current_user_request"

_ZERO_WIDTH = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
_FULLWIDTH = re.compile("[\uff00-\uffef]")
_LT = r"(?:<|&lt;?|&#0*60;?|&#x0*3c;?|%3c|\uff1c|\ufe64|\u2039|\u2329|\u3008|\u27e8)"
_GT = r"(?:>|&gt;?|&#0*62;?|&#x0*3e;?|%3e|\uff1e|\ufe65|\u203a|\u232a|\u3009|\u27e9)"
_SLASH = r"(?:/|&#0*47;?|&#x0*2f;?|%2f|\uff0f|\u2215|\u2044)"
_SEP = r"[\s_\-.:\uff3f\uff0d]*"


def _letters(word: str) -> str:
    """A pattern for ``word`` that also accepts full-width letters."""
    return "".join(f"[{c}{chr(ord(c) - 0x61 + 0xFF41)}{chr(ord(c) - 0x61 + 0xFF21)}]" for c in word)


def _name(canonical: str) -> str:
    return _SEP.join(_letters(part) for part in canonical.split("_"))


_NAMES = (*CONTEXT_NAMES, REQUEST_NAME)
_TAG = re.compile(
    _LT
    + r"\s*(?P<slash>"
    + _SLASH
    + r")?\s*(?P<name>"
    + "|".join(f"(?P<n{i}>{_name(n)})" for i, n in enumerate(_NAMES))
    + r")(?![A-Za-z0-9_])(?P<attrs>[^<>]{0,300}?)\s*"
    + _SLASH
    + r"?\s*"
    + _GT,
    re.IGNORECASE,
)
_PREFILTER = ("context", "request", "ｃｏｎｔｅｘｔ", "ｒｅｑｕｅｓｔ")


@dataclass(frozen=True)
class Tag:
    """One wrapper tag found in a text."""

    name: str  # canonical name
    closing: bool
    start: int
    end: int


def _prepare(text: str) -> str:
    if _ZERO_WIDTH.search(text):
        text = _ZERO_WIDTH.sub("", text)
    return text


def _might_hold_tags(text: str) -> bool:
    lowered = text.lower()
    return any([word in lowered for word in _PREFILTER]) or bool(_FULLWIDTH.search(text) and _TAG.search(text))


def find_tags(text: str) -> list[Tag]:
    """Every wrapper tag in ``text`` (call on text already passed through :func:`strip_invisible`)."""
    if not _might_hold_tags(text):
        return []
    found = []
    for match in _TAG.finditer(text):
        index = next(i for i in range(len(_NAMES)) if match.group(f"n{i}") is not None)
        found.append(Tag(_NAMES[index], bool(match.group("slash")), match.start(), match.end()))
    return found


def strip_invisible(text: str) -> str:
    """``text`` without zero-width and bidi-control characters (they can hide a tag from a plain search)."""
    return _prepare(text)


def marker(tag: Tag) -> str:
    """The inert text that replaces a tag."""
    return f"[quoted {'/' if tag.closing else ''}{tag.name} tag]"


def neutralize_tags(text: str) -> str:
    """``text`` with every wrapper tag, in any disguise, replaced by an inert ``[quoted ... tag]`` marker."""
    if not text:
        return text
    text = _prepare(text)
    tags = find_tags(text)
    if not tags:
        return text
    out, last = [], 0
    for tag in tags:
        out.append(text[last : tag.start])
        out.append(marker(tag))
        last = tag.end
    out.append(text[last:])
    return "".join(out)
