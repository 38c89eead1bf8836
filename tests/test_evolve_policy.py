"""L2 rules: association, stats, induction (heuristic + LLM), failure avoidance, feedback shapes, decision repair."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from memmy.embed import Embedder
from memmy.evolve.failure import (
    avoidance_draft,
    avoidance_llm,
    classify_feedback_shape,
    context_hash,
    failure_key,
    failure_signature,
    is_failure,
    merge_guidance,
    repair_heuristic,
    repair_llm,
    tool_failure_burst,
    value_divergence,
)
from memmy.evolve.model import IndexedPolicy, IndexedTrace, PolicyDraft
from memmy.evolve.policy import (
    association_score,
    best_association,
    compute_stats,
    induce_heuristic,
    induce_llm,
    policy_body,
    policy_key,
    split_signature,
)
from memmy.llm.client import LLMEndpoint, OpenAICompatibleLLM
from tests.llm_stub import ChatStub, run_chat_stub

SIG = "python|test|bash|_"


def unit(*xs: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    v = np.array(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def call(command: str, output: str = "", error: str | None = None) -> dict[str, Any]:
    return {"name": "bash", "input": {"command": command}, "output": output, "error": error, "success": error is None}


def trace(
    tid: str,
    user: str,
    agent: str,
    calls: list[dict[str, Any]],
    value: float = 0.4,
    *,
    status: str = "succeeded",
    sig: str = SIG,
    episode: str | None = None,
    ts: int = 0,
    reflection: str | None = None,
) -> IndexedTrace:
    return IndexedTrace(
        id=tid,
        episode_id=episode or f"ep-{tid}",
        session_id=f"sess-{tid}",
        created_at=f"2026-03-01T10:00:{ts:02d}Z",
        user_text=user,
        agent_text=agent,
        summary=user[:140],
        tags=("python", "test"),
        signature=sig,
        error_signatures=(),
        tool_calls=tuple(calls),
        status=status,
        reflection=reflection,
        alpha=0.5,
        value=value,
    )


def ok_en(tid: str = "ok1", value: float = 0.6) -> IndexedTrace:
    return trace(
        tid,
        "Please fix the pytest import error in CI for the foo package",
        "I installed the package in editable mode, then the tests pass.",
        [call("pip install -e .", "Successfully installed foo-0.1"), call("pytest -q", "5 passed in 0.31s")],
        value,
    )


def fail_en(tid: str = "bad1", module: str = "foo", path: str = "/home/u/foo") -> IndexedTrace:
    return trace(
        tid,
        f"Run the tests for the {module} package",
        "The tests fail to import the package.",
        [call("pytest -q", error=f"E   ModuleNotFoundError: No module named '{module}' ({path}/tests/test_a.py:12)")],
        -0.5,
        status="failed",
    )


def ok_zh(tid: str = "zok", value: float = 0.5) -> IndexedTrace:
    return trace(
        tid,
        "请帮我修复 CI 里 pytest 的导入错误",
        "先用 pip install -e . 安装包，然后测试全部通过。",
        [call("pip install -e .", "安装成功"), call("pytest -q", "5 passed in 0.2s")],
        value,
    )


def fail_zh(tid: str = "zbad") -> IndexedTrace:
    return trace(
        tid,
        "运行 foo 包的测试",
        "测试失败了，找不到模块。",
        [call("pytest -q", error="ModuleNotFoundError: No module named 'foo'")],
        -0.4,
        status="failed",
    )


@contextmanager
def stub_llm(answer: Callable[[str, str], str | None]) -> Iterator[tuple[OpenAICompatibleLLM, ChatStub]]:
    with run_chat_stub(answer) as stub:
        yield OpenAICompatibleLLM(LLMEndpoint(stub.url, "stub-model")), stub


# ---------------------------------------------------------------- association


def test_split_signature_pads_missing_parts() -> None:
    assert split_signature("python|test") == ("python", "test", "_", "_")
    assert split_signature("") == ("_", "_", "_", "_")
    assert split_signature("a||c|D_E|extra") == ("a", "_", "c", "D_E")


def test_association_score_adds_shared_parts_and_hard_gates() -> None:
    t = trace("t", "x", "y", [], sig="python|test|bash|_")
    t = replace(t, vector=unit(1, 0))
    policy = IndexedPolicy(
        id="p", title="t", trigger="", procedure="", signature="python|lint|bash|_", vector=unit(0.8, 0.6)
    )
    score, cos, shared = association_score(t, policy)
    assert cos == pytest.approx(0.8, abs=1e-6) and shared == 2
    assert score == pytest.approx(0.9, abs=1e-6)
    gated = IndexedPolicy(
        id="g", title="t", trigger="", procedure="", signature="docker|test|bash|EXIT_1", vector=t.vector
    )
    score, cos, shared = association_score(t, gated)
    assert cos == pytest.approx(1.0) and shared == 2 and score == pytest.approx(0.4)
    no_vec = IndexedPolicy(id="n", title="t", trigger="", procedure="", signature="python|test|bash|_")
    score, cos, shared = association_score(t, no_vec)
    assert (round(score, 6), cos, shared) == (0.15, 0.0, 3)


def test_best_association_signature_match_without_vectors_and_threshold() -> None:
    t = trace("t", "x", "y", [], sig=SIG)
    same = IndexedPolicy(id="same", title="a", trigger="", procedure="", signature=SIG)
    other = IndexedPolicy(id="other", title="b", trigger="", procedure="", signature="node|npm|bash|_")
    found = best_association(t, [other, same])
    assert found is not None
    assert found[0].id == "same" and found[1] == pytest.approx(0.65) and found[3] == "matches_signature"
    assert best_association(t, [other]) is None
    same = replace(same, status="archived")
    assert best_association(t, [same]) is None
    t = replace(t, vector=unit(1, 0.05))
    close = IndexedPolicy(id="close", title="c", trigger="", procedure="", signature="python|x|y|_", vector=unit(1, 0))
    found = best_association(t, [close])
    assert found is not None and found[3] == "similar_pattern" and found[2] > 0.99


def test_best_association_with_real_minilm_vectors(embedder: Embedder) -> None:
    t = trace("t", "pytest fails with ModuleNotFoundError in CI", "installed the package", [], sig="python|_|_|_")
    texts = [
        "Fix pytest import errors in CI by installing the package in editable mode first",
        "Configure nginx reverse proxy with gzip compression inside a docker container",
    ]
    tvec, pvec_a, pvec_b = embedder.embed([t.summary, *texts], "query")
    t = replace(t, vector=tvec)
    a = IndexedPolicy(id="a", title=texts[0], trigger="", procedure="", signature="python|test|bash|_", vector=pvec_a)
    b = IndexedPolicy(id="b", title=texts[1], trigger="", procedure="", signature="docker|nginx|bash|_", vector=pvec_b)
    found = best_association(t, [b, a], min_similarity=0.0)
    assert found is not None and found[0].id == "a"
    assert association_score(t, a)[1] > association_score(t, b)[1]


# ---------------------------------------------------------------- stats


def test_compute_stats_softmax_blend_and_activation() -> None:
    with_values, without = [0.2, 0.6, 1.0], [0.1]
    weights = [math.exp((v - 1.0) / 0.5) for v in with_values]
    eff = sum(v * w for v, w in zip(with_values, weights, strict=True)) / sum(weights)
    blended = (0.1 * 1 + 0.5 * 5) / 6  # pool mean .7 clamps to baseline .5
    stats = compute_stats(with_values, without, 0.7, 2, None, "candidate")
    assert stats.raw_gain == pytest.approx(eff - blended)
    assert stats.gain == pytest.approx(stats.raw_gain)
    assert stats.confidence == pytest.approx(min(1.0, 0.5 + eff - blended))
    assert stats.status == "active" and stats.support == 2


def test_compute_stats_mean_below_three_ema_and_lifecycle() -> None:
    stats = compute_stats([0.3, 0.5], [], 0.0, 1, 0.1, "candidate")
    raw = 0.4 - 0.2  # mean; no "without" values -> baseline clamp(0, .2, .5) = .2
    assert stats.raw_gain == pytest.approx(raw)
    assert stats.gain == pytest.approx(0.4 * raw + 0.6 * 0.1)
    assert compute_stats([0.1], [], 0.3, 1, None, "candidate").status == "candidate"  # gain -.2
    assert compute_stats([0.1], [], 0.3, 1, None, "active").status == "archived"
    assert compute_stats([0.9], [], 0.3, 0, None, "active").status == "archived"  # no support
    assert compute_stats([0.9], [], 0.3, 3, None, "archived").status == "archived"
    assert compute_stats([0.3], [], 0.3, 1, None, "active").status == "active"  # gain -.0 > -.05
    assert compute_stats([], [], 0.3, 0, None, "candidate").confidence == pytest.approx(0.2)


def test_policy_key_is_hash_of_signature() -> None:
    assert policy_key(SIG) == "policy:" + hashlib.sha256(SIG.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- induction


def test_induce_heuristic_english() -> None:
    second = trace(
        "ok2", "pytest import error in CI again, this time for the bar repo", "Fixed.", [call("pytest", "ok")], 0.3
    )
    draft = induce_heuristic(SIG, [ok_en(), second, fail_en()])
    assert draft is not None
    assert draft.trigger.startswith("When the request is about:") and "pytest import error" in draft.trigger
    lines = draft.procedure.splitlines()
    assert lines[0] == "1. bash: pip install -e ." and lines[1] == "2. bash: pytest -q"
    assert "tests pass" in lines[-1]
    assert "5 passed" in draft.verification
    assert draft.boundary.startswith("Applies when python/bash")
    assert draft.confidence == pytest.approx(2 / 3, abs=1e-3)
    assert draft.support_trace_ids == ["ok1", "ok2"]
    assert draft.preference and "pip install -e ." in draft.preference[0]
    assert (draft.experience_type, draft.evidence_polarity, draft.origin) == (
        "success_pattern",
        "positive",
        "heuristic",
    )
    assert draft.tags == ["python", "test", "bash"]


def test_induce_heuristic_chinese_and_no_success() -> None:
    other = trace("zok2", "CI 上 pytest 导入错误又出现了", "已修复，测试通过。", [call("pytest", "ok")], 0.2)
    draft = induce_heuristic(SIG, [ok_zh(), other])
    assert draft is not None
    assert draft.trigger.startswith("当请求涉及：") and "导入错误" in draft.trigger and "pytest" in draft.trigger
    assert "确认结果" in draft.procedure and "适用于" in draft.boundary
    assert "5 passed" in draft.verification
    assert induce_heuristic(SIG, [fail_en(), fail_zh()]) is None
    assert induce_heuristic(SIG, []) is None
    assert induce_heuristic(SIG, [trace("empty", "", "", [], 0.3)]) is None


GOOD_L2 = {
    "title": "Install the package before running pytest",
    "trigger": "pytest cannot import the project package",
    "action": "1. pip install -e .\n2. run pytest",
    "rationale": "The package must be importable",
    "caveats": ["check for a src layout"],
    "confidence": 0.9,
    "support_trace_ids": ["ok1", "ghost"],
}


def test_induce_llm_good_answer_and_prompt_contract() -> None:
    same_episode = trace("ok1b", "again", "fine", [call("pytest", "ok")], 0.1, episode="ep-ok1")
    with stub_llm(lambda s, u: json.dumps(GOOD_L2)) as (llm, stub):
        draft = induce_llm(SIG, [ok_en(), same_episode, fail_en()], llm, timeout_s=5)
    assert draft is not None and draft.origin == "llm"
    assert draft.title == GOOD_L2["title"] and draft.procedure.startswith("1. pip install")
    assert draft.support_trace_ids == ["ok1"] and draft.caveats == ["check for a src layout"]
    assert draft.confidence == pytest.approx(0.9) and "5 passed" in draft.verification
    user = stub.requests[0]["body"]["messages"][1]["content"]
    assert user.startswith(f"PATTERN_SIGNATURE: {SIG}") and "[trace ok1]" in user
    assert "ok1b" not in user and "bad1" not in user  # one best trace per episode, positive only
    assert "tools: bash(pip install -e .) -> Successfully installed" in user


@pytest.mark.parametrize(
    "content",
    ["this is not json at all", json.dumps({"title": "x", "trigger": "y"}), json.dumps(["a"]), None],
    ids=["malformed", "missing-action", "wrong-type", "http-500"],
)
def test_induce_llm_falls_back_to_heuristic(content: str | None) -> None:
    with stub_llm(lambda s, u: content) as (llm, _stub):
        draft = induce_llm(SIG, [ok_en(), fail_en()], llm, timeout_s=5)
    assert draft is not None and draft.origin == "heuristic" and "pytest import error" in draft.trigger
    assert induce_llm(SIG, [ok_en()], None) == induce_heuristic(SIG, [ok_en()])


def test_induce_llm_respects_char_budget() -> None:
    traces = [trace(f"t{i}", "word " * 100, "answer " * 100, [call("pytest", "ok")], 0.1 + i / 100) for i in range(10)]
    with stub_llm(lambda s, u: json.dumps(GOOD_L2)) as (llm, stub):
        induce_llm(SIG, traces, llm, timeout_s=5, char_budget=1500)
    user = stub.requests[0]["body"]["messages"][1]["content"]
    assert len(user) < 1500 + 100 and user.count("[trace ") >= 1
    assert "[trace t9]" in user  # highest value first


def test_policy_body_lines() -> None:
    draft = induce_heuristic(SIG, [ok_en()])
    assert draft is not None
    draft.anti_pattern = ["Avoid: running pytest before installing"]
    body = policy_body(draft, compute_stats([0.6], [], 0.3, 1, None, "candidate"))
    for prefix in ("Policy: ", "Trigger: ", "Procedure: 1. bash", "Verification: ", "Boundary: ", "Support: 1"):
        assert prefix in body
    assert "Gain: 0.300" in body and "Prefer: bash: pip install -e ." in body
    assert "Avoid: running pytest before installing" in body and "Avoid: Avoid:" not in body
    view = IndexedPolicy(id="p", title="T", trigger="G", procedure="P", support=3, gain=0.25, source_trace_ids=("a",))
    assert (
        "Support: 3" in policy_body(view) and "Gain: 0.250" in policy_body(view) and "Evidence: a" in policy_body(view)
    )


# ---------------------------------------------------------------- failure avoidance


def test_is_failure() -> None:
    assert is_failure(fail_en())
    assert not is_failure(ok_en())
    assert is_failure(trace("n", "x", "y", [], -0.1))
    assert is_failure(trace("s", "x", "y", [], 0.1, status="failed"))
    assert is_failure(trace("e", "x", "y", [{"name": "bash", "error": "boom"}], 0.1))


def test_failure_signature_is_stable_across_sessions() -> None:
    a = failure_signature(fail_en("a", "foo", "/home/u/foo"))
    b = failure_signature(fail_en("b", "bar_pkg", "/srv/ci/bar"))
    assert a == b and a.startswith("python|bash|_|modulenotfounderror: no module named")
    other = trace("c", "x", "y", [call("pytest -q", error="PermissionError: [Errno 13] denied: '/tmp/x'")], -0.3)
    assert failure_signature(other) != a
    assert failure_key(a) == "failure:" + hashlib.sha256(a.encode()).hexdigest()[:16]
    hexed = trace("h", "x", "y", [call("git show", error="fatal: bad object 3f9a2b7c1d in run 4821")], -0.2)
    twin = trace("i", "x", "y", [call("git show", error="fatal: bad object 9e8d7c6b5a in run 17")], -0.2)
    assert failure_signature(hexed) == failure_signature(twin)


def test_avoidance_draft_english_with_success() -> None:
    draft = avoidance_draft([fail_en()], [ok_en()])
    assert draft.experience_type == "failure_avoidance" and draft.evidence_polarity == "mixed"
    assert draft.title.startswith("Avoid: ")
    assert draft.anti_pattern == [
        "running `pytest -q` without `pip install -e .` first (ModuleNotFoundError: No module named 'foo' "
        "(/home/u/foo/tests/test_a.py:12))"
    ]
    assert draft.preference == ["`pip install -e .` → `pytest -q`"]
    assert draft.procedure.startswith("Avoid repeating this behavior: running `pytest -q` without")
    assert "ModuleNotFoundError" in draft.trigger and "5 passed" in draft.verification
    assert draft.support_trace_ids == ["bad1", "ok1"] and "failure" in draft.tags


def test_avoidance_draft_without_success_and_with_feedback() -> None:
    draft = avoidance_draft([fail_en()], [], "use uv instead of pip")
    assert draft.evidence_polarity == "negative"
    assert draft.anti_pattern[0] == "pip (use uv instead)"
    assert any("repeating `pytest -q` unchanged after it fails" in line for line in draft.anti_pattern)
    assert draft.preference == ["uv"]
    assert "no longer fails" in draft.verification


def test_avoidance_draft_chinese() -> None:
    draft = avoidance_draft([fail_zh()], [ok_zh()], "别忘了先安装依赖")
    assert any(line.startswith("在未先执行 `pip install -e .` 的情况下运行 `pytest -q`") for line in draft.anti_pattern)
    assert draft.preference[0] == "先安装依赖"
    assert draft.procedure.startswith("避免重复以下行为：") and "改为：" in draft.procedure
    assert draft.trigger.startswith("当请求涉及：") and "适用于" in draft.boundary


GOOD_SINK = {
    "title": "pytest without an installed package",
    "trigger": "pytest reports ModuleNotFoundError for the project package",
    "procedure": "Install the package in editable mode before running tests",
    "verification": "pytest collects the tests",
    "boundary": "Python projects with a src layout",
    "experience_type": "repair_instruction",
    "decision_guidance": {
        "prefer": ["pip install -e . before pytest"],
        "avoid": ["Avoid: bare pytest on a fresh venv"],
    },
    "support_trace_ids": ["bad1", "nope"],
}


def test_avoidance_llm_good_and_fallbacks() -> None:
    with stub_llm(lambda s, u: json.dumps(GOOD_SINK)) as (llm, stub):
        draft = avoidance_llm([fail_en()], [ok_en()], "install first", llm, timeout_s=5)
    assert draft.origin == "llm" and draft.experience_type == "repair_instruction"
    assert draft.title == "Avoid: pytest without an installed package"
    assert draft.preference == ["pip install -e . before pytest"]
    assert draft.anti_pattern == ["bare pytest on a fresh venv"] and draft.support_trace_ids == ["bad1"]
    assert "FAILED:" in stub.requests[0]["body"]["messages"][1]["content"]
    bad = dict(GOOD_SINK, decision_guidance="nope")
    current: dict[str, str | None] = {}
    with stub_llm(lambda s, u: current["content"]) as (llm, _stub):
        for content in (json.dumps(bad), "{oops", None):
            current["content"] = content
            fallback = avoidance_llm([fail_en()], [ok_en()], "", llm, timeout_s=5)
            assert fallback.origin == "heuristic" and fallback.anti_pattern[0].startswith("running `pytest -q`")


def test_merge_guidance_dedupes_newest_first_and_caps() -> None:
    existing = IndexedPolicy(
        id="p",
        title="Old title",
        trigger="old trigger",
        procedure="old procedure",
        experience_type="failure_avoidance",
        anti_pattern=("avoid: running `pytest` without install", "Avoid: old 1", "Avoid: old 2"),
        preference=("Prefer: uv",),
        source_trace_ids=("a", "b"),
    )
    draft = PolicyDraft(
        title="New",
        trigger="new",
        procedure="new",
        verification="v",
        boundary="b",
        experience_type="failure_avoidance",
        evidence_polarity="negative",
        signature="s",
        confidence=0.7,
        support_trace_ids=["b", "c"],
        anti_pattern=["Avoid: Running `pytest`  without install!", "Avoid: new 1", "Avoid: new 2", "Avoid: new 3"],
        preference=["Prefer: UV."],
    )
    merged = merge_guidance(existing, draft, max_lines=5)
    assert merged.anti_pattern == [
        "Avoid: Running `pytest`  without install!",
        "Avoid: new 1",
        "Avoid: new 2",
        "Avoid: new 3",
        "Avoid: old 1",
    ]
    assert merged.preference == ["Prefer: UV."]
    assert merged.support_trace_ids == ["a", "b", "c"] and merged.title == "Old title"
    assert merged.confidence == pytest.approx(0.7)


# ---------------------------------------------------------------- feedback shapes and decision repair


@pytest.mark.parametrize(
    ("text", "shape", "prefer", "avoid"),
    [
        ("Use uv instead of pip.", "preference", "uv", "pip"),
        ("用uv代替pip", "preference", "uv", "pip"),
        ("用 ruff 而不是 flake8", "preference", "ruff", "flake8"),
        ("不要用 npm，用 pnpm", "preference", "pnpm", "npm"),
        ("It should be python3", "correction", "python3", ""),
        ("应该是 python3.11", "correction", "python3.11", ""),
        ("不是 main 分支而是 dev 分支", "correction", "dev 分支", "main 分支"),
        ("make sure to run the linter", "constraint", "run the linter", ""),
        ("还要更新 CHANGELOG", "constraint", "更新 CHANGELOG", ""),
        ("别忘了跑测试", "constraint", "跑测试", ""),
        ("don't push to main", "constraint", "", "push to main"),
        ("never commit secrets!", "constraint", "", "commit secrets"),
        ("不要直接推送到 main", "constraint", "", "直接推送到 main"),
        ("下次先跑测试", "instruction", "先跑测试", ""),
        ("I don't understand this", "confusion", "", ""),
        ("为什么这样改？", "confusion", "", ""),
        ("that's wrong", "negative", "", ""),
        ("不对", "negative", "", ""),
        ("perfect, thanks", "positive", "", ""),
        ("搞定了，谢谢", "positive", "", ""),
        ("这个区别很大", "unknown", "", ""),
        ("hmm", "unknown", "", ""),
    ],
)
def test_classify_feedback_shape(text: str, shape: str, prefer: str, avoid: str) -> None:
    got = classify_feedback_shape(text)
    assert (got.shape, got.prefer, got.avoid) == (shape, prefer, avoid)
    assert 0 < got.confidence <= 1


def test_tool_failure_burst_window_and_success() -> None:
    err = "Error: Cannot find module 'left-pad'"
    fails = [trace(f"f{i}", "x", "y", [call("npm test", error=err)], -0.1, ts=i) for i in range(3)]
    assert tool_failure_burst(fails) == ("bash", 3, err)
    recovered = [*fails, trace("s", "x", "y", [call("npm test", "ok")], 0.2, ts=9)]
    assert tool_failure_burst(recovered) is None
    spread = [
        *fails,
        *(trace(f"o{i}", "x", "y", [{"name": "read", "success": True}], 0.1, ts=10 + i) for i in range(3)),
    ]
    assert tool_failure_burst(spread) is None  # only 2 failures in the last 5 calls
    assert tool_failure_burst(fails[:2]) is None


def test_value_divergence_and_context_hash() -> None:
    high = [ok_en("h1", 0.6), ok_en("h2", 0.4)]
    low = [fail_en("l1"), trace("l2", "x", "y", [], -0.005)]
    other = [trace("o1", "x", "y", [], 0.1, sig="node|_|_|_"), trace("o2", "x", "y", [], -0.2, sig="node|_|_|_")]
    found = value_divergence(high + low + other)
    assert len(found) == 1
    sig, hi, lo = found[0]
    assert sig == SIG and [t.id for t in hi] == ["h1", "h2"] and [t.id for t in lo] == ["l1"]
    assert (
        context_hash("value-distribution", "user", SIG)
        == hashlib.sha256(f"value-distribution:user:{SIG}".encode()).hexdigest()[:16]
    )


def test_repair_heuristic_triggers() -> None:
    burst = ("bash", 4, "Error: Cannot find module 'x'")
    rep = repair_heuristic("tool_failure_burst", "ctx", [], [fail_en()], burst=burst)
    assert rep.anti_pattern == "repeating bash after 4 failures with Error: Cannot find module 'x'"
    assert rep.severity == "warn" and rep.confidence == pytest.approx(0.9) and rep.low_value_ids == ["bad1"]
    lesson = "Installing the package in editable mode first made the imports resolve."
    good = replace(ok_en("h", 0.8), reflection=lesson)
    rep = repair_heuristic("value_distribution", "ctx", [good], [fail_en()])
    assert rep.preference == "Installing the package in editable mode first made the imports resolve."
    assert rep.anti_pattern.startswith("running `pytest -q` (ModuleNotFoundError")
    assert rep.severity == "warn" and rep.high_value_ids == ["h"]
    rep = repair_heuristic("feedback", "ctx", [], [], "用uv代替pip")
    assert (rep.preference, rep.anti_pattern, rep.severity) == ("uv", "pip", "info")
    rep = repair_heuristic("feedback", "ctx", [], [fail_zh()], "不对")
    assert rep.severity == "warn" and "pytest -q" in rep.anti_pattern


def test_repair_llm_good_and_fallbacks() -> None:
    answer = {"preference": "run pip install -e . first", "anti_pattern": "bare pytest", "severity": "warn"}
    with stub_llm(lambda s, u: json.dumps({**answer, "confidence": 0.8})) as (llm, stub):
        rep = repair_llm("feedback", "ctx", [ok_en()], [fail_en()], "use uv instead of pip", None, llm, timeout_s=5)
    assert (rep.preference, rep.anti_pattern) == ("run pip install -e . first", "bare pytest")
    assert rep.confidence == pytest.approx(0.8) and rep.severity == "warn"
    user = stub.requests[0]["body"]["messages"][1]["content"]
    assert "FEEDBACK_SHAPE: preference" in user and "USER_PREFERS: uv" in user and "FAILURE_HISTORY" in user
    current: dict[str, str | None] = {}
    with stub_llm(lambda s, u: current["content"]) as (llm, _stub):
        for content in ("not json", json.dumps({"preference": 5}), json.dumps({"severity": "warn"}), None):
            current["content"] = content
            rep = repair_llm("feedback", "ctx", [], [], "用uv代替pip", None, llm, timeout_s=5)
            assert (rep.preference, rep.anti_pattern, rep.confidence) == ("uv", "pip", 0.85)
    assert repair_llm("feedback", "ctx", [], [], "用uv代替pip", None, None) == repair_heuristic(
        "feedback", "ctx", [], [], "用uv代替pip"
    )
