"""The injection wrapper's own tags, and the control tags of agents and chat models, found in any disguise and made
inert.

memmy wraps recalled memory in ``<memmy_memory_context>`` and the live prompt in ``<current_user_request>``.
A stored text that carries those tags could end the wrapper early or pose as the user's request; one that carries
an agent's or a model's own control tags (``<system-reminder>``, ChatML's ``<|im_start|>``, ``</s>``, ``[INST]``)
could pose as the host or the model's turn structure. So every form a model might still read as such a tag is
found and replaced by a visible, inert marker such as ``[quoted /current_user_request tag]``.

Invisible characters (format controls: zero-width, bidi embeddings and isolates, the Unicode TAG block
U+E0000-U+E007F, variation selectors, Hangul fillers) are removed from the whole text first. Tags are then looked
for in a *folded view* of the text, one character for each character of the text, so a match maps back to the
same span: each character is NFKC/NFKD compatibility-folded with its combining marks dropped (full-width and
mathematical letters, ``＜`` ``／``), then folded by Unicode's confusables table (Cyrillic ``а``, Greek ``ο``,
``ᐸ``; the table ships with the ``confusable-homoglyphs`` package). The view also accepts any case, spaces or
``-``/``.`` inside a name, spaces around ``/``, attributes, a missing ``>``, HTML entities (``&lt;``, ``&#60;``,
``&#x3c;``) and URL escapes (``%3C``). Only the matched spans change; the rest of the text keeps its own letters.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from importlib import resources

#: Canonical names: the memmy wrapper, the wrappers of memmy's predecessors, and the request tag.
CONTEXT_NAMES = ("memmy_memory_context", "memos_context", "memory_context")
REQUEST_NAME = "current_user_request"
#: Agent-host and chat-template tags a recalled memory must never carry as tags.
CONTROL_NAMES = ("system_reminder", "system", "start_of_turn", "end_of_turn", "eos", "bos", "s")

#: Format controls that are visible marks, not invisible ones (Arabic, Syriac and Kaithi number signs): kept.
_VISIBLE_FORMAT = "\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"
#: Every invisible character removed before the search: the format controls (Unicode category Cf, Unicode 14)
#: less the visible ones above, the whole TAG block, variation selectors, the combining grapheme joiner,
#: Mongolian variation selectors, Khmer inherent vowels and Hangul fillers.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
#: What a combining mark becomes in the folded view (one character, so spans still line up).
_MARK = "\u0300"
#: Bar-like characters folded to ``|`` (the confusables table folds most of them to ``l``, which would hide
#: ``<ǀim_startǀ>``); DeepSeek's own tokens use the full-width bar, which NFKC folds already.
_BARS = "\u01c0\u05c0\u07ca\u2016\u2223\u2502\u2503\u2758\u23d0\u239c\u4e28\uffe8"

#: Look-alikes Unicode's confusables table leaves out because they match only in lower case or as small
#: capitals (Cyrillic ``м`` ``т`` ``к`` ``н`` ``п`` ``в`` ``ь``, Greek ``ε`` ``η`` ``τ``): ``мемму`` still reads memmy.
_SMALL_CAPS = {"м": "m", "т": "t", "к": "k", "н": "h", "п": "n", "в": "b", "ь": "b", "ε": "e", "η": "n", "τ": "t"}

_LT = r"(?:<|&lt;?|&#0*60;?|&#x0*3c;?|%3c|\u2039|\u2329|\u3008|\u27e8|\u276e)"
_GT = r"(?:>|&gt;?|&#0*62;?|&#x0*3e;?|%3e|\u203a|\u232a|\u3009|\u27e9|\u276f)"
_SLASH = r"(?:/|&#0*47;?|&#x0*2f;?|%2f|\u2215|\u2044)"
_SEP = r"[\s_\-.:]*"
_NOT_NAME = r"(?![A-Za-z0-9_])"
#: After the name: attributes and ``>`` on the same line, or nothing (a tag left without its ``>``).
_TAIL = r"(?:(?P<gt>[^<>\n]{0,300}?\s*" + _SLASH + r"?\s*" + _GT + r")|)"


#: Letters the confusables table folds to a sibling (capital ``І`` and ``Ι`` to ``l``, ``О`` may come as ``0``).
_SIBLINGS = {"i": "[il1]", "o": "[o0]"}


def _name(canonical: str) -> str:
    """A pattern for ``canonical`` with separators between its parts and combining marks after any letter."""
    return _SEP.join(
        "".join(f"{_SIBLINGS.get(c, re.escape(c))}{_MARK}*" for c in part) for part in canonical.split("_")
    )


def _tag_pattern(names: tuple[str, ...], tail: str) -> re.Pattern[str]:
    """A tag with one of ``names``. A long name (``memmy_memory_context``, ``system_reminder``) counts even when
    letters follow it, as when the removal of a TAG-block ``>`` (U+E003E) joins it to the next word; a short one
    (``system``, ``s``) only when it ends there."""
    alternatives = "|".join(f"(?P<n{i}>{_name(n)}{'' if len(n) >= 10 else _NOT_NAME})" for i, n in enumerate(names))
    return re.compile(_LT + r"\s*(?P<slash>" + _SLASH + r")?\s*(?:" + alternatives + ")" + tail, re.IGNORECASE)


_NAMES = (*CONTEXT_NAMES, REQUEST_NAME)
_TAG = _tag_pattern(_NAMES, _TAIL)
#: ``<system-reminder>`` and ``<start_of_turn>`` as the wrapper's tags; the one-letter and three-letter tokens
#: (``</s>``, ``<eos>``) only with their ``>`` or as a closing ``</s``, so ``<s`` in ``<span`` or prose stays.
_LONG_CONTROL = CONTROL_NAMES[:4]
_CONTROL = _tag_pattern(_LONG_CONTROL, _TAIL)
_SHORT_CONTROL = _tag_pattern(CONTROL_NAMES[4:], r"(?:(?P<gt>\s*" + _GT + ")|)")
#: ChatML and its relatives: ``<|im_start|>``, ``<|eot_id|>``, ``<｜end▁of▁sentence｜>``; a known name also when
#: the closing bar or ``>`` is missing.
_SPECIAL = re.compile(
    _LT
    + r"\s*\|\s*(?:(?P<name>[^|<>\s]{1,60}?)\|(?:"
    + _GT
    + r")?|(?P<known>im[_\s]*(?:start|end|sep)|endoftext|eot[_\s]*id|(?:start|end)[_\s]*header[_\s]*id"
    + r"|begin[_\s]*of[_\s]*text|system|user|assistant)(?![A-Za-z0-9_])(?:\s*\|\s*(?:"
    + _GT
    + r")?)?)",
    re.IGNORECASE,
)
#: Llama 2's ``[INST]`` / ``[/INST]`` and ``<<SYS>>`` / ``<</SYS>>``.
_LLAMA = re.compile(
    r"\[\s*(?P<slash>/)?\s*(?P<name>INST)\s*\]|"
    + _LT
    + r"\s*"
    + _LT
    + r"\s*(?P<slash2>/)?\s*(?P<name2>SYS)\s*"
    + _GT
    + r"\s*"
    + _GT,
    re.IGNORECASE,
)
_PREFILTER = re.compile(r"c[o0]ntext|request", re.IGNORECASE)
_MAYBE_CONTROL = re.compile("[<\\[&%\u2039\u2329\u3008\u27e8\u276e]")


@dataclass(frozen=True)
class Tag:
    """One wrapper or control tag found in a text."""

    name: str  # canonical name
    closing: bool
    start: int
    end: int
    kind: str = "tag"  # "tag", or "token" for a chat-template special token such as ``<|im_start|>``
    complete: bool = True  # False for a tag left without its ``>``


@cache
def _confusables() -> dict[str, str]:
    """Unicode's confusables folded to ASCII: each non-ASCII character that looks like one ASCII character."""
    try:
        table_file = resources.files("confusable_homoglyphs").joinpath("confusables.json")
        data = json.loads(table_file.read_text("utf-8"))
    except (ModuleNotFoundError, OSError):  # a bare ``python -S`` start: compatibility folding still applies
        return {}
    table: dict[str, str] = {}
    for char, glyphs in data.items():
        if len(char) == 1 and not char.isascii():
            ascii_glyphs = [g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii() and g["c"].isprintable()]
            if ascii_glyphs:
                table[char] = ascii_glyphs[0]
    return table


class _Fold(dict[int, str]):
    """``str.translate`` table for the folded view, filled on first sight of each character."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if char in _BARS:
            folded = "|"
        elif unicodedata.category(char) in ("Mn", "Me"):
            folded = _MARK
        else:
            base = "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))
            base = base if len(base) == 1 else char
            folded = "|" if base in _BARS else _SMALL_CAPS.get(base.lower()) or _confusables().get(base, base)
        self[code] = folded
        return folded


_FOLD = _Fold()


def folded_view(text: str) -> str:
    """``text`` folded one character for one (compatibility forms, confusables, marks), to search for tags in."""
    return text if text.isascii() else text.translate(_FOLD)


def _prepare(text: str) -> str:
    return _INVISIBLE.sub("", text) if not text.isascii() else text


def _might_hold_tags(view: str) -> bool:
    return bool(_PREFILTER.search(view.replace(_MARK, "") if _MARK in view else view))


def _find(pattern: re.Pattern[str], names: tuple[str, ...], view: str) -> list[Tag]:
    found = []
    for match in pattern.finditer(view):
        index = next(i for i in range(len(names)) if match.group(f"n{i}") is not None)
        complete = match.group("gt") is not None
        found.append(Tag(names[index], bool(match.group("slash")), match.start(), match.end(), complete=complete))
    return found


def find_tags(text: str) -> list[Tag]:
    """Every wrapper tag in ``text`` (call on text already passed through :func:`strip_invisible`)."""
    view = folded_view(text)
    return _find(_TAG, _NAMES, view) if _might_hold_tags(view) else []


def _token_name(raw: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", raw.lower()).strip("_")
    return name[:40] or "special"


def find_control_tags(text: str) -> list[Tag]:
    """Every agent or chat-template control tag in ``text`` (``<system-reminder>``, ``<|im_start|>``, ``</s>``)."""
    view = folded_view(text)
    if not _MAYBE_CONTROL.search(view):
        return []
    short = [t for t in _find(_SHORT_CONTROL, CONTROL_NAMES[4:], view) if t.complete or t.closing]
    found = _find(_CONTROL, _LONG_CONTROL, view) + short
    for match in _SPECIAL.finditer(view):
        name = _token_name(match.group("name") or match.group("known"))
        found.append(Tag(name, False, match.start(), match.end(), "token"))
    for match in _LLAMA.finditer(view):
        name = (match.group("name") or match.group("name2")).upper()
        found.append(Tag(name, bool(match.group("slash") or match.group("slash2")), match.start(), match.end()))
    return found


def strip_invisible(text: str) -> str:
    """``text`` without invisible characters (format controls, TAG characters, variation selectors: they can hide
    a tag from a plain search or carry text a reader never sees)."""
    return _prepare(text)


def marker(tag: Tag) -> str:
    """The inert text that replaces a tag."""
    name = tag.name.replace("_", "-") if tag.name in CONTROL_NAMES[:2] else tag.name
    return f"[quoted {'/' if tag.closing else ''}{name} {tag.kind}]"


def _without_overlaps(tags: list[Tag]) -> list[Tag]:
    kept: list[Tag] = []
    for tag in sorted(tags, key=lambda t: (t.start, -t.end)):
        if not kept or tag.start >= kept[-1].end:
            kept.append(tag)
    return kept


def neutralize_tags(text: str) -> str:
    """``text`` with every wrapper and control tag, in any disguise, replaced by an inert ``[quoted ...]`` marker,
    and its invisible characters removed."""
    if not text:
        return text
    text = _prepare(text)
    tags = _without_overlaps(find_tags(text) + find_control_tags(text))
    if not tags:
        return text
    out, last = [], 0
    for tag in tags:
        out.append(text[last : tag.start])
        out.append(marker(tag))
        last = tag.end
    out.append(text[last:])
    return "".join(out)
