"""The import's fast paths decide exactly as the slow forms they stand for (same values, same errors)."""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any

import pytest

from memmy.sources.imported_turns import ImportedTurn
from memmy.sources.importer import MAX_TURN_BYTES, turn_over_limit, turn_size
from memmy.sources.model import SourceMessage, has_long_digit_run, loads_json
from memmy.store.jsontext import dumps_json
from memmy.transcripts import model

LINES = [
    b'{"a":1,"a":2}',
    b'{"x":1e309,"y":-0.0,"z":-0}',
    b'{"x":"\\ud83d cut emoji"}',
    b'\xef\xbb\xbf{"bom":1}',
    b'{"n":NaN,"i":Infinity}',
    b'{"big":123456789012345678901234567890,"neg":-9223372036854775809,"u64":18446744073709551615}',
    b'{"pi":3.141592653589793238462643383279,"tiny":5e-324}',
    '{"text":"数据库 ünïcödé \\u2028"}'.encode(),
]


@pytest.mark.parametrize("line", LINES)
def test_loads_json_reads_a_line_as_json_loads_does(line: bytes) -> None:
    expected, got = json.loads(line), loads_json(line)
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_long_digit_runs_are_found_as_the_regex_finds_them() -> None:
    rng = random.Random(13)
    pattern = re.compile(rb"[0-9]{19}")
    samples = [b"1" * 19, b"1" * 18, b"x" + b"9" * 19 + b"x", b"12345678901234567890", "٠١٢".encode() * 9]
    samples += [bytes(rng.choice(b"0123456789 a\xff") for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    for raw in samples:
        assert has_long_digit_run(raw) == bool(pattern.search(raw)), raw


@pytest.mark.parametrize("line", [b'{"a":', b"\xff\xfe{}", b"[1,2", b'{"a" 1}'])
def test_loads_json_refuses_what_json_loads_refuses(line: bytes) -> None:
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
        json.loads(line)
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
        loads_json(line)


def _slow_iso(value: str) -> str:
    saved = model._CANONICAL_TIME
    model._CANONICAL_TIME = re.compile("(?!)")
    try:
        return model.to_iso(value)
    finally:
        model._CANONICAL_TIME = saved


def test_canonical_timestamps_are_checked_not_reparsed() -> None:
    rng = random.Random(11)
    stamps = ["2024-02-29T10:00:00.000Z", "2023-02-29T10:00:00.000Z", "0000-01-01T00:00:00.000Z"]
    stamps += [
        f"{rng.randint(0, 9999):04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}T{rng.randint(0, 25):02d}:"
        f"{rng.randint(0, 61):02d}:{rng.randint(0, 61):02d}.{rng.randint(0, 999):03d}Z"
        for _ in range(3000)
    ]
    assert [model.to_iso(s) for s in stamps] == [_slow_iso(s) for s in stamps]


def _turn(*texts: str) -> ImportedTurn:
    roles = ["user", "tool", "assistant"]
    messages = [
        SourceMessage(f"m{i}", "c", roles[i % 3], text, "2026-01-01T00:00:00.000Z", "codex", tool_output=text or None)  # type: ignore[arg-type]
        for i, text in enumerate(texts)
    ]
    return ImportedTurn("codex", "c", messages)


def test_turn_size_limit_is_only_measured_near_the_limit() -> None:
    near = MAX_TURN_BYTES // 2
    for turn in (_turn("hi", "out", "ok"), _turn("x" * near, "y", "z"), _turn("\x1f" * (near // 3), "", "a")):
        assert turn_over_limit(turn) == (turn_size(turn) > MAX_TURN_BYTES)
    assert turn_over_limit(_turn("x" * MAX_TURN_BYTES, "", "a"))


VALUES: list[Any] = [
    {"a": 1, "b": [1.5, None, True], "ü": "é\u2028\x1f"},
    {"big": 2**70},
    {"s": "\ud800"},
    {2.5: 1, 3: "x"},
    [1, (2, 3)],
]


@pytest.mark.parametrize("value", VALUES)
def test_json_columns_mean_what_json_dumps_meant(value: Any) -> None:
    assert json.loads(dumps_json(value)) == json.loads(json.dumps(value, ensure_ascii=False, default=str))


def test_json_columns_refuse_what_json_dumps_refused_without_default() -> None:
    with pytest.raises(TypeError):
        dumps_json({"x": {1, 2}}, None)
    assert json.loads(dumps_json({"x": {1}})) == {"x": "{1}"}
    assert json.loads(dumps_json({"nan": math.nan})) == {"nan": None}  # json.dumps wrote NaN, which is not JSON
