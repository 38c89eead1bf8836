"""L3 world models and Skills: domain buckets, cohesion/confidence, crystallisation, verification, eta lifecycle."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from memmy.embed import Embedder
from memmy.evolve.model import IndexedPolicy, IndexedTrace
from memmy.evolve.skill import (
    crystallize_heuristic,
    crystallize_llm,
    draft_eta,
    eta_after_trial,
    eta_drift,
    policy_fingerprint,
    rebuild_level,
    select_evidence,
    skill_eligible,
    skill_key,
    skill_name,
    skill_status,
    verify_skill,
)
from memmy.evolve.world import (
    bucket_policies,
    domain_key,
    eligible_policies,
    world_key,
    world_model_heuristic,
    world_model_llm,
)
from memmy.kinds.skill import description as skill_description
from memmy.llm.client import LLMEndpoint, OpenAICompatibleLLM
from tests.llm_stub import ChatStub, run_chat_stub

Vec = np.ndarray[Any, np.dtype[np.float32]]


def unit(*xs: float) -> Vec:
    v = np.array(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def call(command: str, output: str = "", error: str | None = None, name: str = "bash") -> dict[str, Any]:
    return {"name": name, "input": {"command": command}, "output": output, "error": error, "success": error is None}


def trace(
    tid: str, user: str, agent: str, calls: list[dict[str, Any]], value: float, vec: Vec | None = None
) -> IndexedTrace:
    return IndexedTrace(
        id=tid,
        episode_id=f"ep-{tid}",
        session_id="s",
        created_at="2026-03-01T10:00:00Z",
        user_text=user,
        agent_text=agent,
        summary=user[:140],
        tags=("python",),
        signature="python|test|bash|_",
        error_signatures=(),
        tool_calls=tuple(calls),
        value=value,
        vector=vec,
    )


def pytest_policy(pid: str = "p1", gain: float = 0.2, vec: Vec | None = None) -> IndexedPolicy:
    return IndexedPolicy(
        id=pid,
        title="Pytest import error in CI via bash",
        trigger="When the request is about: pytest import error in CI",
        procedure="1. bash: pip install -e .\n2. bash: pytest -q\n3. Confirm the outcome: the tests pass.",
        verification="bash reports: 5 passed in 0.31s",
        boundary="Applies when python/bash context matches; check the current repository first.",
        status="active",
        support=2,
        gain=gain,
        preference=("bash: pip install -e . → bash: pytest -q",),
        tags=("python", "test", "bash"),
        vector=vec,
    )


def avoid_policy(pid: str = "p2", vec: Vec | None = None) -> IndexedPolicy:
    return IndexedPolicy(
        id=pid,
        title="Avoid: running `pytest -q` without `pip install -e .` first",
        trigger="When the request is about: run the tests",
        procedure="Avoid repeating this behavior: running `pytest -q` without `pip install -e .` first",
        experience_type="failure_avoidance",
        status="active",
        support=1,
        gain=0.1,
        anti_pattern=("Avoid: running `pytest -q` without `pip install -e .` first (ModuleNotFoundError)",),
        preference=("Prefer: `pip install -e .` → `pytest -q`",),
        tags=("python", "failure"),
        vector=vec,
    )


def zh_policy(pid: str = "z1") -> IndexedPolicy:
    return IndexedPolicy(
        id=pid,
        title="修复 CI 里 pytest 导入错误",
        trigger="当请求涉及：CI pytest 导入错误",
        procedure="1. bash: pip install -e .\n2. bash: pytest -q\n3. 确认结果：测试全部通过。",
        verification="bash 输出：5 passed",
        boundary="适用于 python/bash 相关场景；先检查当前仓库的实际情况。",
        status="active",
        support=1,
        gain=0.3,
        tags=("python",),
    )


def evidence_traces() -> list[IndexedTrace]:
    return [
        trace(
            "e1",
            "Please fix the pytest import error in CI",
            "Installed the package, pytest passes.",
            [call("pip install -e .", "ok"), call("pytest -q", "5 passed")],
            0.6,
        ),
        trace("e2", "pytest import error again in CI", "Fixed the import error.", [call("pytest -q", "3 passed")], 0.3),
        trace(
            "c1",
            "run pytest in CI",
            "Import still failing.",
            [call("pytest", error="ModuleNotFoundError: No module named 'foo'")],
            -0.4,
        ),
    ]


@contextmanager
def stub_llm(answer: Callable[[str, str], str | None]) -> Iterator[tuple[OpenAICompatibleLLM, ChatStub]]:
    with run_chat_stub(answer) as stub:
        yield OpenAICompatibleLLM(LLMEndpoint(stub.url, "stub-model")), stub


# ---------------------------------------------------------------- world models


@pytest.mark.parametrize(
    ("policy", "key"),
    [
        (pytest_policy(), "python|pip"),
        (
            IndexedPolicy(id="d", title="Rebuild the image", trigger="docker build fails", procedure="docker build ."),
            None,
        ),
        (
            IndexedPolicy(id="n", title="Install deps", trigger="node project", procedure="npm ci then npm test"),
            "node|npm",
        ),
        (
            IndexedPolicy(id="z", title="数据库迁移失败", trigger="当请求涉及：数据库迁移", procedure="先备份再执行"),
            "db|_",
        ),
        (
            IndexedPolicy(id="f", title="Write release notes", trigger="x", procedure="y", tags=("policy", "docs")),
            "docs|_",
        ),
        (IndexedPolicy(id="g", title="Write release notes", trigger="x", procedure="y"), "general|_"),
    ],
)
def test_domain_key(policy: IndexedPolicy, key: str | None) -> None:
    assert domain_key(policy) == (key or "docker|docker-cli")


def test_eligible_and_buckets() -> None:
    candidate = replace(pytest_policy("c"), status="candidate")
    weak = pytest_policy("w", gain=0.01)
    policies = [pytest_policy("a"), avoid_policy("b"), candidate, weak, zh_policy("z")]
    eligible = eligible_policies(policies)
    assert [p.id for p in eligible] == ["a", "b", "z"]
    buckets = bucket_policies(eligible)
    assert {k: [p.id for p in v] for k, v in buckets.items()} == {"python|pip": ["a", "b", "z"]}
    assert world_key("python|pip") == "world:" + hashlib.sha256(b"python|pip").hexdigest()[:16]


def test_world_model_heuristic_strict_cohesion_and_confidence() -> None:
    a, b = pytest_policy("a", gain=0.2, vec=unit(1, 0)), avoid_policy("b", vec=unit(0.8, 0.6))
    draft = world_model_heuristic("python|pip", [a, b])
    assert draft is not None
    center = unit(1.8, 0.6)
    cohesion = (float(center @ unit(1, 0)) + float(center @ unit(0.8, 0.6))) / 2
    assert draft.cohesion == pytest.approx(cohesion, abs=1e-4) and draft.admission == "strict"
    assert draft.confidence == pytest.approx(0.7 * 0.15 + 0.3 * cohesion, abs=1e-4)
    assert draft.title == "Environment: python (pip)" and draft.policy_ids == ["a", "b"]
    assert '- For "pytest import error in CI": `pip install -e .` → `pytest -q` works.' in draft.body
    assert "- Known to fail for " in draft.body and "running `pytest -q` without `pip install -e .` first" in draft.body
    assert not any(line.startswith(("- Run", "- Use", "- Install")) for line in draft.body.splitlines())
    assert (
        draft.inference[0]["evidenceIds"] == ["a"] and "verified by: bash reports" in draft.inference[0]["description"]
    )
    assert draft.constraints[0]["evidenceIds"] == ["b"] and draft.domain_tags[:2] == ["python", "pip"]
    assert world_model_heuristic("python|pip", []) is None


def test_world_model_heuristic_loose_and_without_vectors() -> None:
    a, b = pytest_policy("a", gain=0.4, vec=unit(1, 0)), avoid_policy("b", vec=unit(-0.9, 0.1))
    draft = world_model_heuristic("python|pip", [a, b])
    assert draft is not None and draft.admission == "loose"
    expected = min(1.0, max(0.0, 0.7 * 0.25 + 0.3 * draft.cohesion)) * (0.6 + 0.4 * draft.cohesion)
    assert draft.confidence == pytest.approx(expected, abs=1e-4)
    bare = world_model_heuristic("python|pip", [pytest_policy("a", gain=0.4)])
    assert bare is not None and bare.cohesion == 0.0 and bare.admission == "loose"
    assert bare.confidence == pytest.approx(0.7 * 0.4 * 0.6, abs=1e-4)


def test_world_model_heuristic_chinese() -> None:
    draft = world_model_heuristic("python|pip", [zh_policy()])
    assert draft is not None
    assert draft.title == "环境：python (pip)" and "可行" in draft.body and "CI pytest 导入错误" in draft.body


def test_world_model_with_real_minilm_vectors(embedder: Embedder) -> None:
    a, b = pytest_policy("a"), avoid_policy("b")
    texts = [f"{p.title}\n{p.trigger}\n{p.procedure}" for p in (a, b)]
    vectors = embedder.embed(texts, "query")
    a, b = replace(a, vector=vectors[0]), replace(b, vector=vectors[1])
    draft = world_model_heuristic(domain_key(a), [a, b])
    assert draft is not None and draft.admission == "strict" and draft.cohesion > 0.5


GOOD_L3 = {
    "title": "Python packaging in CI",
    "domain_tags": ["python", "pip", "ci"],
    "environment": [
        {
            "label": "src layout",
            "description": "The package is not importable until installed.",
            "evidenceIds": ["a", "zzz"],
        }
    ],
    "inference": [
        {"label": "editable install", "description": "pytest collects after pip install -e .", "evidenceIds": ["a"]}
    ],
    "constraints": [],
    "body": "The CI image does not install the project package; imports fail until it is installed.",
    "confidence": 0.8,
    "supersedes_world_ids": [],
}


def test_world_model_llm_good_and_fallbacks() -> None:
    a, b = pytest_policy("a", vec=unit(1, 0)), avoid_policy("b", vec=unit(1, 0))
    with stub_llm(lambda s, u: json.dumps(GOOD_L3)) as (llm, stub):
        draft = world_model_llm("python|pip", [a, b], llm, timeout_s=5)
    assert draft is not None and draft.origin == "llm" and draft.title == "Python packaging in CI"
    assert draft.environment[0]["evidenceIds"] == ["a"] and draft.domain_tags == ["python", "pip", "ci"]
    rule = world_model_heuristic("python|pip", [a, b])
    assert rule is not None and draft.confidence == pytest.approx((0.8 + rule.confidence) / 2, abs=1e-4)
    assert "DOMAIN: python|pip" in stub.requests[0]["body"]["messages"][1]["content"]
    current: dict[str, str | None] = {}
    with stub_llm(lambda s, u: current["content"]) as (llm, _stub):
        for content in (json.dumps(dict(GOOD_L3, body="")), json.dumps(dict(GOOD_L3, inference="x")), "nope", None):
            current["content"] = content
            fallback = world_model_llm("python|pip", [a, b], llm, timeout_s=5)
            assert fallback is not None and fallback.origin == "heuristic" and fallback.title.startswith("Environment")
    assert world_model_llm("python|pip", [], None) is None


# ---------------------------------------------------------------- skills


def test_skill_eligibility_eta_and_key() -> None:
    assert skill_eligible(pytest_policy())
    assert not skill_eligible(avoid_policy())
    assert not skill_eligible(pytest_policy(gain=0.01))
    candidate = replace(pytest_policy(), status="candidate")
    assert not skill_eligible(candidate)
    assert draft_eta(0.2, 2) == pytest.approx(0.6)
    assert draft_eta(0.2, 1, min_support=4) == pytest.approx(0.225)
    assert draft_eta(-0.9, 0) == pytest.approx(0.1)
    assert skill_key("policy_abc") == "skill:policy_abc"


def test_skill_name() -> None:
    assert skill_name("Pytest import error in CI via bash") == "pytest_import_error_in_ci_via_bash"
    long = skill_name("Configure the reverse proxy for the staging cluster with mutual TLS and retries")
    assert len(long) <= 48 and long.startswith("configure_the_reverse_proxy") and not long.endswith("_")
    zh = skill_name("修复 pytest 导入错误")
    assert (
        zh.startswith("skill_") and zh.endswith("_pytest") and zh.isascii() and len(zh) == len("skill_12345678_pytest")
    )
    assert skill_name("修复导入错误") == skill_name("修复导入错误") != skill_name("修复测试")
    assert skill_name("3d render") == "skill_3d_render"


def test_select_evidence_ranks_by_value_and_cosine() -> None:
    policy = pytest_policy(vec=unit(1, 0))
    near = trace("near", "a", "b", [], 0.25, unit(1, 0))  # .25 + .2
    high = trace("high", "a", "b", [], 0.3, unit(0, 1))  # .3 + 0
    slightly_bad = trace("meh", "a", "b", [], -0.1)
    bad = trace("bad", "a", "b", [], -0.5)
    redacted = trace("red", "[REDACTED]", "b", [], 0.9)
    evidence, counter = select_evidence(policy, [high, bad, near, slightly_bad, redacted])
    assert [t.id for t in evidence] == ["near", "high", "meh"]
    assert [t.id for t in counter] == ["bad", "meh"]
    many = [trace(f"t{i}", "a", "b", [], i / 10) for i in range(9)]
    assert len(select_evidence(policy, many)[0]) == 6 and select_evidence(policy, many, limit=2)[0][0].id == "t8"


def test_crystallize_heuristic_english() -> None:
    policy = pytest_policy()
    evidence, counter = select_evidence(policy, evidence_traces())
    draft = crystallize_heuristic(policy, evidence, counter)
    assert draft is not None and draft.origin == "heuristic"
    assert draft.name == "pytest_import_error_in_ci_via_bash" and draft.policy_id == "p1"
    assert [s["body"] for s in draft.steps] == ["pip install -e .", "pytest -q", "the tests pass."]
    assert draft.tools == ["bash"] and draft.preconditions == [policy.boundary]
    assert "running `pytest` (ModuleNotFoundError: No module named 'foo')" in draft.anti_pattern
    assert draft.preference == ["bash: pip install -e . → bash: pytest -q"]
    assert draft.eta == pytest.approx(0.6) and draft.evidence_trace_ids == ["e1", "e2"]
    assert skill_description(draft.invocation_guide, 200) == draft.summary
    assert draft.summary.startswith("Pytest import error in CI via bash")
    assert "## Steps\n1. **bash: pip install -e .**" in draft.invocation_guide
    assert "## Verification\nbash reports: 5 passed" in draft.invocation_guide


def test_crystallize_heuristic_chinese_single_line_and_empty() -> None:
    draft = crystallize_heuristic(zh_policy(), [], [])
    assert draft is not None and draft.name.startswith("skill_") and len(draft.steps) == 3
    assert "## 步骤" in draft.invocation_guide and skill_description(draft.invocation_guide, 200).startswith("修复")
    one = IndexedPolicy(id="o", title="Ship", trigger="t", procedure="Run make release", verification="tag pushed")
    single = crystallize_heuristic(one, [], [])
    assert single is not None and [s["body"] for s in single.steps] == ["Run make release", "tag pushed"]
    assert single.steps[1]["title"] == "Verify: tag pushed"
    steps = "build the wheel; upload it then tag the release"
    split = IndexedPolicy(id="s", title="Ship", trigger="t", procedure=steps)
    chained = crystallize_heuristic(split, [], [])
    assert chained is not None and [s["body"] for s in chained.steps] == [
        "build the wheel",
        "upload it",
        "tag the release",
    ]
    assert crystallize_heuristic(IndexedPolicy(id="e", title="x", trigger="t", procedure=""), [], []) is None


GOOD_SKILL = {
    "name": "python_ci_fix_imports",
    "retrieval_blurb": "Use when pytest cannot import the project package in CI.",
    "trigger_context": "pytest ModuleNotFoundError for the project package",
    "summary": "Fix pytest import errors in CI by installing the package first.",
    "parameters": ["<package>"],
    "preconditions": ["a Python project with pyproject.toml"],
    "steps": [{"title": "Install", "body": "pip install -e ."}, {"title": "Test", "body": "pytest -q"}],
    "examples": ["pytest import error in CI"],
    "tools": ["bash", "kubectl"],
    "decision_guidance": {"preference": ["install before testing"], "anti_pattern": ["bare pytest"]},
    "tags": ["python", "CI"],
}


def test_crystallize_llm_good_and_fallbacks() -> None:
    policy = pytest_policy()
    evidence, counter = select_evidence(policy, evidence_traces())
    with stub_llm(lambda s, u: json.dumps(GOOD_SKILL)) as (llm, stub):
        draft = crystallize_llm(policy, evidence, counter, llm, timeout_s=5)
    assert draft is not None and draft.origin == "llm" and draft.name == "python_ci_fix_imports"
    assert draft.tools == ["bash"]  # kubectl never appears in the evidence
    assert draft.preference == ["install before testing"] and draft.anti_pattern == ["bare pytest"]
    assert skill_description(draft.invocation_guide, 200) == GOOD_SKILL["summary"]
    assert "## Parameters\n- <package>" in draft.invocation_guide and draft.tags == ["python", "ci", "skill"]
    user = stub.requests[0]["body"]["messages"][1]["content"]
    assert "EVIDENCE_TOOLS: bash" in user and "COUNTER_EXAMPLES:" in user and "[trace e1]" in user
    one_step = dict(GOOD_SKILL, steps=[{"title": "Install", "body": "pip install -e ."}])
    current: dict[str, str | None] = {}
    with stub_llm(lambda s, u: current["content"]) as (llm, _stub):
        for content in (json.dumps(one_step), json.dumps(dict(GOOD_SKILL, name=7)), "{{", None):
            current["content"] = content
            fallback = crystallize_llm(policy, evidence, counter, llm, timeout_s=5)
            assert fallback is not None and fallback.origin == "heuristic"
            assert fallback.name == "pytest_import_error_in_ci_via_bash"


def test_verify_skill() -> None:
    policy = pytest_policy()
    evidence, counter = select_evidence(policy, evidence_traces())
    draft = crystallize_heuristic(policy, evidence, counter)
    assert draft is not None
    assert verify_skill(draft, evidence) == (1.0, 1.0, True)
    draft.tools = []
    unrelated = [
        trace("u1", "deploy the helm chart", "done", [call("helm upgrade", "ok", name="helm")], 0.4),
        trace("u2", "rotate the TLS certificates", "rotated", [call("certbot renew", "ok", name="certbot")], 0.4),
    ]
    coverage, resonance, ok = verify_skill(draft, unrelated)
    assert coverage == 0.0 and resonance == 0.0 and not ok
    no_tools = [trace("n", "pytest import error in CI", "fixed", [], 0.4)]
    assert verify_skill(draft, no_tools) == (1.0, 1.0, True)
    assert verify_skill(draft, []) == (1.0, 0.0, False)


def test_eta_updates_and_status() -> None:
    assert eta_after_trial(0.6, 1, 1) == pytest.approx(0.8)
    assert eta_after_trial(0.6, 0, 3) == pytest.approx(0.15)
    assert eta_after_trial(0.9, 5, 2) == 1.0
    assert eta_drift(0.5, 0.2) == pytest.approx(0.41)
    assert eta_drift(0.5, 3.0) == pytest.approx(0.65)
    assert skill_status(0.6, 0, "candidate") == "candidate"
    assert skill_status(0.6, 1, "candidate") == "active"
    assert skill_status(0.05, 1, "candidate") == "archived"
    assert skill_status(0.3, 1, "candidate", repair_origin=True) == "archived"
    assert skill_status(0.5, 1, "candidate", repair_origin=True) == "active"
    assert skill_status(0.09, 5, "active") == "archived"
    assert skill_status(0.2, 5, "active") == "active"
    assert skill_status(0.9, 5, "archived") == "archived"


def test_rebuild_levels_follow_new_evidence_and_policy_changes() -> None:
    policy = pytest_policy()
    print_ = policy_fingerprint(policy)
    assert print_ == policy_fingerprint(pytest_policy()) and len(print_) == 16
    changed = pytest_policy()
    changed = replace(changed, procedure=changed.procedure + " Then run the linters.")
    assert policy_fingerprint(changed) != print_
    stats_only = pytest_policy(gain=0.9)
    assert policy_fingerprint(stats_only) == print_, "statistics alone never force a rebuild"
    previous = {"policyFingerprint": print_, "evidenceTraceIds": ["t1", "t2"]}
    assert rebuild_level({}, print_, ["t1"]) is None
    assert rebuild_level({"evidenceTraceIds": ["t1"]}, print_, ["t1"]) is None  # built before levels existed
    assert rebuild_level(previous, print_, ["t2", "t1"]) == "L0"
    assert rebuild_level(previous, print_, ["t1"]) == "L0"
    assert rebuild_level(previous, print_, ["t1", "t3"]) == "L1"
    assert rebuild_level(previous, print_, ["t3", "t4"]) == "L2"
    assert rebuild_level(previous, policy_fingerprint(changed), ["t1"]) == "L2"


def test_world_model_llm_supersedes_only_offered_notes() -> None:
    a, b = pytest_policy("a", vec=unit(1, 0)), avoid_policy("b", vec=unit(1, 0))
    answer = dict(GOOD_L3, supersedes_world_ids=["world_old", "world_made_up", "a"])
    with stub_llm(lambda s, u: json.dumps(answer)) as (llm, stub):
        draft = world_model_llm("python|pip", [a, b], llm, timeout_s=5, existing=[("world_old", "Old Python notes")])
        offline = world_model_llm("python|pip", [a, b], None, existing=[("world_old", "Old Python notes")])
    assert draft is not None and draft.supersedes == ["world_old"]
    prompt = stub.requests[0]["body"]["messages"][1]["content"]
    assert "EXISTING_WORLD_MODELS:\n[world world_old] Old Python notes" in prompt
    assert offline is not None and offline.supersedes == [], "the heuristic never retires a note"
