"""Episode boundaries (r1..r7, the LLM variant through a real loopback model), implicit feedback and
social-only steps: the rules that read what a user message means."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memmy.evolve.boundaries import (
    EPISODE_IDLE_TIMEOUT,
    IDLE_GAP,
    MERGE_WINDOW,
    RELATION_ARBITRATION_PROMPT,
    RELATION_PROMPT,
    EpisodeContext,
    TurnRelation,
    classify_feedback,
    classify_relation,
    classify_relation_llm,
    word_count,
)
from memmy.evolve.model import IndexedTrace
from memmy.evolve.reflection import is_social_step
from memmy.llm.client import LLMEndpoint, OpenAICompatibleLLM
from tests.llm_stub import Answer, ChatStub, run_chat_stub

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PREV_REPLY = "Run the migration script with the verbose flag enabled before deploying everything to staging."


def prev(
    *,
    minutes_ago: float = 5,
    tags: list[str] | None = None,
    first: str = "配置Nginx反向代理",
    reply: str = PREV_REPLY,
) -> EpisodeContext:
    return EpisodeContext(
        first_user_text=first,
        latest_user_text="加上SSL证书",
        last_assistant_text=reply,
        tags=tags if tags is not None else [],
        last_activity_at=NOW - timedelta(minutes=minutes_ago),
    )


class Server:
    """One loopback model for the module (a stub's shutdown takes ~0.5 s); each test swaps in its answer."""

    def __init__(self) -> None:
        self.answer: Answer = lambda system, user: None
        self.stub: ChatStub | None = None

    def __call__(self, system: str, user: str) -> str | None:
        return self.answer(system, user)


SERVER = Server()


@pytest.fixture(scope="module", autouse=True)
def shared_server() -> Iterator[None]:
    with run_chat_stub(SERVER) as stub:
        SERVER.stub = stub
        yield


@contextmanager
def model(answer: Answer, delay_s: float = 0.0) -> Iterator[tuple[OpenAICompatibleLLM, ChatStub]]:
    """The production client against the shared stub answering ``answer`` (a slow stub of its own if delayed)."""
    if delay_s:
        with run_chat_stub(answer, delay_s) as stub:
            yield OpenAICompatibleLLM(LLMEndpoint(stub.url, "stub"), malformed_retries=0), stub
        return
    assert SERVER.stub is not None
    SERVER.answer = answer
    SERVER.stub.requests.clear()
    yield OpenAICompatibleLLM(LLMEndpoint(SERVER.stub.url, "stub"), malformed_retries=0), SERVER.stub


def test_windows_are_the_reference_values() -> None:
    assert MERGE_WINDOW == timedelta(hours=2)
    assert IDLE_GAP == timedelta(minutes=30)
    assert EPISODE_IDLE_TIMEOUT == timedelta(hours=2)


def test_word_count_counts_cjk_as_two_characters_a_word() -> None:
    assert word_count("thanks a lot") == 3
    assert word_count("谢谢你") == 2
    assert word_count("用 pytest 跑一下") == 1 + 2  # "pytest" + 4 CJK characters


# --------------------------------------------------------------------------- heuristic relation


def test_empty_text_is_unknown() -> None:
    assert classify_relation("   ", prev(), NOW) == TurnRelation("unknown", 0.0, "empty message", "empty")


def test_no_previous_episode_is_a_new_task() -> None:
    result = classify_relation("修复登录接口的 500 错误", None, NOW)
    assert (result.relation, result.confidence, result.rule) == ("new_task", 0.75, "bootstrap")


def test_idle_gap_over_two_hours_is_a_new_task_even_for_a_revision() -> None:
    result = classify_relation("不对，重新来", prev(minutes_ago=121), NOW)
    assert (result.relation, result.confidence, result.rule) == ("new_task", 0.9, "idle_timeout")
    assert classify_relation("不对，重新来", prev(minutes_ago=119), NOW).relation == "revision"


@pytest.mark.parametrize(
    "text", ["不对，重新来", "错了", "重新生成一遍", "wrong, use port 443", "No, that's wrong", "try again"]
)
def test_r1_negation_at_the_start_is_a_revision(text: str) -> None:
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.confidence, result.rule) == ("revision", 0.85, "r1_negation_keyword")


def test_r1_needs_the_negation_at_the_start() -> None:
    assert classify_relation("the answer is wrong", prev(), NOW).rule != "r1_negation_keyword"


def test_r2_quoting_eight_words_of_the_previous_reply_is_a_revision() -> None:
    text = '"Run the migration script with the verbose flag" failed for me'
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.confidence, result.rule) == ("revision", 0.75, "r2_quotes_prev")
    assert classify_relation(text, prev(reply="Done."), NOW).rule != "r2_quotes_prev"  # (a topic shift now)


@pytest.mark.parametrize("text", ["那这个呢", "这个怎么配置", "它的性能如何", "还有别的办法吗"])
def test_r3_short_pronoun_reference_is_a_follow_up(text: str) -> None:
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.confidence, result.rule) == ("follow_up", 0.85, "r3_pronoun_ref")


def test_r3_only_applies_to_short_messages() -> None:
    long_text = "那" + "我们来详细讨论一下数据库分片和复制的全部设计细节以及可能遇到的所有故障模式和恢复步骤" * 2
    assert len(long_text) > 60
    assert classify_relation(long_text, prev(), NOW).rule != "r3_pronoun_ref"


@pytest.mark.parametrize(
    "text", ["再帮我写一个类似的函数", "下一个文件", "also enable gzip compression", "more of that"]
)
def test_r4_follow_up_phrases(text: str) -> None:
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.confidence, result.rule) == ("follow_up", 0.8, "r4_follow_phrase")


@pytest.mark.parametrize(
    "text", ["换个话题，今天吃什么", "先放下这个，看看部署", "new task: write a poem", "moving on to billing"]
)
def test_r5_new_task_phrases(text: str) -> None:
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.confidence, result.rule) == ("new_task", 0.85, "r5_new_phrase")


def test_r5_beats_r4_by_confidence_and_r3_r1_by_tie_priority() -> None:
    assert classify_relation("next task please", prev(), NOW).rule == "r5_new_phrase"  # r4 "next" is 0.8
    assert classify_relation("那我们换个话题吧", prev(), NOW).rule == "r5_new_phrase"  # r3 is also 0.85
    assert classify_relation("不对，换个话题", prev(), NOW).rule == "r5_new_phrase"  # r1 is also 0.85


def test_r6_time_gap_alone_is_weak_and_downgraded_to_follow_up() -> None:
    result = classify_relation("what about the other option?", prev(minutes_ago=45), NOW)
    assert (result.relation, result.confidence, result.rule) == ("follow_up", 0.55, "weak_new_task_fallback")
    assert "r6_time_gap" in result.reason


def test_idle_gap_with_little_shared_content_is_a_new_task() -> None:
    context = prev(minutes_ago=45, first="Configure the nginx reverse proxy for the api")
    result = classify_relation("nginx proxy gzip compression for static assets", context, NOW)
    assert (result.relation, result.rule) == ("new_task", "r6_idle_shift")
    assert (
        classify_relation(
            "nginx proxy gzip compression for static assets", prev(minutes_ago=5, first=context.first_user_text), NOW
        ).relation
        == "follow_up"
    )


def test_r7_domain_shift_alone_is_weak_and_downgraded_to_follow_up() -> None:
    result = classify_relation("what about the other option?", prev(tags=["nginx", "docker"]), NOW)
    assert (result.relation, result.confidence, result.rule) == ("follow_up", 0.55, "weak_new_task_fallback")
    assert "r7_domain_shift" in result.reason


def test_r7_does_not_fire_when_a_tag_appears_or_tags_are_generic() -> None:
    assert classify_relation("NGINX returns 502 now", prev(tags=["nginx"]), NOW).rule == "default_follow_up"
    assert classify_relation("what about the other option?", prev(tags=["codex", "trace", "go"]), NOW).rule == (
        "default_follow_up"
    )


def test_no_rule_is_a_default_follow_up() -> None:
    result = classify_relation("what about the other option?", prev(), NOW)
    assert (result.relation, result.confidence, result.rule) == ("follow_up", 0.5, "default_follow_up")


@pytest.mark.parametrize(
    "text",
    ["how do I bake sourdough bread", "Build the storefront for production", "给 staging 环境跑一下 terraform plan"],
)
def test_a_topic_shift_starts_a_new_task(text: str) -> None:
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.rule) == ("new_task", "r9_topic_shift")


@pytest.mark.parametrize(
    "text",
    [
        "Next, run the database migration",
        "Now let's look at billing",
        "接下来，把导出改成按天分区",
        "另外，部署一下监控",
    ],
)
def test_an_explicit_cue_starts_a_new_task(text: str) -> None:
    result = classify_relation(text, prev(), NOW)
    assert (result.relation, result.rule) == ("new_task", "r8_cue")


def test_retries_diagnostics_and_thanks_stay_in_the_task() -> None:
    context = EpisodeContext(
        first_user_text="Run the checkout unit tests",
        latest_user_text="Run the checkout unit tests",
        last_assistant_text="Running `pnpm test src/checkout` failed; see the error.",
        tags=["pnpm"],
        last_activity_at=NOW - timedelta(minutes=2),
        evidence_text="pnpm test src/checkout exit code 1 Error: Cannot find module '@shop/payments'",
    )
    for text in (
        "It still fails: Error: Cannot find module '@shop/payments'",
        "That didn't work, same error: Cannot find module '@shop/payments'",
        "还是报错：Cannot find module '@shop/payments'",
        "Look into why first before changing anything.",
        "先查一下原因再改。",
        "thanks, works now",
        "好的，可以了，谢谢",
    ):
        assert classify_relation(text, context, NOW).relation != "new_task", text


# --------------------------------------------------------------------------- LLM relation


def relation_answer(first: dict[str, object], arbitration: dict[str, object] | str | None = None) -> Answer:
    def answer(system: str, user: str) -> str | None:
        if system == RELATION_PROMPT:
            return json.dumps(first)
        if isinstance(arbitration, dict):
            return json.dumps(arbitration)
        return arbitration

    return answer


def test_strong_heuristic_wins_without_calling_the_model() -> None:
    with model(relation_answer({"relation": "new_task", "confidence": 0.99, "reason": "x"})) as (llm, stub):
        result = classify_relation_llm("不对，重新来", prev(), NOW, llm)
    assert result.rule == "r1_negation_keyword" and stub.requests == []


def test_model_decides_when_the_heuristic_is_weak_and_sees_the_clamped_context() -> None:
    context = prev(first="配置Nginx" + "x" * 500, reply="y" * 3000)
    with model(relation_answer({"relation": "follow_up", "confidence": 0.9, "reason": "same server"})) as (llm, stub):
        result = classify_relation_llm("加gzip压缩", context, NOW, llm)
    assert result == TurnRelation("follow_up", 0.9, "same server", "llm")
    body = stub.requests[0]["body"]
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert "配置Nginx → 加gzip压缩 = follow_up" in system.replace('"', "")
    assert "[Task topic]\n配置Nginx" + "x" * 293 + "\n" in user
    assert "y" * 2000 in user and "y" * 2001 not in user
    assert "[New user message]\n加gzip压缩" in user


def test_low_confidence_new_task_is_arbitrated_to_follow_up() -> None:
    answer = relation_answer({"relation": "new_task", "confidence": 0.6, "reason": "?"}, {"relation": "follow_up"})
    with model(answer) as (llm, stub):
        result = classify_relation_llm("聊聊性能调优", prev(), NOW, llm)
    assert result == TurnRelation(
        "follow_up", 0.55, "arbitration overrode a low-confidence new_task", "llm_arbitration"
    )
    assert [r["body"]["messages"][0]["content"] for r in stub.requests] == [
        RELATION_PROMPT,
        RELATION_ARBITRATION_PROMPT,
    ]


def test_arbitration_can_confirm_the_new_task() -> None:
    answer = relation_answer({"relation": "new_task", "confidence": 0.6, "reason": "cooking"}, {"relation": "new_task"})
    with model(answer) as (llm, _stub):
        result = classify_relation_llm("做红烧肉", prev(), NOW, llm)
    assert (result.relation, result.confidence, result.rule) == ("new_task", 0.8, "llm_arbitration")


def test_confident_new_task_skips_arbitration() -> None:
    with model(relation_answer({"relation": "new_task", "confidence": 0.95, "reason": "cooking"})) as (llm, stub):
        result = classify_relation_llm("做红烧肉", prev(), NOW, llm)
    assert result.relation == "new_task" and len(stub.requests) == 1


@pytest.mark.parametrize(
    "answer",
    [
        lambda s, u: "this is not json",
        lambda s, u: None,  # HTTP 500
        lambda s, u: json.dumps({"relation": "maybe", "confidence": 0.9, "reason": ""}),
        lambda s, u: json.dumps({"relation": "follow_up", "confidence": "high", "reason": ""}),
        lambda s, u: json.dumps(["follow_up"]),
        relation_answer({"relation": "new_task", "confidence": 0.5, "reason": ""}, "garbage"),
        relation_answer({"relation": "new_task", "confidence": 0.5, "reason": ""}, {"relation": "unsure"}),
    ],
)
def test_any_model_failure_gives_the_heuristic_result(answer: Answer) -> None:
    context = prev(tags=["nginx"])
    with model(answer) as (llm, _stub):
        result = classify_relation_llm("how do I bake sourdough", context, NOW, llm)
    assert result == classify_relation("how do I bake sourdough", context, NOW)
    assert result.rule == "r9_topic_shift"  # a topic shift (0.82) is below the strong-heuristic bar: the model is asked


def test_model_timeout_gives_the_heuristic_result() -> None:
    with model(relation_answer({"relation": "new_task", "confidence": 1.0, "reason": ""}), delay_s=0.4) as (llm, _):
        result = classify_relation_llm("how do I bake sourdough", prev(), NOW, llm, timeout_s=0.1)
    assert result.rule == "r9_topic_shift"


def test_no_model_and_the_early_cases_need_no_call() -> None:
    assert classify_relation_llm("anything", prev(), NOW, None) == classify_relation("anything", prev(), NOW)
    with model(relation_answer({"relation": "follow_up", "confidence": 1.0, "reason": ""})) as (llm, stub):
        assert classify_relation_llm("", prev(), NOW, llm).relation == "unknown"
        assert classify_relation_llm("hello", None, NOW, llm).rule == "bootstrap"
        assert classify_relation_llm("hello", prev(minutes_ago=200), NOW, llm).rule == "idle_timeout"
    assert stub.requests == []


# --------------------------------------------------------------------------- implicit feedback


@pytest.mark.parametrize(
    "text",
    [
        "搞定了，谢谢",
        "好的",
        "完美！",
        "thanks!",
        "Perfect, that works",
        "ok",
        "it works now",
        "LGTM",
        "that's correct",
    ],
)
def test_positive_feedback(text: str) -> None:
    found = classify_feedback(text)
    assert found is not None
    assert (found.polarity, found.magnitude, found.confidence, found.shape) == ("positive", 0.8, 0.85, "positive")


@pytest.mark.parametrize(
    "text", ["不对", "错了，端口应该是443", "还是不行", "wrong", "No, use port 443", "that's not right", "still broken"]
)
def test_negative_feedback(text: str) -> None:
    found = classify_feedback(text)
    assert found is not None
    assert (found.polarity, found.magnitude, found.confidence) == ("negative", -0.9, 0.85)


@pytest.mark.parametrize(
    "text", ["don't use sed here", "应该用443端口", "下次先跑测试", "别用全局变量", "use ripgrep instead"]
)
def test_guidance_feedback(text: str) -> None:
    found = classify_feedback(text)
    assert found is not None
    assert (found.polarity, found.magnitude, found.confidence, found.shape) == ("negative", -0.6, 0.65, "guidance")


@pytest.mark.parametrize(
    ("text", "polarity"),
    [("本任务评为正例", "positive"), ("本任务评为反例", "negative"), ("r >= 0.8", "positive"), ("r = 0.1", "negative")],
)
def test_verifier_feedback(text: str, polarity: str) -> None:
    found = classify_feedback(text)
    assert found is not None
    assert (found.polarity, abs(found.magnitude), found.confidence, found.shape) == (polarity, 1.0, 0.95, "verifier")


@pytest.mark.parametrize(
    "text",
    [
        "please add a test for X",
        "Please add a test for the parser; it should check empty input",
        "add a test that checks the parser is correct",
        "fix it so it works on Windows",
        "ok, now add a test for the parser",
        "帮我写一个脚本，下次运行时自动备份",
        "那这个呢",
        "应该怎么做？",
        "别的呢",
        "对了，还有一件事",
        "no need to add tests",
        "if r >= 0 return early, otherwise keep iterating through the list of items",
        "Refactor the config loader so that errors are reported with the file name and the line number",
        "",
    ],
)
def test_new_requests_and_questions_are_not_feedback(text: str) -> None:
    assert classify_feedback(text) is None


def test_min_confidence_filters_weak_signals() -> None:
    assert classify_feedback("don't use sed here", min_confidence=0.7) is None
    assert classify_feedback("wrong", min_confidence=0.7) is not None


# --------------------------------------------------------------------------- social-only steps (reflection)


def step(user: str, tools: list[dict[str, Any]] | None = None) -> IndexedTrace:
    return IndexedTrace(
        id="t",
        episode_id="ep",
        session_id="s",
        created_at=NOW.isoformat(),
        user_text=user,
        agent_text="ok",
        summary=user,
        signature="_|_|_|_",
        tool_calls=tuple(tools or []),
    )


@pytest.mark.parametrize("text", ["thanks!", "谢谢你", "hello", "你真棒！", "great job", "Thank you so much"])
def test_social_steps(text: str) -> None:
    assert is_social_step(step(text))


@pytest.mark.parametrize(
    "text",
    [
        "thanks, can you also fix the test?",
        "我叫小明，谢谢",
        "thanks, my name is Ada",
        "thank you so much for all the help with everything today",
        "hello, please run the build",
        "你好，帮我看下这个报错",
        "",
    ],
)
def test_not_social_steps(text: str) -> None:
    assert not is_social_step(step(text))


def test_a_step_with_tools_is_never_social() -> None:
    assert not is_social_step(step("thanks", [{"name": "bash", "output": "ok"}]))
