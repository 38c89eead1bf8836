"""Reward rules: skip rules, R_human (LLM via a real loopback model, feedback, outcome), back-propagation,
and batch reflection windows / degradation / fallback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memmy.evolve.model import IndexedTrace
from memmy.evolve.reflection import (
    BATCH_REFLECTION_PROMPT,
    Reflection,
    build_windows,
    parse_scores,
    reflect_batch,
)
from memmy.evolve.reward import (
    REWARD_R_HUMAN_PROMPT,
    EpisodeTurn,
    FeedbackItem,
    backpropagate,
    build_task_summary,
    corrected_without_acceptance,
    heuristic_outcome_reward,
    heuristic_r_human,
    score_episode,
    skip_reason,
)
from memmy.llm.client import LLMEndpoint, LLMError, OpenAICompatibleLLM
from tests.llm_stub import Answer, ChatStub, run_chat_stub

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Server:
    """One loopback model for the module (a stub's shutdown takes ~0.5 s); each test swaps in its answer."""

    def __init__(self) -> None:
        self.answer: Answer = lambda system, user: None
        self.stub: ChatStub | None = None

    def __call__(self, system: str, user: str) -> str | None:
        return self.answer(system, user)


SERVER = Server()
SLOW = Server()  # answers after delay_s = 0.3 s, for timeout tests


@pytest.fixture(scope="module", autouse=True)
def shared_servers() -> Iterator[None]:
    with run_chat_stub(SERVER) as stub, run_chat_stub(SLOW, delay_s=0.3) as slow:
        SERVER.stub, SLOW.stub = stub, slow
        yield


@contextmanager
def model(answer: Answer, slow: bool = False) -> Iterator[tuple[OpenAICompatibleLLM, ChatStub]]:
    """The production client against a shared stub answering ``answer`` (the 0.3 s one when ``slow``)."""
    server = SLOW if slow else SERVER
    assert server.stub is not None
    server.answer = answer
    server.stub.requests.clear()
    yield OpenAICompatibleLLM(LLMEndpoint(server.stub.url, "stub"), malformed_retries=0), server.stub


def turn(user: str, agent: str, tools: int = 0, failed: bool = False, output: str = "") -> EpisodeTurn:
    return EpisodeTurn(user, agent, tools, failed, output)


def user_message(request: dict[str, Any]) -> str:
    return str(request["body"]["messages"][1]["content"])


# --------------------------------------------------------------------------- skip rules

GOOD = [
    turn("Please fix the failing login test in tests/test_auth.py", "I patched the token check and the test passes."),
]


def test_a_normal_episode_is_not_skipped() -> None:
    assert skip_reason(GOOD) is None


def test_skip_without_a_complete_exchange() -> None:
    reason = skip_reason([turn("Please fix the failing login test in tests/test_auth.py", "")])
    assert reason is not None and reason.startswith("对话轮次不足") and "exchange" in reason


def test_skip_without_user_turns() -> None:
    reason = skip_reason([turn("", "I ran the nightly maintenance job and rotated all the logs.")], min_exchanges=0)
    assert reason is not None and reason.startswith("没有用户消息") and "no user turns" in reason


def test_skip_short_content_with_a_cjk_threshold_of_half() -> None:
    english = [turn("fix the typo in README", "Fixed the typo in README.md.")]  # 51 chars < 80
    reason = skip_reason(english)
    assert reason is not None and reason.startswith("内容过短") and "content too short" in reason
    chinese = [
        turn(
            "把README里的拼写错误改掉，顺便检查一下标题", "已经修正了README.md中的拼写错误，标题也检查过了，没有问题。"
        )
    ]
    assert 40 <= sum(len(t.user_text) + len(t.agent_text) for t in chinese) < 80
    assert skip_reason(chinese) is None
    assert skip_reason(english, min_content_chars=20) is None


def test_skip_trivial_greetings_and_test_text() -> None:
    turns = [
        turn("test", "I received your test message; everything is working on my side."),
        turn("hello", "Hello again! Let me know what you would like to work on today."),
        turn("ok", "Great."),
    ]
    reason = skip_reason(turns)
    assert reason is not None and reason.startswith("内容为简单问候或测试")


def test_skip_tool_heavy_episodes() -> None:
    turns = [
        turn(
            "Please deploy the staging stack with the new configuration and verify the health checks afterwards.",
            "Done.",
            tools=10,
        )
    ]
    reason = skip_reason(turns)
    assert reason is not None and reason.startswith("以工具输出为主") and "10/12" in reason
    assert skip_reason(turns, tool_heavy_ratio=0.9) is None


def test_skip_repetitive_user_messages() -> None:
    turns = [
        turn("run the full test suite again please", f"Run {i}: 3 tests failed in test_auth.py.") for i in range(4)
    ]
    reason = skip_reason(turns)
    assert reason is not None and reason.startswith("大量重复内容") and "1 unique of 4" in reason
    varied = [turn(f"run test group {i} again please", f"Run {i}: 3 tests failed in test_auth.py.") for i in range(4)]
    assert skip_reason(varied) is None


# --------------------------------------------------------------------------- feedback and outcome heuristics


def test_single_feedback_item_gives_plus_or_minus_one() -> None:
    score = heuristic_r_human([FeedbackItem("explicit", "negative", 1.0)])
    assert (score.r_human, score.source, score.label) == (-1.0, "explicit_feedback", "failure")
    assert heuristic_r_human([FeedbackItem("implicit", "positive", 0.8)]).r_human == 1.0


def test_explicit_feedback_wins_over_implicit() -> None:
    items = [FeedbackItem("implicit", "positive", 0.8), FeedbackItem("explicit", "negative", 1.0)]
    assert heuristic_r_human(items).r_human == -1.0


def test_implicit_feedback_is_magnitude_weighted() -> None:
    items = [FeedbackItem("implicit", "positive", 0.8), FeedbackItem("implicit", "negative", 0.9)]
    score = heuristic_r_human(items)
    assert score.source == "implicit_feedback"
    assert score.r_human == pytest.approx((0.8 - 0.9) / 1.7)


def test_no_feedback_gives_zero() -> None:
    assert heuristic_r_human([]).r_human == 0.0 and heuristic_r_human([]).source == "none"
    assert heuristic_r_human([FeedbackItem("implicit", "neutral", 0.5)]).r_human == 0.0


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        ([turn("fix the build", "Here is the fix.", tools=2, failed=True)], -0.6),
        ([turn("fix the build", "Ran pytest.", tools=1, output="=== 2 failed, 3 passed in 0.4s ===")], -0.6),
        ([turn("fix the build", "The build still fails with the same linker error.", tools=1)], -0.6),
        ([turn("修复构建", "构建仍然报错。", tools=1)], -0.6),
        ([turn("fix the build", "Fixed: all 12 tests pass now.", tools=3)], 0.6),
        ([turn("fix the build", "I fixed the TypeError; the suite passes.", tools=3)], 0.6),
        ([turn("fix the build", "Done, the build completed with no errors.", tools=1)], 0.6),
        ([turn("修复登录", "已修复，测试全部通过。", tools=2)], 0.6),
        ([turn("explain asyncio", "asyncio runs coroutines on an event loop.")], 0.2),
        ([turn("fix the build", "", tools=1)], 0.0),
    ],
)
def test_outcome_reward_reads_execution_evidence(turns: list[EpisodeTurn], expected: float) -> None:
    score = heuristic_outcome_reward(turns)
    assert score.r_human == expected and score.source == "outcome"


def test_outcome_uses_the_last_tool_call_not_an_earlier_failure() -> None:
    turns = [
        turn("fix the build", "The compile failed, retrying.", tools=1, failed=True),
        turn("go on", "Fixed the include path; the build passes now.", tools=1),
    ]
    assert heuristic_outcome_reward(turns).r_human == 0.6


def test_score_episode_without_a_model_uses_feedback_then_outcome() -> None:
    assert score_episode(GOOD, [FeedbackItem("explicit", "negative", 1.0)], None).source == "explicit_feedback"
    assert score_episode(GOOD, [], None).source == "outcome"


# --------------------------------------------------------------------------- task summary


def test_task_summary_lists_numbered_turns_and_the_execution_outcome() -> None:
    turns = [
        turn("Fix the login test", "Looking at it.", tools=2, failed=True, output="AssertionError: 401 != 200"),
        turn("go on", "Patched the token check; the test passes.", tools=1, output="1 passed"),
    ]
    summary = build_task_summary(turns, "")
    assert summary.startswith("EPISODE_MISSION: Fix the login test\n")
    assert "[1] USER: Fix the login test" in summary
    assert "[1] TOOLS: 2 call(s), last failed: AssertionError: 401 != 200" in summary
    assert "[2] AGENT: Patched the token check; the test passes." in summary
    outcome = {"total_tool_calls": 3, "last_tool_result": "success", "task_completed_by_tool": "yes"}
    assert summary.endswith(f"EXECUTION_OUTCOME: {json.dumps(outcome)}")
    assert build_task_summary(turns, "Make login work").startswith("EPISODE_MISSION: Make login work\n")
    assert '"task_completed_by_tool": "unknown"' in build_task_summary([turn("hi", "hello")], "")
    assert '"task_completed_by_tool": "no"' in build_task_summary(turns[:1], "")


def test_task_summary_is_head_tail_clamped() -> None:
    turns = [turn(f"step {i} " + "u" * 300, f"answer {i} " + "a" * 400, tools=1) for i in range(20)]
    summary = build_task_summary(turns, "the mission", max_chars=2000)
    assert len(summary) <= 2000
    assert summary.startswith("EPISODE_MISSION: the mission")
    assert "[1] USER: step 0" in summary and "[20] AGENT: answer 19" in summary
    assert "…[truncated]…" in summary and "EXECUTION_OUTCOME" in summary


# --------------------------------------------------------------------------- LLM r_human


def reward_answer(**axes: Any) -> Answer:
    return lambda system, user: json.dumps(axes) if system == REWARD_R_HUMAN_PROMPT else None


def test_llm_r_human_combines_the_three_axes() -> None:
    answer = reward_answer(
        goal_achievement=0.8, process_quality=0.6, user_satisfaction=0.4, label="success", reason="ok"
    )
    feedback = [FeedbackItem("implicit", "positive", 0.8, "搞定了，谢谢", "2026-03-01T12:00:00Z")]
    with model(answer) as (llm, stub):
        score = score_episode(GOOD, feedback, llm, host_context="agent=claude-code model=opus")
    assert score.source == "llm" and score.label == "success" and score.reason == "ok"
    assert score.r_human == pytest.approx(0.45 * 0.8 + 0.30 * 0.6 + 0.25 * 0.4)
    assert score.axes == {"goal_achievement": 0.8, "process_quality": 0.6, "user_satisfaction": 0.4}
    sent = user_message(stub.requests[0])
    assert sent.startswith("HOST_AGENT_CONTEXT:\nagent=claude-code model=opus\n\nTASK_SUMMARY:\nEPISODE_MISSION:")
    assert "EXECUTION_OUTCOME" in sent and "FEEDBACK:\n- implicit positive magnitude=0.80: 搞定了，谢谢" in sent


def test_negative_satisfaction_caps_goal_at_point_three() -> None:
    answer = reward_answer(
        goal_achievement=0.9, process_quality=0.5, user_satisfaction=-0.5, label="partial", reason=""
    )
    with model(answer) as (llm, _stub):
        score = score_episode(GOOD, [], llm)
    assert score.axes["goal_achievement"] == 0.3
    assert score.r_human == pytest.approx(0.45 * 0.3 + 0.30 * 0.5 - 0.25 * 0.5)


def test_correction_without_acceptance_caps_goal_at_zero() -> None:
    corrected = [*GOOD, turn("不对，还是报错", "I changed the token parser again.")]
    answer = reward_answer(goal_achievement=0.8, process_quality=0.5, user_satisfaction=0.0, label="success", reason="")
    with model(answer) as (llm, _stub):
        capped = score_episode(corrected, [], llm)
        accepted = score_episode([*corrected, turn("搞定了，谢谢", "Glad it works.")], [], llm)
    assert capped.axes["goal_achievement"] == 0.0 and capped.r_human == pytest.approx(0.15)
    assert accepted.axes["goal_achievement"] == 0.8 and accepted.r_human == pytest.approx(0.36 + 0.15)


def test_correction_detection_reads_turns_and_feedback_in_order() -> None:
    assert not corrected_without_acceptance(GOOD, [])
    negative = FeedbackItem("explicit", "negative", 1.0, created_at="2026-03-01T10:00:00Z")
    positive = FeedbackItem("implicit", "positive", 0.8, created_at="2026-03-01T11:00:00Z")
    assert corrected_without_acceptance(GOOD, [negative])
    assert not corrected_without_acceptance(GOOD, [positive, negative][::-1])
    assert corrected_without_acceptance([*GOOD, turn("wrong", "sorry")], [])


def test_llm_axes_are_clamped_and_camel_case_is_accepted() -> None:
    answer = reward_answer(goalAchievement=3, processQuality=-2, userSatisfaction=1, label="odd", reason=7)
    with model(answer) as (llm, _stub):
        score = score_episode(GOOD, [], llm)
    assert score.axes == {"goal_achievement": 1.0, "process_quality": -1.0, "user_satisfaction": 1.0}
    assert score.label == "partial" and score.reason == ""  # invalid label -> derived; non-string reason dropped


@pytest.mark.parametrize(
    "answer",
    [
        lambda s, u: "not json at all",
        lambda s, u: None,
        lambda s, u: json.dumps({"goal_achievement": 0.5, "process_quality": 0.5}),
        lambda s, u: json.dumps({"goal_achievement": True, "process_quality": 0.5, "user_satisfaction": 0.5}),
        lambda s, u: json.dumps([0.5, 0.5, 0.5]),
    ],
)
def test_llm_failure_falls_back_to_feedback(answer: Answer) -> None:
    with model(answer) as (llm, stub):
        score = score_episode(GOOD, [FeedbackItem("explicit", "positive", 1.0)], llm)
    assert (score.source, score.r_human) == ("explicit_feedback", 1.0) and len(stub.requests) == 1


def test_llm_timeout_falls_back_to_the_outcome() -> None:
    answer = reward_answer(goal_achievement=1, process_quality=1, user_satisfaction=1, label="success", reason="")
    with model(answer, slow=True) as (llm, _stub):
        score = score_episode(GOOD, [], llm, timeout_s=0.1)
    assert score.source == "outcome"


def test_llm_scoring_off_makes_no_call() -> None:
    with model(reward_answer(goal_achievement=1, process_quality=1, user_satisfaction=1)) as (llm, stub):
        assert score_episode(GOOD, [], llm, llm_scoring=False).source == "outcome"
    assert stub.requests == []


# --------------------------------------------------------------------------- back-propagation


def trace(
    trace_id: str,
    created_at: datetime | str,
    reflection: str | None = "RELATED",
    *,
    user: str = "run the tests",
    agent: str = "Ran them.",
    alpha: float = 0.0,
    tools: list[dict[str, Any]] | None = None,
) -> IndexedTrace:
    stamp = created_at if isinstance(created_at, str) else created_at.isoformat()
    return IndexedTrace(
        id=trace_id,
        episode_id="ep",
        session_id="s",
        created_at=stamp,
        user_text=user,
        agent_text=agent,
        summary=user,
        tags=(),
        signature="_|_|_|_",
        error_signatures=(),
        tool_calls=tuple(tools or []),
        reflection=reflection,
        alpha=alpha,
    )


def test_backpropagation_by_hand() -> None:
    t0 = trace("a", NOW - timedelta(days=30), "PIVOTAL")
    t1 = trace("b", NOW - timedelta(days=29), "IRRELEVANT")
    t2 = trace("c", NOW, "RELATED")
    rewards = backpropagate([t2, t0, t1], 1.0, now=NOW)  # sorted by created_at internally
    # w0 = 1·(0.5 + 0.5·0.9²) = 0.905; w1 = 0; w2 = 0.5·(0.5 + 0.5)·(1 + 0.1 recovery) = 0.55
    assert [r.trace_id for r in rewards] == ["a", "b", "c"]
    assert [r.alpha for r in rewards] == [1.0, 0.0, 0.5]
    assert rewards[0].value == pytest.approx(0.905 / 1.455)
    assert rewards[1].value == 0.0
    assert rewards[2].value == pytest.approx(0.55 / 1.455)
    assert rewards[0].priority == pytest.approx(0.905 / 1.455 * 0.5)  # 30 days old, half-life 30
    assert rewards[2].priority == pytest.approx(0.55 / 1.455)


def test_backpropagation_of_a_negative_reward_has_no_priority() -> None:
    rewards = backpropagate([trace("a", NOW), trace("b", NOW + timedelta(seconds=1))], -0.6, now=NOW)
    # equal alphas: w = 0.5·(0.5 + 0.5·0.9) = 0.475 and 0.5·1.0 = 0.5
    assert rewards[0].value == pytest.approx(-0.6 * 0.475 / 0.975)
    assert rewards[1].value == pytest.approx(-0.6 * 0.5 / 0.975)
    assert all(r.priority == 0.0 for r in rewards)


def test_backpropagation_with_no_relevant_trace_gives_zero() -> None:
    rewards = backpropagate([trace("a", NOW, "IRRELEVANT"), trace("b", NOW, "IRRELEVANT")], 1.0, now=NOW)
    assert [(r.value, r.priority) for r in rewards] == [(0.0, 0.0), (0.0, 0.0)]
    assert backpropagate([], 1.0, now=NOW) == []


def test_effective_alpha_for_empty_and_free_text_reflections() -> None:
    rewards = backpropagate(
        [
            trace("a", "2026-03-01T11:00:00Z", None),
            trace("b", "2026-03-01T11:01:00Z", "", alpha=0.8),
            trace("c", "2026-03-01T11:02:00Z", "I ran the tests because...", alpha=0.3),
            trace("d", "2026-03-01T11:03:00Z", "RELATED_DEFAULT"),
        ],
        1.0,
        now=NOW,
    )
    assert [r.alpha for r in rewards] == [0.5, 0.8, 0.3, 0.5]
    assert sum(r.value for r in rewards) == pytest.approx(1.0)


def test_parameters_change_the_weights() -> None:
    traces = [trace("a", NOW), trace("b", NOW + timedelta(seconds=1))]
    flat = backpropagate(traces, 1.0, lambda_=0.0, now=NOW)
    assert [r.value for r in flat] == pytest.approx([0.5, 0.5])
    steep = backpropagate(traces, 1.0, lambda_=1.0, gamma=0.5, now=NOW)
    assert [r.value for r in steep] == pytest.approx([1 / 3, 2 / 3])


# --------------------------------------------------------------------------- reflection


def test_windows() -> None:
    assert build_windows(8, 6, 1) == [(0, 6), (5, 8)]
    assert build_windows(5, 3, 1) == [(0, 3), (2, 5)]
    assert build_windows(3, 1, 0) == [(0, 1), (1, 2), (2, 3)]
    assert build_windows(0, 6, 1) == []


@pytest.mark.parametrize(
    "answer",
    [
        {"scores": [{"idx": 0, "relevance": "RELATED"}]},
        {"scores": [{"idx": 0, "relevance": "RELATED"}, {"idx": 0, "relevance": "RELATED"}]},
        {"scores": [{"idx": 0, "relevance": "RELATED"}, {"idx": 2, "relevance": "RELATED"}]},
        {"scores": [{"idx": 0, "relevance": "RELATED"}, {"idx": True, "relevance": "RELATED"}]},
        {"scores": [{"idx": 0, "relevance": "RELATED"}, {"idx": 1, "relevance": "RELATED_DEFAULT"}]},
        {"scores": [{"idx": 0, "relevance": "RELATED"}, "PIVOTAL"]},
        {"ranked": [0, 1]},
    ],
)
def test_parse_scores_needs_exactly_one_valid_entry_per_step(answer: dict[str, Any]) -> None:
    with pytest.raises(LLMError):
        parse_scores(answer, 2)


def test_parse_scores_orders_by_idx() -> None:
    answer = {
        "scores": [{"idx": 1, "relevance": "pivotal", "reason": "ROOT_CAUSE"}, {"idx": 0, "relevance": "RELATED"}]
    }
    assert parse_scores(answer, 2) == [("RELATED", ""), ("PIVOTAL", "ROOT_CAUSE")]


def episode(n: int, *, social_at: int | None = None, poison_at: int | None = None) -> list[IndexedTrace]:
    traces = []
    for i in range(n):
        user = "thanks!" if i == social_at else ("POISON step" if i == poison_at else f"step {i}: edit module_{i}.py")
        traces.append(trace(f"t{i}", NOW + timedelta(minutes=i), None, user=user))
    return traces


def scoring(fail_when: Any = None, pivotal_first_of_short: bool = False) -> Answer:
    """A model answering RELATED for every step, or malformed JSON when ``fail_when(steps)`` is true."""

    def answer(system: str, user: str) -> str | None:
        assert system == BATCH_REFLECTION_PROMPT
        steps = json.loads(user)["steps"]
        if fail_when is not None and fail_when(steps):
            return "{not json"
        labels = ["RELATED"] * len(steps)
        if pivotal_first_of_short and len(steps) < 6:
            labels[0] = "PIVOTAL"
        return json.dumps(
            {"scores": [{"idx": s["idx"], "relevance": r, "reason": "X"} for s, r in zip(steps, labels, strict=True)]}
        )

    return answer


def test_without_a_model_everything_is_related_default_except_social_steps() -> None:
    result = reflect_batch(episode(3, social_at=1), "fix the tests", None)
    assert result == [
        Reflection("t0", "RELATED_DEFAULT", 0.5, "no model configured", "default"),
        Reflection("t1", "IRRELEVANT", 0.0, "SOCIAL_ONLY", "local_social"),
        Reflection("t2", "RELATED_DEFAULT", 0.5, "no model configured", "default"),
    ]


def test_windows_of_six_with_overlap_keep_the_higher_label_and_skip_social_steps() -> None:
    traces = episode(9, social_at=4)
    with model(scoring(pivotal_first_of_short=True)) as (llm, stub):
        result = reflect_batch(traces, "T" * 1000, llm, host_context="claude-code")
    payloads = [json.loads(user_message(r)) for r in stub.requests]
    assert [len(p["steps"]) for p in payloads] == [6, 3]  # 8 non-social steps: [0, 6) and [5, 8)
    assert [s["idx"] for s in payloads[1]["steps"]] == [0, 1, 2]
    assert payloads[0]["task_context"] == "T" * 800 and payloads[0]["host_context"] == "claude-code"
    assert set(payloads[0]["steps"][0]) == {
        "idx", "state", "thinking", "action", "tool_calls", "outcome", "reflection", "synth_allowed"
    }  # fmt: skip
    assert all("thanks!" not in user_message(r) for r in stub.requests)
    assert [r.relevance for r in result] == ["RELATED"] * 4 + ["IRRELEVANT"] + [
        "RELATED",
        "PIVOTAL",
        "RELATED",
        "RELATED",
    ]
    assert result[6].alpha == 1.0 and result[6].source == "llm" and result[4].source == "local_social"


def test_wrong_count_degrades_to_windows_of_three() -> None:
    def short_answer(system: str, user: str) -> str | None:
        steps = json.loads(user)["steps"]
        keep = steps if len(steps) <= 3 else steps[:-1]
        return json.dumps({"scores": [{"idx": s["idx"], "relevance": "RELATED", "reason": ""} for s in keep]})

    with model(short_answer) as (llm, stub):
        result = reflect_batch(episode(5), "task", llm)
    assert [len(json.loads(user_message(r))["steps"]) for r in stub.requests] == [5, 5, 3, 3]
    assert all(r.source == "llm" and r.relevance == "RELATED" for r in result)


def test_a_step_the_model_chokes_on_is_isolated_by_windows_of_one() -> None:
    with model(scoring(fail_when=lambda steps: any("POISON" in s["state"] for s in steps))) as (llm, _stub):
        result = reflect_batch(episode(4, poison_at=1), "task", llm, primary_retries=0, degraded_retries=0)
    assert [r.source for r in result] == ["llm", "default", "llm", "llm"]
    assert result[1] == Reflection("t1", "RELATED_DEFAULT", 0.5, "model could not score this step", "default")


@pytest.mark.parametrize("answer", [lambda s, u: "{not json", lambda s, u: None])
def test_an_unusable_model_costs_a_bounded_number_of_calls(answer: Answer) -> None:
    with model(answer) as (llm, stub):
        result = reflect_batch(episode(12), "task", llm, primary_retries=1, degraded_retries=1)
    # primary: first window x (1 + 1); degraded: first window x (1 + 1); singles: first window x (1 + 1)
    assert len(stub.requests) == 2 + 2 + 2
    assert all(r.relevance == "RELATED_DEFAULT" and r.alpha == 0.5 for r in result)


def test_reflection_timeout_falls_back_to_related_default() -> None:
    answer = scoring()
    with model(answer, slow=True) as (llm, stub):
        result = reflect_batch(episode(2), "task", llm, timeout_s=0.1, primary_retries=0, degraded_retries=0)
    assert len(stub.requests) == 3  # one probe per pass: 6, 3, 1
    assert [r.source for r in result] == ["default", "default"]


def test_step_payload_carries_tool_calls_and_outcome() -> None:
    tools: list[dict[str, Any]] = [
        {"name": "bash", "input": {"cmd": "pytest -q"}, "output": "x" * 500, "error": None},
        {"name": "bash", "input": "make", "output": "boom", "error": "exit 2"},
    ]
    traces = [trace("t0", NOW, "I ran make because the Makefile wraps pytest.", tools=tools, agent="a" * 900)]
    with model(scoring()) as (llm, stub):
        reflect_batch(traces, "task", llm)
    step = json.loads(user_message(stub.requests[0]))["steps"][0]
    assert step["tool_calls"][0] == {
        "name": "bash",
        "input": '{"cmd": "pytest -q"}',
        "output": "x" * 159 + "…",
        "errorCode": None,
    }
    assert step["tool_calls"][1]["errorCode"] == "exit 2"
    assert step["outcome"] == "ERROR exit 2 boom"
    assert len(step["action"]) == 600 and step["reflection"].startswith("I ran make")
