"""Vet a model's free-text answer before anything keeps it: small local models answer badly in known ways.

Measured against Qwen2.5-Coder-0.5B and SmolLM2-135M (docs/evolution.md "LLM steps with a small local model"):
they echo the instructions or the example back, restate the user's question as its "summary", repeat one
clause until the token limit, answer in another language or script, answer with a schema placeholder
(``"str"``, ``"..."``) or ramble far past the asked length. :func:`vet_text` turns such an answer into ``""``
(the caller then keeps its no-LLM result) and logs why, with the step's name and a short scrubbed excerpt of the
answer only: never the prompt, which holds the user's memories.
"""

from __future__ import annotations

import logging
import re
import unicodedata

from memmy.llm.client import scrub

log = logging.getLogger("memmy.llm.guard")

_TOKEN = re.compile(r"[^\W\d_]+|\d+|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_LABEL = re.compile(r"^\s*(?:summary|answer|title|query|output|result|json)\s*[:：]\s*", re.I)
_PLACEHOLDERS = frozenset({"", "...", "…", "str", "string", "text", "none", "null", "n/a", "na", "todo", "tbd", "-"})
_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")
#: Script families told apart by the language check (Unicode character-name prefixes); anything else is Latin.
_SCRIPT_PREFIXES = (
    "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "CYRILLIC", "ARABIC", "HEBREW", "GREEK", "THAI", "DEVANAGARI",
)  # fmt: skip

#: memmy's own prompt markup (trace headers, value columns): an answer quoting it copied the input's scaffolding.
_MARKUP = re.compile(r"\[trace [^\]]+\]|\bepisode=\S|\balpha=\d|\bV=-?\d|PATTERN_SIGNATURE|EVIDENCE_TOOLS")
_STOP = frozenset(
    "the and for with from that this then than into when what which your you are was were has have had not "
    "use used using run runs can will should must any all each its it's via per one two".split()
)
ECHO_SHARE = 0.6  # share of an answer's word 4-grams found in the instructions: an echo
REPEAT_SHARE = 0.5  # distinct / all word 4-grams below this (on 16+ words): a degenerate repeat


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def _grams(tokens: list[str], n: int = 4) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _scripts(text: str) -> dict[str, int]:
    """Letter counts per script family (``LATIN``, ``CJK``, ``CYRILLIC`` ...)."""
    counts: dict[str, int] = {}
    for ch in text:
        if not ch.isalpha():
            continue
        name = unicodedata.name(ch, "")
        family = next((p for p in _SCRIPT_PREFIXES if name.startswith(p)), "LATIN" if name.startswith("LATIN") else "")
        if family in ("HIRAGANA", "KATAKANA"):
            family = "CJK"
        if family:
            counts[family] = counts.get(family, 0) + 1
    return counts


def echoes(text: str, instructions: str, share: float = ECHO_SHARE) -> bool:
    """True when most of ``text``'s word 4-grams are copied from ``instructions`` (or its examples)."""
    grams = _grams(_tokens(text))
    if len(grams) < 2:
        norm = " ".join(_tokens(text))
        return len(norm) >= 12 and norm in " ".join(_tokens(instructions))
    source = set(_grams(_tokens(instructions)))
    return sum(g in source for g in grams) / len(grams) >= share


def restates(text: str, question: str) -> bool:
    """True when ``text`` is only the (question) text it was asked to compress, word for word."""
    answer, asked = " ".join(_tokens(text)), " ".join(_tokens(question))
    return bool(answer) and len(answer) >= 8 and (answer == asked or (answer in asked and len(answer) > len(asked) / 2))


def _terms(text: str) -> set[str]:
    """Content terms: Latin words of 3+ letters (no stop words), numbers, CJK character bigrams."""
    terms = {t for t in _tokens(text) if (len(t) >= 3 or t.isdigit()) and t not in _STOP and not _CJK.match(t)}
    for run in re.findall(r"[\u3400-\u9fff]{2,}", text):
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def anchors(text: str, grounding: str, instructions: str = "") -> int:
    """How many of ``text``'s content terms come from ``grounding`` (the traces) and not from ``instructions``."""
    return len((_terms(text) & _terms(grounding)) - _terms(instructions))


def repetitive(text: str) -> bool:
    """True for a degenerate repeat: on 16+ words, fewer than half of the word 4-grams are distinct."""
    grams = _grams(_tokens(text))
    return len(grams) >= 13 and len(set(grams)) / len(grams) < REPEAT_SHARE


def wrong_language(text: str, source: str) -> bool:
    """True when the answer is written in a script the source does not use (beyond a few names or commands).

    A Chinese request answered only in English, an English one answered in Chinese, or Cyrillic out of nowhere.
    Latin letters inside a CJK answer (commands, names) are fine, and so are CJK names in an English one.
    """
    answer, given = _scripts(text), _scripts(source)
    letters = sum(answer.values())
    if letters < 8 or not given:
        return False
    cjk = given.get("CJK", 0)
    if cjk >= 4 and cjk / sum(given.values()) >= 0.2 and answer.get("CJK", 0) == 0:
        # a Chinese (Japanese, Korean) exchange, commands and all, answered in English only; an answer made only
        # of words the source already has (a command, a path, a name copied from it) is no language switch
        return bool(set(_tokens(text)) - set(_tokens(source)))
    foreign = sum(n for script, n in answer.items() if script not in given and script != "LATIN")
    return foreign / letters > 0.3


def clip_sentences(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` at the last sentence end (else word boundary) that fits."""
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    ends = [m.start() for m in _SENTENCE_END.finditer(head) if m.start() > max_chars // 3]
    if ends:
        return head[: ends[-1]].rstrip()
    cut = head.rsplit(" ", 1)[0] if " " in head[max_chars // 2 :] else head
    return cut.rstrip(" ,;:-") + "…"


def _collapse_repeats(text: str) -> str:
    """Drop sentences the answer already said (a small model's loop), keeping the first of each."""
    seen: set[str] = set()
    kept: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        key = " ".join(_tokens(_LABEL.sub("", sentence)))
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(sentence)
    return " ".join(s for s in kept if s).strip()


def reject(step: str, reason: str, answer: object) -> None:
    """Log one refused answer: the step, the reason and at most 80 scrubbed characters of the answer."""
    excerpt = scrub(" ".join(str(answer).split()))[:80]
    log.warning("LLM %s answer not used (%s): %r", step, reason, excerpt)


def why_not(
    text: str,
    *,
    instructions: str,
    source: str = "",
    question: str = "",
    max_chars: int = 400,
    grounding: str = "",
    min_anchors: int = 2,
) -> tuple[str, str]:
    """(cleaned text, "") or ("", reason) for one free-text answer; see :func:`vet_text`."""
    cleaned = " ".join(_LABEL.sub("", text.strip().strip("`").strip()).split()).strip("\"' ")
    if cleaned.lower().strip(".…<> ") in _PLACEHOLDERS or re.fullmatch(r"<[^<>]{0,60}>", cleaned):
        return "", "empty" if not cleaned else "placeholder"
    if not _TOKEN.search(cleaned):
        return "", "no_words"
    cleaned = _collapse_repeats(_LABEL.sub("", cleaned)) or cleaned
    if repetitive(cleaned):
        return "", "repetitive"
    if instructions and echoes(cleaned, instructions):
        return "", "echoed_instructions"
    if _MARKUP.search(cleaned):
        return "", "echoed_input_markup"
    if question and restates(cleaned, question):
        return "", "restated_question"
    if grounding and anchors(cleaned, grounding, instructions) < min_anchors:
        return "", "ungrounded"
    if source and wrong_language(cleaned, source):
        return "", "wrong_language"
    if len(cleaned) > max_chars * 4:
        return "", "over_long"
    return clip_sentences(cleaned, max_chars), ""


def vet_text(
    step: str,
    value: object,
    *,
    instructions: str,
    source: str = "",
    question: str = "",
    max_chars: int = 400,
    grounding: str = "",
    min_anchors: int = 2,
) -> str:
    """A model's free-text field, cleaned, or ``""`` (logged) when it must not be kept.

    Refused: a non-string or empty value, a schema placeholder, a degenerate repeat, an echo of
    ``instructions`` (the prompt, examples included) or of memmy's prompt markup, a word-for-word restatement of
    ``question``, guidance sharing fewer than ``min_anchors`` content terms with ``grounding`` (the traces it
    should come from: "Check the logs for errors" from a trace about the Node heap), an answer in a script
    ``source`` does not use, or one over four times ``max_chars``. Kept answers lose a leading
    ``Summary:``-style label, repeated sentences and whatever runs past ``max_chars`` (cut at a sentence end).
    """
    if not isinstance(value, str):
        reject(step, "not_text" if value is not None else "missing", "" if value is None else value)
        return ""
    cleaned, reason = why_not(
        value, instructions=instructions, source=source, question=question, max_chars=max_chars,
        grounding=grounding, min_anchors=min_anchors,
    )  # fmt: skip
    if reason:
        reject(step, reason, value)
    return cleaned
