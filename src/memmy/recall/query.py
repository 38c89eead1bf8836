"""Query preparation without an LLM: keywords, FTS terms, CJK patterns, structural fragments, tags.

With an evolution LLM configured, :mod:`memmy.recall.llm_steps` may replace the vector text and keywords;
everything here is the rule-based baseline and the fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memmy.capture.trace import derive_tags, error_signatures
from memmy.recall.dates import DateRange, date_ranges
from memmy.store.text import (
    CHINESE_STOPWORDS,
    CJK_RUN,
    ENGLISH_STOPWORDS,
    cjk_bigrams,
    phrase_words,
    without_markers,
)

MAX_QUERY_CHARS = 1500
_TOKEN = re.compile(r"[^\W_][\w\-]*", re.UNICODE)
_IDENTIFIER = re.compile(r"[A-Za-z0-9_:\-./]{12,}")
_PATH = re.compile(
    r"(?:~|\.{1,2})?/(?:[\w.\-]+/)*[\w.\-]+|\b[\w\-]+\.(?:py|ts|tsx|js|jsx|go|rs|java|rb|md|json|ya?ml|toml|sql|sh)\b"
)
_ERROR_CODE = re.compile(
    r"\b(?:[A-Z][A-Z0-9]*_[A-Z0-9_]+|E[A-Z]{3,}|[A-Z]{2,}\d{2,}|HTTP\s?[45]\d\d|exit (?:code )?\d+)\b"
)
#: The end of a sentence in running text: ``.``, ``?``, ``!`` or ``;`` and the space after it (not the dot of
#: ``manage.py`` or ``127.0.0.1``).
_SENTENCE_BREAK = re.compile(r"(?<=[.?!;])[ \t]+")
#: Where an error's own words start in the error patterns that also take the words before them (their subject).
_ERROR_HEAD = re.compile(
    r"\b(?:command not found|not found|no such file|permission denied|is required|must be|cannot|failed to)\b",
    re.IGNORECASE,
)
#: Words that open a request rather than an error's output ("fix Permission denied …").
_REQUEST_WORDS = frozenset({"fix", "help", "solve", "resolve", "debug", "explain"})
_SHORT_ASCII = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{2}(?![A-Za-z0-9])")
QUESTION_WORDS = frozenset(
    "what when where which who whom whose why how did does do is are was were will would can could should "
    "tell know remember recall".split()
)
CJK_QUESTION_WORDS = frozenset(
    "什么 怎么 如何 为什么 哪里 哪个 是否 有没有 能不能 可以 吗 呢 请问 一下 帮我 我们 你们".split()
)
CJK_EXPANSIONS = {"爱吃": ("喜欢吃",), "喜欢吃": ("爱吃",), "报错": ("错误",), "错误": ("报错",)}


def truncate_query(text: str, limit: int = MAX_QUERY_CHARS) -> str:
    """Keep head and tail of an over-long query around a visible marker."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = limit - head - 20
    return text[:head] + "\n...[truncated]...\n" + text[-tail:]


@dataclass
class PreparedQuery:
    """Everything the channels need, derived once per recall."""

    text: str
    vector_text: str
    keywords: list[str]
    fts_terms: list[str]
    pattern_terms: list[str]
    structural: list[str]
    tags: list[str]
    identifier_like: bool
    source: str = "rules"
    notes: list[str] = field(default_factory=list)
    dates: list[DateRange] = field(default_factory=list)

    def to_debug(self) -> dict[str, Any]:
        """For ``--verbose``."""
        return {
            "vectorText": self.vector_text[:300],
            "keywords": self.keywords,
            "ftsTerms": self.fts_terms,
            "patternTerms": self.pattern_terms,
            "structural": self.structural,
            "tags": self.tags,
            "identifierLike": self.identifier_like,
            "source": self.source,
            "dates": [
                f"month {d.month_only}" if d.month_only else f"{d.start.isoformat()}/{d.end.isoformat()}"
                for d in self.dates
            ],
        }


def _is_stopword(token: str) -> bool:
    return token in ENGLISH_STOPWORDS or token in QUESTION_WORDS or token in CHINESE_STOPWORDS


def _cjk_words(run: str) -> list[str]:
    """Strip question words from a CJK run, return what is left as word-like pieces."""
    pieces = [run]
    for word in sorted(CJK_QUESTION_WORDS | CHINESE_STOPWORDS, key=len, reverse=True):
        pieces = [p for piece in pieces for p in piece.split(word)]
    return [p for p in pieces if p]


def extract_keywords(text: str, limit: int = 8) -> list[str]:
    """Rule-based keywords: content words and identifiers (English), CJK runs minus question words."""
    keywords: dict[str, None] = {}
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if CJK_RUN.fullmatch(token):
            for word in _cjk_words(token):
                keywords.setdefault(word, None)
                for extra in CJK_EXPANSIONS.get(word, ()):
                    keywords.setdefault(extra, None)
            continue
        for part in CJK_RUN.split(token):
            lowered = part.lower().strip("-")
            if not lowered or _is_stopword(lowered):
                continue
            if len(lowered) >= 2 or any(ch.isdigit() for ch in lowered):
                keywords.setdefault(lowered, None)
        for run in CJK_RUN.findall(token):
            for word in _cjk_words(run):
                keywords.setdefault(word, None)
    return list(keywords)[: max(limit, 1) * 4]


def pattern_terms_of(text: str, limit: int = 16) -> list[str]:
    """Short patterns FTS words miss: CJK runs (2-6 chars) and their bigrams, two-character ASCII words."""
    terms: dict[str, None] = {}
    for run in CJK_RUN.findall(text):
        for word in _cjk_words(run):
            if 2 <= len(word) <= 6:
                terms.setdefault(word, None)
            for gram in cjk_bigrams(word):
                if len(gram) == 2:
                    terms.setdefault(gram, None)
    for match in _SHORT_ASCII.finditer(text):
        token = match.group(0).lower()
        if not _is_stopword(token) and not token.isdigit():
            terms.setdefault(token, None)
    return list(terms)[:limit]


def structural_fragments(text: str, limit: int = 6) -> list[str]:
    """Error signatures, file paths and error codes in the query (used by the L1 structural channel).

    Each is looked for as an exact phrase, so each must be something a stored trace can contain word for word:
    an error signature is taken from one sentence of the query at a time (the question around it, "I'm in the
    gateway repo now.", is not part of the error), from the error's head when the sentence asks about it (see
    :func:`_error_part`), and a path that is one word ("/main" of ``origin/main``) is left to the keyword
    channels: as a phrase it is only that word, which BM25 already ranks.
    """
    found: dict[str, None] = {}
    for fragment in error_signatures(_SENTENCE_BREAK.sub("\n", text), limit=4):
        error = _error_part(fragment)
        if error is not None:
            found.setdefault(error, None)
    for match in _ERROR_CODE.finditer(text):
        found.setdefault(match.group(0), None)
    for match in _PATH.finditer(text):
        if len(phrase_words(match.group(0))) > 1:
            found.setdefault(match.group(0), None)
    return list(found)[:limit]


def _error_part(fragment: str) -> str | None:
    """The error in a sentence that asks about it: "how do I fix Permission denied (publickey)" -> "Permission
    denied (publickey)" (the words before an error's head are its subject in an error's output, a question in a
    prompt). Unchanged when the sentence does not start with a question word or a request (fix, help, …); None
    when the error's part is under three words ("not found" alone is in every such trace)."""
    first = fragment.split(maxsplit=1)[0].lower() if fragment.strip() else ""
    if first not in QUESTION_WORDS and first not in _REQUEST_WORDS:
        return fragment
    head = _ERROR_HEAD.search(fragment)
    if head is None:
        return fragment
    error = fragment[head.start() :]
    return error if len(phrase_words(error)) >= 3 else None


def is_identifier_like(text: str) -> bool:
    """A token of 16+ characters with a letter and ``_``, ``:``, ``-`` or a digit (ids, hashes, error codes)."""
    for match in _IDENTIFIER.finditer(text):
        token = match.group(0)
        if len(token) >= 16 and any(ch.isalpha() for ch in token) and any(ch in "_:-" or ch.isdigit() for ch in token):
            return True
    return False


def prepare_query(text: str, context_hints: dict[str, Any] | None = None, keyword_limit: int = 8) -> PreparedQuery:
    """Build the rule-based prepared query (the LLM path may refine ``vector_text`` and ``keywords``)."""
    hints = ""
    if context_hints:
        lines = [f"{k}: {v}" for k, v in list(context_hints.items())[:8] if isinstance(v, str | int | float)]
        hints = "\n".join(lines)
    # a redaction marker left in a prompt (a pasted, redacted memory) matches every redacted memory: not a term
    full = truncate_query(without_markers(text).strip() + (f"\n{hints}" if hints else ""))
    keywords = extract_keywords(full, keyword_limit)
    fts_terms = keywords[:24] if keywords else []
    return PreparedQuery(
        text=full,
        vector_text=full,
        keywords=keywords[:keyword_limit],
        fts_terms=fts_terms,
        pattern_terms=pattern_terms_of(full),
        structural=structural_fragments(full),
        tags=derive_tags(full, [], []),
        identifier_like=is_identifier_like(full),
        dates=date_ranges(text),
    )
