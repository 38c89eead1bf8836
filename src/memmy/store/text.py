"""Text helpers for full-text search that work for Chinese (and other CJK) as well as English.

SQLite's ``unicode61`` tokenizer keeps a run of CJK characters as one token, so "数据库连接" would only
match itself. We index CJK runs as overlapping character bigrams (plus single characters for one-character
runs) and turn queries into the same bigrams, joined as a phrase. Unlike the ``trigram`` tokenizer this
also matches two-character words such as "部署" or "数据", which are the most common Chinese terms.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

CJK_RANGES = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uac00-\ud7af"  # Hangul syllables
)
CJK_RUN = re.compile(f"[{CJK_RANGES}]+")
_WORD = re.compile(rf"[{CJK_RANGES}]+|[^\W_]+(?:[_\-.][^\W_]+)*", re.UNICODE)

ENGLISH_STOPWORDS = frozenset(
    """a an and are as at be but by can could did do does for from had has have how i if in into is it its
    me my no not of on or our so than that the their them then there these they this to was we were what
    when where which who why will with would you your about please just""".split()
)
CHINESE_STOPWORDS = frozenset(
    "的 了 是 在 我 你 他 她 它 们 吗 呢 吧 啊 和 与 及 就 都 也 还 把 被 这 那 有 一个".split()
)


#: A redaction marker (``[REDACTED:<kind>]``, ``[REDACTED]``, or a broken one left open). Its words say that a
#: secret was removed, not what the memory is about: they are not indexed, embedded or matched.
REDACTION_MARKER = re.compile(r"\[REDACTED(?::[\w.\-]*)?\]?")


def without_markers(text: str) -> str:
    """``text`` with every redaction marker replaced by a space (unchanged when it has none)."""
    return REDACTION_MARKER.sub(" ", text) if "[REDACTED" in text else text


def cjk_bigrams(run: str) -> list[str]:
    """Split one CJK run into overlapping bigrams ("数据库" -> ["数据", "据库"])."""
    if len(run) <= 1:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def segment_for_index(text: str) -> str:
    """Rewrite ``text`` so unicode61 indexes CJK runs as bigrams; non-CJK text is unchanged."""
    if not text or not CJK_RUN.search(text):
        return text
    return CJK_RUN.sub(lambda m: " " + " ".join(cjk_bigrams(m.group(0))) + " ", text)


#: Index a memory: its full-text row takes the memory's own rowid (schema migration 009), so the row is found
#: by rowid, never by the UNINDEXED ``id``. Parameters: the :func:`fts_row` columns, then the memory id.
FTS_INSERT = (
    "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags) "
    "SELECT rowid, id, ?, ?, ? FROM memories WHERE id = ?"
)
#: The same with the memory's rowid known: rowid, memory id, then the :func:`fts_row` columns.
FTS_INSERT_AT = "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags) VALUES (?,?,?,?,?)"
#: Drop a memory's full-text row (parameter: the memory id); a no-op when it has none.
FTS_DELETE = "DELETE FROM memories_fts WHERE rowid = (SELECT rowid FROM memories WHERE id = ?)"


def fts_row(memory_key: str | None, title: str | None, value: str, tags_json: str | None) -> tuple[str, str, str]:
    """Build the (identifier, memory_value, tags) columns of a memories_fts row."""
    try:
        tags = json.loads(tags_json or "[]")
    except ValueError:
        tags = []
    tag_text = " ".join(str(t) for t in tags) if isinstance(tags, list) else ""
    identifier = without_markers(" ".join(part for part in (memory_key or "", title or "") if part))
    return segment_for_index(identifier), segment_for_index(without_markers(value)), segment_for_index(tag_text)


def query_terms(query: str, *, drop_stopwords: bool = True) -> list[str]:
    """Extract search terms: words/identifiers and CJK runs, lower-cased, stopwords removed, de-duplicated."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(query):
        term = match.group(0).lower()
        if drop_stopwords and (term in ENGLISH_STOPWORDS or term in CHINESE_STOPWORDS):
            continue
        seen.setdefault(term, None)
    return list(seen)


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


def _cjk_parts(run: str) -> list[str]:
    """Bigrams of a CJK run, each alone (recall), plus the run as a phrase when it is word-sized (precision)."""
    grams = cjk_bigrams(run)
    parts = list(dict.fromkeys(grams))
    if 2 < len(run) <= 6:
        parts.append(" ".join(grams))
    return parts


def fts_match_parts(terms: Iterable[str]) -> list[str]:
    """The quoted tokens and phrases a MATCH of ``terms`` ORs together, in order, each once: a word as it is, a
    CJK run as its bigrams and, when short, the run as a phrase. Each is a MATCH expression of its own, and
    bm25() scores each on its own."""
    parts: list[str] = []
    for term in terms:
        for piece in CJK_RUN.split(term):
            if piece.strip():
                parts.append(piece)
        for run in CJK_RUN.findall(term):
            parts.extend(_cjk_parts(run))
    return [_quote(p) for p in dict.fromkeys(parts)]


def fts_match_expression(terms: Iterable[str]) -> str:
    """Turn terms into an FTS5 MATCH expression: every token OR-ed, BM25 does the ranking.

    CJK runs contribute their bigrams (so a sentence matches documents that share its words) and, when
    short, the whole run as a phrase (:func:`fts_match_parts`). Every token is quoted, so user text can never
    inject FTS5 syntax (``NEAR``, ``*``, column filters).
    """
    return " OR ".join(fts_match_parts(terms))


def phrase_words(fragment: str) -> list[str]:
    """The words of ``fragment`` as the index splits them (CJK as bigrams): what an exact phrase of it is made of."""
    return re.findall(r"[^\W_]+", segment_for_index(fragment))


def phrase_match_expression(fragments: Iterable[str]) -> str:
    """OR of quoted phrases (each fragment tokenised like the index, CJK as bigrams)."""
    phrases = []
    for fragment in fragments:
        words = phrase_words(fragment)
        if words:
            phrases.append(_quote(" ".join(words)))
    return " OR ".join(dict.fromkeys(phrases))
