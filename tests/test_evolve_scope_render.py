"""Pure parts of issue 14: derived scope, topic keywords and the topic gate, pairing evidence, feedback halves
and the budgeted injection layout."""

from __future__ import annotations

import re
from typing import Any

import pytest

from memmy.domain import Memory
from memmy.evolve.failure import avoidance_draft, classify_feedback_shape
from memmy.evolve.model import IndexedTrace
from memmy.evolve.scope import derived_scope, visible_in
from memmy.evolve.topics import content_keywords, shares_evidence, topical
from memmy.kinds.text import whole_sentences
from memmy.recall.render import RenderItem, estimate_tokens, render_context


def trace(
    tid: str, user: str, agent: str, calls: list[dict[str, Any]], created: str, value: float = 0.5
) -> IndexedTrace:
    """A trace view with tool calls."""
    return IndexedTrace(
        id=tid,
        episode_id="episode_1",
        session_id="s",
        created_at=created,
        user_text=user,
        agent_text=agent,
        summary=user,
        tags=(),
        signature="node|pnpm|bash|_",
        error_signatures=(),
        tool_calls=tuple(calls),
        value=value,
    )


def call(command: str, output: str, ok: bool = True) -> dict[str, Any]:
    """One bash call."""
    found: dict[str, Any] = {"name": "bash", "input": {"command": command}, "output": output, "success": ok}
    if not ok:
        found["error"] = "exit code 1"
    return found


def test_scope_single_project_is_local_and_spanning_projects_is_global_only_without_specifics() -> None:
    assert derived_scope(["/src/webshop"], "Run pnpm install first").project_id == "/src/webshop"
    spanning = derived_scope(["/src/webshop", "/src/infra"], "Check CI before retrying a locked job")
    assert spanning.project_id is None and spanning.is_global
    specific = derived_scope(["/src/webshop", "/src/infra"], "Edit src/checkout/cart.ts first")
    assert not specific.is_global and specific.projects == ["/src/infra", "/src/webshop"]
    named = derived_scope(["/src/webshop", "/src/infra"], "In webshop, use pnpm")
    assert not named.is_global
    assert derived_scope([None], "anything").is_global
    props = {"scope": specific.to_json()}
    assert visible_in(props, "/src/webshop") and not visible_in(props, "/src/dataetl") and visible_in(props, None)
    assert visible_in({}, "/src/dataetl")


def test_content_keywords_in_both_languages() -> None:
    assert {"checkout", "shop", "payment"} <= content_keywords("Run the checkout tests: Cannot find '@shop/payments'")
    assert "run" not in content_keywords("run it again") and "error" not in content_keywords("same error")
    assert {"单元", "测试"} <= content_keywords("运行结算模块的单元测试")
    assert "一下" not in content_keywords("跑一下")


@pytest.mark.parametrize(
    ("query", "memory", "expected"),
    [
        ("Can you run the checkout unit tests again?", "Run the checkout unit tests: pnpm test src/checkout", True),
        ("Run the checkout unit tests", "Run the airflow DAG tests with pytest", False),
        ("What is a good hydration for sourdough bread?", "Run the checkout unit tests", False),
        ("再跑一次 checkout 模块的单元测试", "跑一下 checkout 模块的单元测试", True),
        ("周末去杭州玩两天，帮我排个行程", "给 staging 环境跑一下 terraform plan", False),
        ("thanks", "thanks, works now", False),
    ],
)
def test_topic_gate(query: str, memory: str, expected: bool) -> None:
    assert topical(query, memory) is expected


def test_a_failure_pairs_only_with_a_success_that_shares_its_evidence() -> None:
    failed = trace(
        "t1",
        "Run terraform plan for staging",
        "failed",
        [call("terraform plan -var-file=staging.tfvars", "Error acquiring the state lock", False)],
        "2026-01-01T00:00:01Z",
    )
    fix = trace(
        "t2",
        "It still fails: Error acquiring the state lock",
        "force-unlocked",
        [call("terraform force-unlock 6f1c", "unlocked"), call("terraform plan -var-file=staging.tfvars", "Plan: 3")],
        "2026-01-01T00:00:02Z",
    )
    other = trace(
        "t3",
        "Scale the api deployment to 4 replicas",
        "scaled",
        [call("kubectl scale deployment api --replicas=4 -n prod", "deployment.apps/api scaled")],
        "2026-01-01T00:00:03Z",
    )
    assert shares_evidence(failed, fix) and not shares_evidence(failed, other)
    draft = avoidance_draft([failed], [fix])
    assert "force-unlock" in draft.preference[0] and "kubectl" not in " ".join(draft.preference)
    assert not avoidance_draft([failed], []).preference  # no fix: a bare Avoid line


@pytest.mark.parametrize(
    ("note", "prefer", "avoid"),
    [
        ("use pnpm, never npm", "pnpm", "npm"),
        ("use uv, not pip", "uv", "pip"),
        ("Use pnpm and never npm", "pnpm", "npm"),
        ("用 pnpm，不要用 npm", "pnpm", "npm"),
        ("用 uv，别用 pip", "uv", "pip"),
    ],
)
def test_feedback_notes_keep_both_halves(note: str, prefer: str, avoid: str) -> None:
    shape = classify_feedback_shape(note)
    assert (shape.prefer, shape.avoid) == (prefer, avoid)


def memory(mid: str, layer: str, content: str, title: str = "", **props: Any) -> Memory:
    """A memory for rendering."""
    return Memory(id=mid, layer=layer, content=content, title=title or content[:40], properties=props)  # type: ignore[arg-type]


def test_budgeted_injection_has_no_labels_cuts_or_repeats_and_fits() -> None:
    rollup = memory(
        "episode_1",
        "L1",
        "step 1 / Run the tests / IRRELEVANT\nstep 2 / Install the package / RELATED_DEFAULT",
        title="Past similar episode: Run the tests",
    )
    policy = memory(
        "policy_1",
        "L2",
        "body",
        policy={"type": "failure_avoidance", "anti_pattern": ["Avoid: npm"], "preference": ["Prefer: pnpm"]},
    )
    twin = memory(
        "policy_2",
        "L2",
        "body",
        policy={"type": "failure_avoidance", "anti_pattern": ["Avoid: npm"], "preference": ["Prefer: pnpm"]},
    )
    long_trace = memory(
        "trace_1", "L1", "x", trace={"userText": "Deploy", "agentText": "Deployed. " + "Then more. " * 200}
    )
    items = [
        RenderItem(rollup, "episode", "similar past task", 0.9),
        RenderItem(policy, "search", 'shares "npm"', 0.8),
        RenderItem(twin, "search", 'shares "npm"', 0.8),
        RenderItem(long_trace, "search", "similar meaning (0.5)", 0.7),
    ]
    rendered = render_context(items, token_budget=120)
    text = rendered.markdown
    for label in ("IRRELEVANT", "RELATED_DEFAULT", "step 1 /", "[truncated]"):
        assert label not in text
    assert text.count("Avoid: npm") == 1 and "Instead: pnpm" in text
    assert text.index("policy_1") < text.index("episode_1")  # a known fix first
    assert rendered.token_estimate <= 120 and estimate_tokens(text) == rendered.token_estimate
    assert all(re.search(r"why: ", line) for line in text.splitlines() if line.strip().startswith("("))
    assert render_context([], token_budget=400).markdown == ""


def test_whole_sentences_never_cut_mid_sentence() -> None:
    assert whole_sentences("First one. Second one is longer.", 12) == "First one."
    assert whole_sentences("A single sentence that is far too long", 10) == ""
    assert estimate_tokens("测试") == 2 and estimate_tokens("abcd") == 1
