"""Text helpers shared by the evolution rules: language detection, salient words, tool steps, model fields.

English and Chinese both work: CJK text is compared by character bigrams, Latin text by content words.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from memmy.evolve.model import IndexedTrace, Vector
from memmy.kinds.trace import Trace

CJK_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+\-/]*|[\u3400-\u9fff\uf900-\ufaff]+")
_STOP_WORDS = frozenset(
    "a an the and or but to of in on at by for with from into about as is are was were be been being it its "
    "this that these those i me my we our you your he she they them please pls can could would will shall "
    "should may might must do does did done doing have has had how what why when where which who help "
    "hey hi hello thanks thank just again also then there here some any need needs want wants get got let "
    "make sure ok okay so if no not up us now still".split()
)
_CONNECTORS = frozenset("in on for with of the to from after when before under".split())
_CJK_STOP_CHARS = frozenset("的了吗呢吧啊呀嘛我你您他她请帮们么")
_CJK_STOP_BIGRAMS = frozenset({"这个", "那个", "一下", "一个", "可以", "怎么", "什么", "为什", "能不", "不能够"})
_CJK_LEAD = re.compile(r"^(?:请你?|麻烦你?|帮我|帮忙|能不能|可不可以|你能|能否|我想|我要)+")
_SUCCESS_RE = re.compile(
    r"\b(?:pass(?:ed|es|ing)?|fixed|succeed(?:ed|s)?|success(?:ful(?:ly)?)?|resolved|works?|working|green|"
    r"ok|done|completed?|installed)\b|成功|通过|已修复|修复了|解决了|已解决|正常|完成|搞定",
    re.IGNORECASE,
)
_FAIL_RE = re.compile(r"\b(?:failed|failure|fails?|error|errors|exception|traceback)\b|失败|报错|错误|异常", re.I)
_ZERO_FAIL_RE = re.compile(r"\b0 (?:failed|errors?)\b", re.IGNORECASE)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?;])\s+(?=[A-Z\"'(\[`*])|(?<=[。！？；])|\n+")
_INPUT_KEYS = ("command", "cmd", "script", "query", "pattern", "path", "file_path", "filePath", "file", "url", "name")
_EXC_LINE = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b:?[^\n]*")
_ERR_LINE = re.compile(r"\b(?:error|fatal|failed|cannot|not found|denied)\b|失败|报错|错误|异常|找不到", re.I)
REFLECTION_LABELS = frozenset({"IRRELEVANT", "RELATED", "PIVOTAL", "RELATED_DEFAULT"})


def is_chinese(text: str) -> bool:
    """True when CJK characters make up at least 30 % of the letters: pick Chinese labels."""
    cjk = len(CJK_RE.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return cjk > 0 and cjk >= 0.3 * (cjk + latin)


def clip(text: str, limit: int) -> str:
    """Collapse whitespace and cut at ``limit`` characters with an ellipsis."""
    collapsed = " ".join(str(text).split())
    return collapsed if len(collapsed) <= limit else collapsed[: max(1, limit - 1)].rstrip() + "…"


_CUE_LEAD = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|alright|so)\b[\s,.!]*)?(?:next|now(?: let'?s)?|another thing|one more thing|separately"
    r"|moving on|switching to|on another note|unrelated)\b[\s,.:;!-]*"
    r"|^\s*(?:另外|接下来|还有一件事|下一个|现在)[，,：:\s]*",
    re.IGNORECASE,
)


def clip_words(text: str, limit: int) -> str:
    """Collapse whitespace and cut at the last whole word within ``limit`` characters (with an ellipsis)."""
    collapsed = " ".join(str(text).split())
    if len(collapsed) <= limit:
        return collapsed
    cut = collapsed[: max(1, limit - 1)]
    if " " in cut and not CJK_RE.search(cut[-1]):
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:-") + "…"


def task_text(request: str, limit: int = 100) -> str:
    """The task a request states, readable: its first line and sentence without a lead cue ("Next,", "OK, moving
    on.", "接下来，"), cut at a whole word, first letter upper-case ("Make a production build of the storefront")."""
    line = next((ln for ln in (request or "").splitlines() if ln.strip()), "")
    line = _CUE_LEAD.sub("", line).strip()
    sentence = first_sentence(line, 10_000) or line
    text = clip_words(sentence.rstrip(".。!！"), limit)
    return text[:1].upper() + text[1:]


def first_sentence(text: str, limit: int = 120) -> str:
    """The first non-empty sentence of ``text`` (English or Chinese punctuation), clipped."""
    for part in _SENTENCE_SPLIT.split(text or ""):
        part = part.strip(" -*#>\t")
        if len(part) >= 2:
            return clip(part, limit)
    return ""


def salient_tokens(text: str) -> set[str]:
    """Lower-cased content words (>= 2 chars, no stop words) plus CJK bigrams without function characters."""
    found: set[str] = set()
    for match in _TOKEN_RE.finditer(text or ""):
        token = match.group(0)
        if CJK_RE.match(token):
            run = _CJK_LEAD.sub("", token)
            found.update(bg for bg in _bigrams(run) if not _stop_bigram(bg))
        else:
            word = token.lower().strip(".-/+")
            if len(word) >= 2 and word not in _STOP_WORDS:
                found.add(word)
    return found


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _stop_bigram(bigram: str) -> bool:
    return bigram in _CJK_STOP_BIGRAMS or any(ch in _CJK_STOP_CHARS for ch in bigram)


def request_pattern(texts: list[str], best_text: str, limit: int = 80) -> str:
    """The shared request phrase: words/CJK bigrams of ``best_text`` that most of ``texts`` also contain.

    A token is shared when it occurs in at least half of the texts (and in two, when there are several);
    kept tokens are returned in their original order, with single connector words between them kept.
    """
    need = 1 if len(texts) <= 1 else max(2, math.ceil(len(texts) / 2))
    frequency: Counter[str] = Counter()
    for text in texts:
        frequency.update(salient_tokens(text))
    pieces: list[str] = []
    pending_connector = ""
    for match in _TOKEN_RE.finditer(best_text or ""):
        token = match.group(0)
        if CJK_RE.match(token):
            pieces.extend(_shared_cjk(_CJK_LEAD.sub("", token), frequency, need))
            pending_connector = ""
            continue
        word = token.lower().strip(".-/+")
        if len(word) >= 2 and word not in _STOP_WORDS and frequency[word] >= need:
            if pending_connector and pieces:
                pieces.append(pending_connector)
            pieces.append(token.strip(".,;:"))
            pending_connector = ""
        elif pieces and word in _CONNECTORS and not pending_connector:
            pending_connector = word
        else:
            pending_connector = ""
        if len(pieces) >= 14:
            break
    return clip(" ".join(pieces), limit)


def _shared_cjk(run: str, frequency: Counter[str], need: int) -> list[str]:
    covered = [False] * len(run)
    for i, bigram in enumerate(_bigrams(run)):
        if not _stop_bigram(bigram) and frequency[bigram] >= need:
            covered[i] = covered[i + 1] = True
    spans: list[str] = []
    current = ""
    for ch, keep in zip(run, covered, strict=True):
        if keep:
            current += ch
        elif current:
            spans.append(current)
            current = ""
    if current:
        spans.append(current)
    return [s for s in spans if len(s) >= 2]


def as_text(value: Any) -> str:
    """A model field as a stripped string: lists are joined by lines, other non-strings give ``""``."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "\n".join(v.strip() for v in value if v.strip())
    return ""


def as_str_list(value: Any, limit: int = 12) -> list[str]:
    """A model list field as non-empty strings (a bare string becomes one item); other shapes give ``[]``."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [clip(v, 300) for v in value if isinstance(v, str) and v.strip()][:limit]


def as_unit(value: Any, default: float) -> float:
    """A model number clamped to [0, 1]; ``default`` when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(float(value)):
        return default
    return clamp01(float(value))


def clamp01(value: float) -> float:
    """Clamp to [0, 1]."""
    return max(0.0, min(1.0, value))


#: A cosine of the configured model as all-MiniLM-L6-v2 would score the same pair (``memmy.embed.scale``): the
#: thresholds of evolution are MiniLM cosines.
CosineScale = Callable[[float], float]


def same_scale(cosine: float) -> float:
    """The identity :data:`CosineScale` (all-MiniLM-L6-v2 itself, and any model without measured anchors)."""
    return cosine


def cosine(a: Vector | None, b: Vector | None) -> float:
    """Dot product of two unit vectors; 0 when either is missing or the shapes differ."""
    if a is None or b is None or a.shape != b.shape:
        return 0.0
    return float(np.dot(a, b))


def centroid(vectors: list[Vector]) -> Vector | None:
    """Unit-length mean of ``vectors``; None when there are none or they cancel out."""
    if not vectors:
        return None
    mean = np.mean(np.stack(vectors).astype(np.float32), axis=0)
    norm = float(np.linalg.norm(mean))
    return None if norm == 0.0 else (mean / norm).astype(np.float32)


def short_input(value: Any, limit: int = 120) -> str:
    """The telling part of a tool input (command, query, path ...) on one line."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                return short_input(json.loads(text), limit)
            except json.JSONDecodeError:
                pass
        return clip(text.replace("`", "'"), limit)
    if isinstance(value, dict):
        for key in _INPUT_KEYS:
            if isinstance(value.get(key), str) and value[key].strip():
                return clip(value[key].replace("`", "'"), limit)
        strings = [v for v in value.values() if isinstance(v, str) and v.strip()]
        if strings:
            return clip(strings[0].replace("`", "'"), limit)
    if value is None or value == {} or value == []:
        return ""
    return clip(json.dumps(value, ensure_ascii=False, default=str), limit)


def call_failed(call: Mapping[str, Any]) -> bool:
    """A normalised tool call failed: ``success`` is False or it carries an error."""
    return call.get("success") is False or bool(call.get("error"))


def tool_step(call: Mapping[str, Any]) -> str:
    """``name: short input`` for one tool call."""
    short = short_input(call.get("input"))
    name = str(call.get("name") or "tool")
    return f"{name}: {short}" if short else name


def tool_steps(trace: Trace, limit: int = 5) -> list[str]:
    """Distinct consecutive tool steps of a trace (memmy's own recall tools skipped), at most ``limit``."""
    steps: list[str] = []
    for call in trace.tool_calls:
        if str(call.get("name") or "").startswith("memmy_"):
            continue
        step = tool_step(call)
        if not steps or steps[-1] != step:
            steps.append(step)
    return steps[:limit]


def trace_succeeded(trace: Trace) -> bool:
    """Positive value, a succeeded turn and no failed tool call."""
    return trace.value > 0 and trace.status == "succeeded" and not any(call_failed(c) for c in trace.tool_calls)


def success_evidence(trace: Trace) -> str:
    """The line of a tool output or answer that says the work passed/was fixed; ``""`` when none does."""
    zh = is_chinese(trace.user_text + trace.agent_text)
    for call in reversed(trace.tool_calls):
        if call_failed(call):
            continue
        for line in reversed(str(call.get("output") or "").splitlines()):
            cleaned = _ZERO_FAIL_RE.sub("", line)
            if _SUCCESS_RE.search(line) and not _FAIL_RE.search(cleaned):
                name = call.get("name") or "tool"
                return f"{name} 输出：{clip(line, 140)}" if zh else f"{name} reports: {clip(line, 140)}"
    for sentence in _SENTENCE_SPLIT.split(trace.agent_text or ""):
        if _SUCCESS_RE.search(sentence) and not _FAIL_RE.search(_ZERO_FAIL_RE.sub("", sentence)):
            return clip(sentence.strip(" -*#>"), 160)
    return ""


def strip_prefix(line: str) -> str:
    """Drop a leading ``Prefer:``/``Avoid:`` (or Chinese) label from a guidance line."""
    return re.sub(r"^\s*(?:prefer|avoid|优先|偏好|避免|不要)\s*[:：]\s*", "", line, flags=re.IGNORECASE).strip()


def guidance_line(body: str, limit: int = 220) -> str:
    """A Prefer or Avoid line as the rules keep it: clipped, without a label (a model may write one); the label is
    the stored form's, written by :mod:`memmy.kinds.policy` only."""
    return clip(strip_prefix(body), limit)


def trace_block(trace: IndexedTrace, *, user_cap: int = 200, agent_cap: int = 300, reflection_cap: int = 300) -> str:
    """One trace as prompt text: id, episode, tags, user, agent, up to 3 tools, reflection, V and alpha."""
    tools = "; ".join(
        f"{c.get('name') or 'tool'}({short_input(c.get('input'), 100)}) -> "
        f"{clip(str(c.get('error') or c.get('output') or ''), 80)}"
        for c in trace.tool_calls[:3]
    )
    lines = [
        f"[trace {trace.id}] episode={trace.episode_id or '-'} tags={','.join(trace.tags)}",
        f"user: {clip(trace.user_text or trace.summary, user_cap)}",
        f"agent: {clip(trace.agent_text, agent_cap)}",
    ]
    if tools:
        lines.append(f"tools: {tools}")
    if trace.reflection:
        lines.append(f"reflection: {clip(trace.reflection, reflection_cap)}")
    lines.append(f"V={trace.value:.3f} alpha={trace.alpha:.2f}")
    return "\n".join(lines)


_GENERIC_ERROR = re.compile(
    r"^(?:exit (?:code|status)[: ]*-?\d+|error|failed|failure|command failed(?: with exit code -?\d+)?)\.?$", re.I
)


def error_line(call: Mapping[str, Any]) -> str:
    """The most telling line of a failed call: an ``XxxError:`` line, else an error-looking line, else the first."""
    text = str(call.get("error") or "") + "\n" + str(call.get("output") or "")
    exception = _EXC_LINE.search(text)
    if exception:
        start = text.rfind("\n", 0, exception.start()) + 1
        lead = text[start : exception.start()]  # "Error: Error acquiring the state lock: <Exception>: …" keeps its lead
        return clip(text[start : exception.end()] if _ERR_LINE.search(lead) else exception.group(0), 100)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    telling = [ln for ln in lines if not _GENERIC_ERROR.match(ln)] or lines  # "exit code 1" says nothing
    return clip(next((ln for ln in telling if _ERR_LINE.search(ln)), telling[0] if telling else ""), 100)
