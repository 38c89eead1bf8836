"""Episode reward (reference §5.3): skip rules, R_human and its back-propagation onto the episode's traces.

R_human comes from the reward LLM when one is configured, else from the user's explicit or implicit
feedback, else (offline, no feedback) from the execution evidence of the episode itself.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from memmy.evolve.boundaries import classify_feedback, has_cjk, one_line
from memmy.evolve.model import IndexedTrace
from memmy.kinds.trace import Trace
from memmy.llm.client import JsonLLM, LLMError

AXES = ("goal_achievement", "process_quality", "user_satisfaction")
LABELS = ("success", "partial", "failure", "unknown")
RELEVANCE_ALPHA = {"IRRELEVANT": 0.0, "RELATED": 0.5, "RELATED_DEFAULT": 0.5, "PIVOTAL": 1.0}


@dataclass(frozen=True)
class EpisodeTurn:
    """One user/agent exchange of an episode, as the reward rules see it."""

    user_text: str
    agent_text: str
    tool_call_count: int
    tool_failed: bool = False  # the turn's last tool call failed
    last_tool_output: str = ""


@dataclass(frozen=True)
class FeedbackItem:
    """One piece of user feedback on the episode."""

    channel: str  # explicit | implicit
    polarity: str  # positive | negative | neutral
    magnitude: float  # >= 0
    rationale: str = ""
    created_at: str = ""


@dataclass(frozen=True)
class RewardScore:
    """The episode's human reward in [-1, 1] and where it came from."""

    r_human: float
    source: str  # llm | explicit_feedback | implicit_feedback | outcome (execution evidence) | none
    axes: dict[str, float]
    label: str  # success | partial | failure | unknown
    reason: str


@dataclass(frozen=True)
class TraceReward:
    """What back-propagation writes onto one trace."""

    trace_id: str
    value: float
    alpha: float
    priority: float


def _clamp(value: float, low: float = -1.0, high: float = 1.0) -> float:
    return max(low, min(high, value))


def _label_for(r_human: float) -> str:
    if r_human >= 0.5:
        return "success"
    if r_human <= -0.3:
        return "failure"
    return "unknown" if r_human == 0 else "partial"


def _axes(goal: float = 0.0, process: float = 0.0, satisfaction: float = 0.0) -> dict[str, float]:
    return dict(zip(AXES, (goal, process, satisfaction), strict=True))


# --------------------------------------------------------------------------- skip rules

_TRIVIAL_LINE = re.compile(
    r"^(?:test|testing|hello|hi|hey|ok|okay|yes|no|yeah|nope|sure|thanks|thank you|thx|ping|pong"
    r"|哈哈+|好的|嗯|是的|不是|谢谢|你好|测试)\s*[.!?。！？~]*$"
    r"|^(?:a{3,}|b{3,}|x{3,}|z{3,}|(?:123)+|asdf+|qwer+|(?:ha){2,}|lol+|hm+)\s*$"
    r"|^[\s\W_]*$",
    re.IGNORECASE,
)


def _looks_trivial(text: str, ratio: float, min_non_trivial: int) -> bool:
    """More than ``ratio`` of the characters are greetings/test lines and under ``min_non_trivial`` are not."""
    lines = [line.strip() for line in text.lower().splitlines() if line.strip()]
    if not lines:
        return True
    trivial = sum(len(line) for line in lines if _TRIVIAL_LINE.search(line))
    other = sum(len(line) for line in lines) - trivial
    if other >= min_non_trivial:
        return False
    total = trivial + other
    return total == 0 or trivial / total > ratio


def skip_reason(
    turns: list[EpisodeTurn],
    *,
    min_exchanges: int = 1,
    min_content_chars: int = 40,
    trivial_ratio: float = 0.7,
    trivial_min_chars: int = 30,
    tool_heavy_ratio: float = 0.7,
    min_assistant_chars_tool_heavy: int = 80,
    repeat_min_messages: int = 3,
    min_unique_ratio: float = 0.4,
) -> str | None:
    """Why an episode without explicit feedback is not worth a reward (Chinese + English gloss), or None.

    The six rules of the reference, in order: too few complete exchanges; no user turn; content shorter than
    ``min_content_chars`` (CJK) or twice that (other scripts); trivial greeting/test content; a tool-heavy
    episode with at most one user turn and little assistant text; repetitive user messages.
    """
    users = [t.user_text for t in turns if t.user_text]
    agents = [t.agent_text for t in turns if t.agent_text]
    tool_calls = sum(max(0, t.tool_call_count) for t in turns)
    exchanges = min(len(users), len(agents))
    if exchanges < min_exchanges:
        return f"对话轮次不足 (fewer than {min_exchanges} complete exchange(s): {exchanges})"
    if not users:
        return "没有用户消息 (no user turns)"
    content_chars = sum(len(text) for text in users + agents)
    needed = min_content_chars if has_cjk(("".join(users) + "".join(agents))[:4000]) else 2 * min_content_chars
    if content_chars < needed:
        return f"内容过短 (content too short: {content_chars} < {needed} chars)"
    user_text, agent_text = "\n".join(users), "\n".join(agents)
    if _looks_trivial(user_text, trivial_ratio, trivial_min_chars) or _looks_trivial(
        f"{user_text}\n{agent_text}", trivial_ratio, trivial_min_chars
    ):
        return "内容为简单问候或测试 (trivial greeting/test content)"
    items = len(users) + len(agents) + tool_calls
    if (
        tool_calls > 0
        and tool_calls >= items * tool_heavy_ratio
        and len(users) <= 1
        and sum(len(text) for text in agents) < min_assistant_chars_tool_heavy
    ):
        return f"以工具输出为主 (tool-heavy episode: {tool_calls}/{items} items are tool calls)"
    if len(users) >= repeat_min_messages:
        unique = len({text.strip().lower() for text in users})
        if unique / len(users) < min_unique_ratio:
            return f"大量重复内容 (repetitive user messages: {unique} unique of {len(users)})"
    return None


# --------------------------------------------------------------------------- heuristic rewards


def _sign(polarity: str) -> float:
    return {"positive": 1.0, "negative": -1.0}.get(polarity, 0.0)


def heuristic_r_human(feedback: list[FeedbackItem]) -> RewardScore:
    """R_human from feedback alone: explicit items if any, else all; sat = Σ sign·|mag| / Σ|mag|.

    A single item therefore gives ±1. No feedback gives 0 with source ``none``; for an episode with no
    feedback at all prefer :func:`heuristic_outcome_reward`, which reads the execution evidence instead.
    """
    explicit = [item for item in feedback if item.channel == "explicit"]
    items = explicit or list(feedback)
    if not items:
        return RewardScore(0.0, "none", _axes(), "unknown", "no feedback")
    total = sum(abs(item.magnitude) for item in items)
    sat = sum(_sign(item.polarity) * abs(item.magnitude) for item in items) / total if total > 0 else 0.0
    sat = _clamp(sat)
    source = "explicit_feedback" if explicit else "implicit_feedback"
    reason = f"{len(items)} {source.replace('_', ' ')} item(s), satisfaction {sat:+.2f}"
    return RewardScore(sat, source, _axes(satisfaction=sat), _label_for(sat), reason)


_TOOL_OUTPUT_FAILED = re.compile(
    r"\b[1-9]\d* (?:failed|errors?)\b|^FAILED\b|Traceback \(most recent call last\)|\bexit (?:code|status)[: ]+[1-9]",
    re.MULTILINE,
)
_NEGATED_ERROR = re.compile(
    r"\b(?:no|zero|0|without|any)\s+(?:errors?|failures?|failed|failing tests?)\b|\berror[- ]free\b"
    r"|没有(?:报错|错误|失败)|无(?:报错|错误)|未(?:报错|失败)",
    re.IGNORECASE,
)
_FIXED_ERROR = re.compile(
    r"\b(?:fixed|resolved|addressed)\b[^.\n]{0,40}?\b(?:errors?|failures?|exceptions?|bugs?)\b"
    r"|(?:修复|解决)了?[^。\n]{0,20}?(?:报错|错误|失败|问题)",
    re.IGNORECASE,
)
_ERROR_WORDS = re.compile(
    r"\b(?:failed|fails|failing|failure|errors?|exception|still (?:broken|fail\w*|error\w*|not|doesn'?t|does not"
    r"|can'?t|cannot|crash\w*|hang\w*))\b|失败|报错|仍然|还是不行|出错",
    re.IGNORECASE,
)
_SUCCESS_WORDS = re.compile(
    r"\b(?:fixed|pass|passes|passed|passing|works|working|done|succeeded|successful(?:ly)?|resolved|completed)\b"
    r"|成功|通过|已修复|修好了|搞定|完成",
    re.IGNORECASE,
)


def turn_tool_failed(turn: EpisodeTurn) -> bool:
    """The turn's last tool call failed, by its flag or by an unmistakable failure in its output."""
    return turn.tool_call_count > 0 and (turn.tool_failed or bool(_TOOL_OUTPUT_FAILED.search(turn.last_tool_output)))


def heuristic_outcome_reward(turns: list[EpisodeTurn]) -> RewardScore:
    """An outcome reward from execution evidence, for episodes with no LLM and no feedback (offline use).

    −0.6 when the last tool call failed, or the final answer reports failure ("failed", "error", "still
    broken", 失败, 报错, 仍然; "no errors" and "fixed the error" do not count); +0.6 when the final tool call
    succeeded and the answer reports success ("fixed", "passes", "works", "done", 成功, 通过, 已修复);
    otherwise +0.2 when the episode ended with an answer and no error, else 0.
    """
    tool_turns = [t for t in turns if t.tool_call_count > 0]
    last_tool_failed = bool(tool_turns) and turn_tool_failed(tool_turns[-1])
    answers = [t.agent_text for t in turns if t.agent_text.strip()]
    final = _FIXED_ERROR.sub(" fixed ", _NEGATED_ERROR.sub(" ", answers[-1] if answers else ""))
    reports_error = bool(_ERROR_WORDS.search(final))
    reports_success = bool(_SUCCESS_WORDS.search(final))
    if last_tool_failed:
        r, reason = -0.6, "the last tool call failed"
    elif reports_error and not reports_success:
        r, reason = -0.6, "the final answer reports an error"
    elif reports_success and not reports_error and tool_turns:
        r, reason = 0.6, "the final tool call succeeded and the answer reports success"
    elif answers and not reports_error:
        r, reason = 0.2, "the episode ended with an answer and no error"
    else:
        r, reason = 0.0, "no clear outcome"
    return RewardScore(r, "outcome", _axes(goal=r), _label_for(r), reason)


# --------------------------------------------------------------------------- task summary and LLM score


def execution_outcome(turns: list[EpisodeTurn]) -> dict[str, Any]:
    """Aggregate tool evidence: total calls, last result (success|error|none), completed by tool (yes|no|unknown)."""
    tool_turns = [t for t in turns if t.tool_call_count > 0]
    if not tool_turns:
        return {"total_tool_calls": 0, "last_tool_result": "none", "task_completed_by_tool": "unknown"}
    failed = turn_tool_failed(tool_turns[-1])
    return {
        "total_tool_calls": sum(t.tool_call_count for t in tool_turns),
        "last_tool_result": "error" if failed else "success",
        "task_completed_by_tool": "no" if failed else "yes",
    }


_CUT = "\n…[truncated]…\n"


def _clamp_middle(text: str, limit: int) -> str:
    """Keep 55 % head and 45 % tail of ``text`` around a truncation mark."""
    if len(text) <= limit:
        return text
    room = max(0, limit - len(_CUT))
    head = int(room * 0.55)
    return text[:head] + _CUT + text[len(text) - (room - head) :]


def build_task_summary(turns: list[EpisodeTurn], mission: str, max_chars: int = 2000) -> str:
    """The TASK_SUMMARY the reward LLM grades: mission, numbered turns, latest exchange, execution outcome.

    The numbered ``[n] USER/TOOLS/AGENT`` lines are head/tail clamped so the mission and the
    EXECUTION_OUTCOME always survive within ``max_chars``.
    """
    first_user = next((t.user_text for t in turns if t.user_text.strip()), "")
    head = f"EPISODE_MISSION: {one_line(mission or first_user, 400) or '(unknown)'}"
    lines: list[str] = []
    for n, turn in enumerate(turns, 1):
        if turn.user_text.strip():
            lines.append(f"[{n}] USER: {one_line(turn.user_text, 300)}")
        if turn.tool_call_count > 0:
            status = "failed" if turn_tool_failed(turn) else "ok"
            output = one_line(turn.last_tool_output, 160)
            lines.append(
                f"[{n}] TOOLS: {turn.tool_call_count} call(s), last {status}" + (f": {output}" if output else "")
            )
        if turn.agent_text.strip():
            lines.append(f"[{n}] AGENT: {one_line(turn.agent_text, 400)}")
    last_user = next((t.user_text for t in reversed(turns) if t.user_text.strip()), "")
    last_agent = next((t.agent_text for t in reversed(turns) if t.agent_text.strip()), "")
    tail = "\n".join(
        [
            f"AGENT_STEPS: {len(turns)}",
            f"MOST_RECENT_USER: {one_line(last_user, 240) or '(none)'}",
            f"MOST_RECENT_AGENT: {one_line(last_agent, 480) or '(none)'}",
            f"EXECUTION_OUTCOME: {json.dumps(execution_outcome(turns))}",
        ]
    )
    body_budget = max_chars - len(head) - len(tail) - 2
    if body_budget < 80:
        return _clamp_middle(f"{head}\n{chr(10).join(lines)}\n{tail}", max_chars)
    return f"{head}\n{_clamp_middle(chr(10).join(lines) or '(no turns)', body_budget)}\n{tail}"


REWARD_R_HUMAN_PROMPT = """You grade one episode of a coding agent working for a user.
The input has HOST_AGENT_CONTEXT (who the agent is; do not project yourself onto it), TASK_SUMMARY (the
mission, the numbered turns, the most recent exchange and an authoritative EXECUTION_OUTCOME) and FEEDBACK
(explicit or implicit user signals; implicit ones are weaker).

Score three independent axes in [-1, 1]:
- goal_achievement: -1 wrong or harmful, 0 unclear or not executed, +1 the active goal is fully achieved.
- process_quality: -1 thrashing or broken, 0 reasonable, +1 clean and efficient.
- user_satisfaction: -1 correction or frustration, 0 no signal, +1 explicit acceptance.

Rules:
- Grade the latest active goal; later turns may revise the mission.
- If task_completed_by_tool is "no", goal_achievement must not exceed 0 unless a later turn shows recovery.
- Correction language ("不对", "wrong", "still failing") with no later acceptance means goal_achievement <= 0.
- If user_satisfaction is negative, goal_achievement must not exceed 0.3.
- Do not invent evidence.

Answer JSON only:
{"goal_achievement": number, "process_quality": number, "user_satisfaction": number,
 "label": "success" | "partial" | "failure" | "unknown", "reason": "one sentence"}"""


def corrected_without_acceptance(turns: list[EpisodeTurn], feedback: list[FeedbackItem]) -> bool:
    """The user corrected the agent (later turns or feedback) and never accepted a result afterwards."""
    signals = [fb.polarity for t in turns[1:] if (fb := classify_feedback(t.user_text)) is not None]
    signals += [item.polarity for item in sorted(feedback, key=lambda item: item.created_at)]
    if "negative" not in signals:
        return False
    last_negative = len(signals) - 1 - signals[::-1].index("negative")
    return "positive" not in signals[last_negative + 1 :]


def _feedback_block(feedback: list[FeedbackItem]) -> str:
    if not feedback:
        return "(none)"
    return "\n".join(
        f"- {item.channel} {item.polarity} magnitude={abs(item.magnitude):.2f}"
        + (f": {one_line(item.rationale, 240)}" if item.rationale.strip() else "")
        for item in sorted(feedback, key=lambda item: item.created_at)
    )


def _axis(answer: dict[str, Any], snake: str) -> float:
    camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), snake)
    value = answer.get(snake, answer.get(camel))
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LLMError(f"reward answer without a numeric {snake}")
    return _clamp(float(value))


def llm_r_human(
    turns: list[EpisodeTurn],
    feedback: list[FeedbackItem],
    llm: JsonLLM,
    *,
    host_context: str = "",
    mission: str = "",
    timeout_s: float = 60.0,
) -> RewardScore:
    """Ask the reward LLM for the three axes, enforce the consistency rules, combine them; raises LLMError."""
    user = "\n\n".join(
        [
            f"HOST_AGENT_CONTEXT:\n{host_context.strip() or '(not provided)'}",
            f"TASK_SUMMARY:\n{build_task_summary(turns, mission)}",
            f"FEEDBACK:\n{_feedback_block(feedback)}",
        ]
    )
    answer = llm.complete_json(REWARD_R_HUMAN_PROMPT, user, timeout_s=timeout_s)
    if not isinstance(answer, dict):
        raise LLMError("reward answer is not an object")
    goal, process, satisfaction = (_axis(answer, name) for name in AXES)
    if satisfaction < 0:
        goal = min(goal, 0.3)
    if corrected_without_acceptance(turns, feedback):
        goal = min(goal, 0.0)
    r_human = _clamp(0.45 * goal + 0.30 * process + 0.25 * satisfaction)
    label = answer.get("label")
    reason = answer.get("reason")
    return RewardScore(
        r_human,
        "llm",
        _axes(goal, process, satisfaction),
        label if label in LABELS else _label_for(r_human),
        reason.strip()[:300] if isinstance(reason, str) else "",
    )


def score_episode(
    turns: list[EpisodeTurn],
    feedback: list[FeedbackItem],
    llm: JsonLLM | None,
    *,
    host_context: str = "",
    llm_scoring: bool = True,
    timeout_s: float = 60.0,
    mission: str = "",
) -> RewardScore:
    """The episode's R_human: the LLM when configured and working, else feedback, else the outcome heuristic.

    LLM: rHuman = clamp(0.45·goal + 0.30·process + 0.25·satisfaction, −1, 1) after the consistency rules
    (negative satisfaction caps goal at 0.3; correction without later acceptance caps goal at 0).
    """
    if llm is not None and llm_scoring:
        try:
            return llm_r_human(turns, feedback, llm, host_context=host_context, mission=mission, timeout_s=timeout_s)
        except LLMError:
            pass
    if feedback:
        return heuristic_r_human(feedback)
    return heuristic_outcome_reward(turns)


# --------------------------------------------------------------------------- back-propagation


def _parse_time(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def effective_alpha(trace: Trace) -> float:
    """alpha from the reflection label (IRRELEVANT 0, RELATED/RELATED_DEFAULT .5, PIVOTAL 1), else alpha or .5."""
    label = (trace.reflection or "").strip().upper()
    if label in RELEVANCE_ALPHA:
        return RELEVANCE_ALPHA[label]
    return trace.alpha if trace.alpha > 0 else 0.5


def backpropagate(
    traces: list[IndexedTrace],
    r_human: float,
    *,
    gamma: float = 0.9,
    lambda_: float = 0.5,
    delta: float = 0.1,
    half_life_days: float = 30.0,
    now: datetime,
) -> list[TraceReward]:
    """Spread R_human over the episode's traces (returned oldest first).

    ``w_i = alpha_i·((1−λ) + λ·γ^(n−1−i))·(1 + δ·recovery_i)`` where recovery_i = 1 when a relevant step
    follows an irrelevant one; ``V_i = w_i/Σw·rHuman`` (all 0 when Σw = 0); the priority decays with age:
    ``max(V_i, 0)·0.5^(ageDays/halfLife)``.
    """
    epoch = datetime.min.replace(tzinfo=UTC)
    ordered = sorted(enumerate(traces), key=lambda pair: (_parse_time(pair[1].created_at) or epoch, pair[0]))
    alphas = [effective_alpha(trace) for _, trace in ordered]
    n = len(alphas)
    recovery = [1.0 if i > 0 and alpha > 0 and alphas[i - 1] == 0 else 0.0 for i, alpha in enumerate(alphas)]
    weights = [
        alpha * ((1 - lambda_) + lambda_ * gamma ** (n - 1 - i)) * (1 + delta * recovery[i])
        for i, alpha in enumerate(alphas)
    ]
    total = sum(weights)
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    rewards: list[TraceReward] = []
    for (_, trace), alpha, weight in zip(ordered, alphas, weights, strict=True):
        value = weight / total * r_human if total > 0 else 0.0
        created = _parse_time(trace.created_at) or now
        age_days = max(0.0, (now - created).total_seconds() / 86400)
        priority = max(value, 0.0) * 0.5 ** (age_days / half_life_days) if half_life_days > 0 else max(value, 0.0)
        rewards.append(TraceReward(trace.id, value, alpha, priority))
    return rewards
