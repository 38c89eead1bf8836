"""The one-pass keyword scan finds exactly the keywords a substring search finds (with and without its library)."""

from __future__ import annotations

import random

from memmy.redact.engine import DEFAULT_REDACTOR
from memmy.redact.keywords import KeywordScan


def test_scan_finds_what_substring_search_finds_overlapping_ones_included() -> None:
    keywords = list(DEFAULT_REDACTOR._by_keyword)
    scan = KeywordScan(keywords)
    without_library = KeywordScan(keywords)
    without_library._automaton = None
    rng = random.Random(5)
    alphabet = "sk-ant_proj密码令牌 :/=aeiou" + "".join(keywords[:40])
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        expected = {k for k in keywords if k in text}
        assert set(scan.found(text)) == expected
        assert set(without_library.found(text)) == expected
    assert set(scan.found("an sk-ant-api03 key")) >= {"sk", "sk-", "sk-ant-"}


def test_a_text_without_keywords_is_cleared_in_one_scan() -> None:
    assert not DEFAULT_REDACTOR.could_redact("fix the flaky test in module m3\nFixed it.")
    assert DEFAULT_REDACTOR.could_redact("fix it\nOPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz123456")
    assert DEFAULT_REDACTOR.could_redact("x" * 5000)  # the keyword-less long base64 rule may apply
