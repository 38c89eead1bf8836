"""Episode boundaries and implicit feedback: how a new user message relates to the open episode.

Pure rules (reference §5.2): :func:`classify_relation` is the heuristic r1..r7 classifier,
:func:`classify_relation_llm` asks a model when the heuristic is not sure, and
:func:`classify_feedback` reads a short user reply as implicit feedback on the previous answer.
English and Chinese are handled by every rule; lengths of CJK text are counted in characters.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memmy.evolve.topics import content_keywords, enough_content, overlap, step_keywords
from memmy.llm.client import JsonLLM, LLMError

MERGE_WINDOW = timedelta(hours=2)
IDLE_GAP = timedelta(minutes=30)
EPISODE_IDLE_TIMEOUT = timedelta(hours=2)

STRONG_HEURISTIC = 0.85
ARBITRATION_THRESHOLD = 0.8
RELATIONS = ("revision", "follow_up", "new_task", "unknown")
GENERIC_TAGS = frozenset({"trace", "turn", "memory", "openclaw", "codex", "hermes"})

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_WORD = re.compile(r"\w+")


def has_cjk(text: str) -> bool:
    """True when ``text`` contains Chinese, Japanese or Korean characters."""
    return _CJK.search(text) is not None


def word_count(text: str) -> int:
    """Words of a mixed-language text: whitespace words plus one word per two CJK characters."""
    cjk = len(_CJK.findall(text))
    return len(_WORD.findall(_CJK.sub(" ", text))) + math.ceil(cjk / 2)


def one_line(text: str, limit: int) -> str:
    """Collapse whitespace and cut to ``limit`` characters with an ellipsis."""
    collapsed = " ".join(text.split())
    return collapsed if len(collapsed) <= limit else collapsed[: max(0, limit - 1)].rstrip() + "…"


# --------------------------------------------------------------------------- turn relation


@dataclass(frozen=True)
class TurnRelation:
    """How a new user message relates to the previous episode, with the rule that decided it."""

    relation: str  # revision | follow_up | new_task | unknown
    confidence: float
    reason: str
    rule: str


@dataclass
class EpisodeContext:
    """What the classifier knows about the open (or latest) episode."""

    first_user_text: str
    latest_user_text: str
    last_assistant_text: str
    tags: list[str]
    last_activity_at: datetime | None  # aware UTC
    evidence_text: str = ""  # the open task's other turns: requests, answers, commands, files, errors
    similarity: float | None = None  # cosine of the new message to the task's requests (None: not measured)
    open_failure: bool = False  # the task's latest step failed (its last tool call), and nothing fixed it yet


_R1_REVISION = re.compile(
    r"^\s*(?:不对|错了|重做|改一下|再来一次|重新|而不是)"
    r"|^\s*(?:wrong|incorrect|redo|try again)\b"
    r"|^\s*not (?:what|quite|right|correct)\b"
    r"|^\s*no[,.]?\s+(?:that'?s\s+)?(?:wrong|incorrect|not right)",
    re.IGNORECASE,
)
_R3_PRONOUN = re.compile(r"^\s*[那这它其还哪啥]")
_R4_FOLLOW = re.compile(
    r"再帮?我|下一个|另一个类似"
    r"|(?:这本|这些|这个|这种|这类|上述|前面|刚才|刚刚).{0,20}(?:相似|类似|相关|推荐|还有|其他|别的|哪些|什么)"
    r"|(?:相似|类似|相关).{0,20}(?:这本|这些|这个|这种|这类|上述|前面|刚才|刚刚)"
    r"|(?:还有|有没有|有什么).{0,20}(?:其他|别的|类似|相似|相关|推荐)"
    r"|\b(?:next|then|also|these|those|this|that|similar|related)\b"
    r"|\banother (?:similar|one)\b|\bmore of (?:that|this)\b",
    re.IGNORECASE,
)
_TOPIC = r"(?:话题|问题|任务|主题|场景)"
_R5_NEW_TASK = re.compile(
    rf"换个{_TOPIC}|换个[^\s。,，！!?？]{{1,6}}{_TOPIC}|换下一?个|^\s*下一?个\S{{0,5}}?{_TOPIC}"
    r"|现在(?:帮我)?处理另一个|先放下|忘掉之前"
    r"|\bnew (?:task|question|topic|subject)\b|\bforget (?:that|about it)\b"
    r"|\bchange (?:of )?(?:topic|subject|task)\b|\bmoving on\b|\bnext (?:task|topic|question)\b",
    re.IGNORECASE,
)
_CUE = re.compile(
    r"^\s*(?:next|now|ok(?:ay)?|alright|another thing|one more thing|separately|moving on|switching to"
    r"|on another note|unrelated)\b[\s,.:;!-]*(?:let'?s|we|can you|could you|please|i need|i want)?"
    r"|^\s*(?:另外|接下来|还有一件事|现在)[，,：:\s]?",
    re.IGNORECASE,
)
_STRONG_CUE = re.compile(
    r"^\s*(?:next[,:]|now let'?s|another thing|one more thing|separately|moving on|switching to|on another note"
    r"|unrelated)|^\s*(?:另外|接下来|还有一件事)",
    re.IGNORECASE,
)
_CONTINUES = re.compile(  # the message says it continues: "also ...", "and then ...", "再帮我写一个类似的", "那..."
    r"^\s*(?:also|and|then|plus|as well)\b|\b(?:similar|related|another one|more of (?:that|this)|same (?:for|with))\b"
    r"|^\s*(?:再|还有|顺便|然后|同样)|类似|相似|相关",
    re.IGNORECASE,
)
SHIFT_OVERLAP = 0.3  # a message sharing less than this share of its keywords with the task may start a new one
SHIFT_SIMILARITY = 0.5  # ... when its meaning is also this far from the task's requests (English MiniLM cosine)
_TIE_PRIORITY = {
    "r5_new_phrase": 6,
    "r8_cue": 5,
    "r9_topic_shift": 4,
    "r1_negation_keyword": 3,
    "r2_quotes_prev": 2,
    "r3_pronoun_ref": 1,
}


def _quotes_previous_reply(text: str, previous_reply: str) -> bool:
    """r2: the new text repeats an 8-word window (> 24 chars) of the previous assistant reply."""
    words = [w for w in previous_reply.split() if len(w) >= 3]
    if len(previous_reply.strip()) < 20 or len(words) < 8:
        return False
    lower = text.lower()
    for start in range(len(words) - 7):
        window = " ".join(words[start : start + 8]).lower()
        if len(window) > 24 and window in lower:
            return True
    return False


def _domain_shift(text: str, tags: list[str]) -> bool:
    """r7: the previous episode has meaningful tags and none of them appears in the text."""
    meaningful = [t.strip().lower() for t in tags if len(t.strip()) >= 3 and t.strip().lower() not in GENERIC_TAGS]
    if not meaningful:
        return False
    lower = text.lower()
    return not any(tag in lower for tag in meaningful)


def _gap(prev: EpisodeContext, now: datetime) -> timedelta:
    if prev.last_activity_at is None:
        return timedelta(0)
    return max(timedelta(0), now - prev.last_activity_at)


def _rules(text: str, prev: EpisodeContext, gap: timedelta) -> list[TurnRelation]:
    """Every heuristic rule that fires, strongest first (ties: r5 > r1 > r2 > r3)."""
    fired: list[TurnRelation] = []
    if _R1_REVISION.search(text):
        fired.append(TurnRelation("revision", 0.85, "negation keyword at start of turn", "r1_negation_keyword"))
    if _quotes_previous_reply(text, prev.last_assistant_text):
        fired.append(TurnRelation("revision", 0.75, "quotes the previous assistant reply", "r2_quotes_prev"))
    if len(text) <= 60 and _R3_PRONOUN.search(text):
        fired.append(TurnRelation("follow_up", 0.85, "short message with a pronoun reference", "r3_pronoun_ref"))
    if _R4_FOLLOW.search(text):
        fired.append(TurnRelation("follow_up", 0.8, "follow-up phrase", "r4_follow_phrase"))
    if _R5_NEW_TASK.search(text):
        fired.append(TurnRelation("new_task", 0.85, "new-task phrase", "r5_new_phrase"))
    if gap > IDLE_GAP:
        fired.append(TurnRelation("new_task", 0.6, "more than 30 min since the previous turn", "r6_time_gap"))
    if _domain_shift(text, prev.tags):
        fired.append(TurnRelation("new_task", 0.55, "no tag of the previous episode appears", "r7_domain_shift"))
    topic = _topic_rule(text, prev, gap, fired)
    if topic is not None:
        fired.append(topic)
    fired.sort(key=lambda r: (-r.confidence, -_TIE_PRIORITY.get(r.rule, 0)))
    return fired


def _context_keywords(prev: EpisodeContext) -> set[str]:
    return content_keywords(
        " ".join(
            [prev.first_user_text, prev.latest_user_text, prev.last_assistant_text, prev.evidence_text, *prev.tags]
        )
    )


def _topic_rule(text: str, prev: EpisodeContext, gap: timedelta, fired: list[TurnRelation]) -> TurnRelation | None:
    """Topic evidence: an explicit cue, or a shift in content words and meaning (or an idle gap).

    A revision, a short reply that is feedback ("thanks, works"), a pronoun reference and a message with
    almost no content words ("look into why first") stay in the task. Otherwise a cue ("next,", "now let's",
    "另外", "接下来") or a message that shares under 30 % of its keywords with the task's turns, whose meaning
    (when measured, English only) is also far from the task's requests, starts a new task; so does an idle gap
    over 30 min unless the message clearly continues the task.
    """
    if any(r.relation == "revision" or r.rule == "r3_pronoun_ref" for r in fired) or _CONTINUES.search(text):
        return None
    new = content_keywords(text)
    share = overlap(new, _context_keywords(prev))
    cue = _STRONG_CUE.search(text) is not None or (_CUE.search(text) is not None and share < 0.5)
    if cue and share < 0.6:
        return TurnRelation("new_task", 0.85, f"explicit new-task cue, keyword overlap {share:.2f}", "r8_cue")
    verdict = classify_feedback(text) if word_count(text) <= 8 else None
    if not enough_content(new):
        return None
    # a short reply that is feedback stays; one shaped like guidance ("把 parquet 导出改成按天分区") that names
    # enough of its own and nothing of the task is a request for something else
    if verdict is not None and (verdict.shape != "guidance" or share > 0):
        return None
    if prev.open_failure and gap <= IDLE_GAP:
        # Right after a failed step the next message is about getting it through, often in the user's own words
        # ("调大内存后重新构建", "raise the memory limit and retry") that share little with the failed request: a
        # topic shift is not read from words there. A cue still starts a new task, and once the step's tool calls
        # are known, a step about other files, commands and errors is split off (``evidence_shift``).
        return None
    similar = prev.similarity is not None and prev.similarity >= SHIFT_SIMILARITY
    distant = prev.similarity is not None and prev.similarity < SHIFT_SIMILARITY - 0.2
    if (share < SHIFT_OVERLAP and not similar) or (share < 0.45 and distant):
        reason = f"topic shift: keyword overlap {share:.2f}"
        if prev.similarity is not None:
            reason += f", similarity {prev.similarity:.2f}"
        return TurnRelation("new_task", 0.82, reason, "r9_topic_shift")
    if gap > IDLE_GAP and share < 0.5:
        return TurnRelation("new_task", 0.8, f"idle gap and keyword overlap {share:.2f}", "r6_idle_shift")
    return None


EVIDENCE_SHIFT_MIN = 3  # content words a step's tool calls and the open task must each name for a comparison


def evidence_shift(text: str, tool_calls: list[dict[str, Any]], prev: EpisodeContext) -> TurnRelation | None:
    """At ``turn.complete``: does the step just done belong to another task than the open one?

    Routing at turn start only sees the request; a vague one ("do the other one", "继续") stays in the task.
    Once the step's tool calls are known, a step whose files, command arguments and error text share nothing
    with the open task's turns (their requests, commands, files and errors), and whose request shares under
    30 % of its words with them, starts a new task. A revision, a pronoun reference, a message that says it
    continues and a step with too little evidence of its own (or a task with none yet) stay. Pure rules, well
    under a millisecond: safe on the hook path.
    """
    if _R1_REVISION.search(text) or _CONTINUES.search(text) or (len(text) <= 60 and _R3_PRONOUN.search(text)):
        return None
    step = step_keywords(tool_calls)
    task = content_keywords(" ".join([prev.first_user_text, prev.evidence_text, *prev.tags]))
    if len(step) < EVIDENCE_SHIFT_MIN or len(task) < EVIDENCE_SHIFT_MIN or step & task:
        return None
    share = overlap(content_keywords(text), task)
    if share >= SHIFT_OVERLAP:
        return None
    reason = f"the step's files, commands and errors share nothing with the task (request overlap {share:.2f})"
    return TurnRelation("new_task", 0.8, reason, "r10_evidence_shift")


def _safe(decision: TurnRelation) -> TurnRelation:
    """A weak new_task (< 0.8) is not trusted: it becomes follow_up 0.55."""
    if decision.relation != "new_task" or decision.confidence >= ARBITRATION_THRESHOLD:
        return decision
    reason = f"weak new-task signal ({decision.rule}); defaulting to follow_up"
    return TurnRelation("follow_up", 0.55, reason, "weak_new_task_fallback")


_DEFAULT = TurnRelation("follow_up", 0.5, "no classifier signal; defaulting to follow_up", "default_follow_up")


def _preliminary(text: str, prev: EpisodeContext | None, now: datetime) -> TurnRelation | None:
    """The decisions that need no rules: empty text, no previous episode, idle timeout."""
    if not text:
        return TurnRelation("unknown", 0.0, "empty message", "empty")
    if prev is None or not (prev.first_user_text.strip() or prev.latest_user_text.strip()):
        return TurnRelation("new_task", 0.75, "no previous episode", "bootstrap")
    if _gap(prev, now) > EPISODE_IDLE_TIMEOUT:
        return TurnRelation("new_task", 0.9, "idle gap exceeds 2 h", "idle_timeout")
    return None


def classify_relation(text: str, prev: EpisodeContext | None, now: datetime) -> TurnRelation:
    """Heuristic turn relation (r1..r7): revision, follow_up, new_task or unknown (empty text)."""
    text = text.strip()
    early = _preliminary(text, prev, now)
    if early is not None or prev is None:
        return early or _DEFAULT
    fired = _rules(text, prev, _gap(prev, now))
    return _safe(fired[0]) if fired else _DEFAULT


RELATION_PROMPT = """You decide how a NEW user message relates to the conversation that came before it.
Answer JSON only: {"relation": "revision" | "follow_up" | "new_task" | "unknown", "confidence": 0..1,
"reason": "<= 80 characters"}

- revision: the user corrects or rejects the previous answer on the same task ("不对", "wrong", "not quite"),
  quotes its details to fix them, or adds a constraint that only makes sense as a correction.
- follow_up: the same topic, project or goal continues: a next step, a clarification, a result or error report,
  another aspect or tool for the same goal, a short acknowledgement, or a pronoun/reference to what was just
  discussed (那, 这, 它, 其中, 哪些, that, those, what about ...).
- new_task: a clearly different domain with no shared entity, project or theme (tech -> cooking, work -> holiday).
- unknown: truly undecidable.

Principles: follow_up is the default; when in doubt choose follow_up with a low confidence. Short messages
(under about 30 characters) are follow_up unless they name an unrelated domain. Different parts of the same
system are follow_up.

Examples:
- "配置Nginx" → "加gzip压缩" = follow_up
- "部署服务器" → "那数据库怎么配" = follow_up
- "set up CI for the repo" → "also cache the pip downloads" = follow_up
- "配置Nginx" → "做红烧肉" = new_task
- "不对，应该用443端口" = revision
- "wrong, use port 443 instead" = revision"""

RELATION_ARBITRATION_PROMPT = """A first pass said this message may start an unrelated topic, but it was not sure.
Decide whether it is truly unrelated to the current conversation, or a sub-question / next step of it.
Shared project, entity or theme, or a tool, method or detail of the current task = follow_up.
A completely different domain with no connection = new_task. When in doubt choose follow_up.
Answer JSON only: {"relation": "follow_up" | "new_task", "reason": "..."}"""


def _relation_context(prev: EpisodeContext) -> str:
    return "\n\n".join(
        [
            f"[Task topic]\n{prev.first_user_text[:300]}",
            f"[Latest user message]\n{prev.latest_user_text[:700]}",
            f"[Last assistant reply]\n{prev.last_assistant_text[:2000]}",
        ]
    )


def _relation_user_prompt(text: str, prev: EpisodeContext) -> str:
    parts = [_relation_context(prev), f"[New user message]\n{text[:800]}"]
    if len(text) < 30 or _R3_PRONOUN.search(text):
        parts.append(
            "NOTE: the new message is short or referential; it is follow_up unless it names an unrelated domain."
        )
    return "\n\n".join(parts)


def _parse_relation(answer: Any) -> TurnRelation:
    if not isinstance(answer, dict):
        raise LLMError("relation answer is not an object")
    relation, confidence, reason = answer.get("relation"), answer.get("confidence"), answer.get("reason", "")
    if relation not in RELATIONS:
        raise LLMError(f"relation out of vocabulary: {relation!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not math.isfinite(confidence):
        raise LLMError("relation confidence must be a number")
    return TurnRelation(str(relation), min(1.0, max(0.0, float(confidence))), str(reason)[:120], "llm")


def classify_relation_llm(
    text: str, prev: EpisodeContext | None, now: datetime, llm: JsonLLM | None, timeout_s: float = 6.0
) -> TurnRelation:
    """The turn relation with a model's help: a strong heuristic (>= .85) wins, else the model decides.

    A model ``new_task`` below 0.8 is double-checked by an arbitration prompt; if that says anything but
    ``new_task`` the answer is follow_up 0.55. No model, a failed call or a malformed answer give the
    heuristic result of :func:`classify_relation` unchanged.
    """
    text = text.strip()
    heuristic = classify_relation(text, prev, now)
    early = _preliminary(text, prev, now)
    if early is not None or prev is None or llm is None:
        return heuristic
    fired = _rules(text, prev, _gap(prev, now))
    if fired and fired[0].confidence >= STRONG_HEURISTIC:
        return fired[0]
    try:
        result = _parse_relation(
            llm.complete_json(RELATION_PROMPT, _relation_user_prompt(text, prev), timeout_s=timeout_s)
        )
        if result.relation != "new_task" or result.confidence >= ARBITRATION_THRESHOLD:
            return result
        arbitration_user = f"{_relation_context(prev)}\n\n[New user message]\n{text[:800]}"
        verdict = llm.complete_json(RELATION_ARBITRATION_PROMPT, arbitration_user, timeout_s=timeout_s)
        relation = verdict.get("relation") if isinstance(verdict, dict) else None
        if relation not in ("follow_up", "new_task"):
            raise LLMError(f"arbitration relation out of vocabulary: {relation!r}")
    except LLMError:
        return heuristic
    if relation == "new_task":  # confirmed by the second look: as good as a confident first answer
        return TurnRelation("new_task", max(result.confidence, ARBITRATION_THRESHOLD), result.reason, "llm_arbitration")
    return TurnRelation("follow_up", 0.55, "arbitration overrode a low-confidence new_task", "llm_arbitration")


# --------------------------------------------------------------------------- implicit feedback


@dataclass(frozen=True)
class ImplicitFeedback:
    """A user reply read as feedback on the previous answer."""

    polarity: str  # positive | negative | neutral
    magnitude: float  # signed, e.g. +0.8 / -0.9
    confidence: float
    shape: str  # positive | negative | verifier | guidance
    rationale: str


_VERIFIER = re.compile(r"本任务评为(?:反例|正例)|\bverifi(?:er|cation) feedback\b", re.IGNORECASE)
_VERIFIER_R = re.compile(r"\br\s*(>=|<=|≥|≤|>|<|=)\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_VERIFIER_R_START = re.compile(r"^(?:(?:reward|score|verifier|评分|得分)\s*[:：]?\s*)?r\s*(?:>=|<=|≥|≤|>|<|=)", re.I)
_VERIFIER_POSITIVE = re.compile(r"正例|\bpass(?:ed)?\b|\bsuccess(?:ful)?\b", re.IGNORECASE)
_NEG_START = re.compile(
    r"^(?:no(?:pe)?\b(?![- ](?:need|problem|worries|rush))|wrong\b|incorrect\b|not (?:right|correct|quite|what i)\b"
    r"|(?:that|this|it)(?:'s| is) (?:wrong|incorrect|not (?:right|correct|working|what))"
    r"|(?:it |that )?(?:still )?(?:doesn'?t|does not|didn'?t|did not) work|still (?:broken|fail|wrong|not)"
    r"|不对|错了|不是这样|不是的|不是这个|不行|你错了|写错了|做错了|理解错了|还是不行|还是报错|还是错|没用|没有用)",
    re.IGNORECASE,
)
_NEG_ANY = re.compile(
    r"\b(?:wrong|incorrect|not right|not correct|doesn'?t work|didn'?t work|still (?:broken|fails|failing))\b"
    r"|不对|错了|不行|没用|还是报错|还是错",
    re.IGNORECASE,
)
_POS_START = re.compile(
    r"^(?:perfect|great|awesome|excellent|exactly|nice (?:work|job)|well done|good job|thanks?\b|thank you|thx\b"
    r"|lgtm\b|looks good|(?:it |that )?works\b|fixed\b|that'?s (?:correct|right)\b"
    r"|好的|太棒了|太好了|不错|完美|搞定|对的|正确|没错|可以了|行了|谢谢|感谢|多谢|成功了)",
    re.IGNORECASE,
)
_POS_ACK = re.compile(
    r"^(?:yes|yep|yeah|ok|okay|sure|cool|good|correct|right|好|行|嗯|收到)[\s.!~。！]*$", re.IGNORECASE
)
_POS_ANY = re.compile(
    r"\b(?:perfect|great|awesome|excellent|works|worked|fixed|thanks?|thank you|lgtm)\b"
    r"|太棒了|不错|完美|搞定|对的|正确|没错|可以了|成功了|谢谢",
    re.IGNORECASE,
)
_GUIDE_START = re.compile(
    r"^(?:(?:you |we )?should(?:n'?t)?\b|avoid\b|don'?t\b|do not\b|never\b|next time\b|instead\b|please don'?t\b"
    r"|use\b[^.?!？。]{1,40}\binstead\b"
    r"|应该|不应该|不要|请不要|下次|以后|别(?!的|人|处)|改成|换成)",
    re.IGNORECASE,
)
_GUIDE_ANY = re.compile(r"\b(?:instead|next time|should(?:n'?t)? have)\b|应该|不要|下次|别再|改成|换成", re.IGNORECASE)
_REQUEST_START = re.compile(
    r"^(?:(?:please|pls|can you|could you|let'?s|now|add|write|create|make|implement|run|build|update|remove"
    r"|delete|fix|debug|refactor|change|rename|test|check|install|deploy|explain|show|tell|use|try|correct"
    r"|generate|convert|translate|find|search|look|open|read|edit|modify|move|improve|optimi[sz]e|review)\b"
    r"|请|帮我|帮忙|麻烦|给我|你能|能不能)",
    re.IGNORECASE,
)
_QUESTION_END = re.compile(r"[?？]\s*$")
SHORT_REPLY_WORDS = 8


def _verifier(text: str) -> ImplicitFeedback | None:
    r_match = _VERIFIER_R.search(text)
    r_anchored = r_match is not None and (
        _VERIFIER_R_START.search(text) is not None or word_count(text) <= SHORT_REPLY_WORDS
    )
    if not _VERIFIER.search(text) and not r_anchored:
        return None
    positive = bool(_VERIFIER_POSITIVE.search(text))
    if r_match is not None and "反例" not in text:
        op, value = r_match.group(1), float(r_match.group(2))
        positive = positive or (op in (">=", "≥", ">", "=") and value >= 0.5)
    sign = 1.0 if positive else -1.0
    return ImplicitFeedback("positive" if positive else "negative", sign, 0.95, "verifier", text[:240])


def _feedback(kind: str, text: str) -> ImplicitFeedback:
    magnitude, confidence = {"positive": (0.8, 0.85), "negative": (-0.9, 0.85), "guidance": (-0.6, 0.65)}[kind]
    polarity = "positive" if magnitude > 0 else "negative"
    return ImplicitFeedback(polarity, magnitude, confidence, kind, text[:240])


def classify_feedback(text: str, min_confidence: float = 0.6) -> ImplicitFeedback | None:
    """Read a user reply as implicit feedback on the previous answer, or None when it is not feedback.

    Rules are anchored so that a normal new request is not mistaken for feedback: the feedback words must
    open the reply ("不对，…", "thanks, …", "don't …"), or the reply must be short (<= 8 words, CJK counted
    as two characters a word), not a question and not itself a request ("please add a test for X").
    Verifier text (``本任务评为正例/反例``, ``r >= 0.5``) is ±1 at 0.95; positive +0.8 and negative −0.9 at
    0.85; guidance words (should/avoid/don't/next time/instead, 应该/不要/下次/别/改成) −0.6 at 0.65.
    """
    stripped = text.strip()
    if not stripped:
        return None
    lower = stripped.lower()
    found = _verifier(stripped)
    if found is None:
        if _NEG_START.search(lower):
            found = _feedback("negative", stripped)
        elif _POS_START.search(lower) or _POS_ACK.search(lower):
            found = _feedback("positive", stripped)
        elif _GUIDE_START.search(lower) and not _QUESTION_END.search(lower):
            found = _feedback("guidance", stripped)
        elif (
            word_count(lower) <= SHORT_REPLY_WORDS
            and not _QUESTION_END.search(lower)
            and not _REQUEST_START.search(lower)
        ):
            if _NEG_ANY.search(lower):
                found = _feedback("negative", stripped)
            elif _POS_ANY.search(lower):
                found = _feedback("positive", stripped)
            elif _GUIDE_ANY.search(lower):
                found = _feedback("guidance", stripped)
    return found if found is not None and found.confidence >= min_confidence else None


def is_guidance(text: str) -> bool:
    """An implicit reply that says what to do or avoid ("don't use npm", "下次用 uv")."""
    verdict = classify_feedback(text)
    return verdict is not None and verdict.shape == "guidance"
