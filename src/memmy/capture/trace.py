"""Turn capture: tool-call normalisation and the L1 trace step built from one completed turn.

Pure functions (no I/O): the service persists what they return. Caps and rules follow the capture
algorithm of the reference (one step per raw turn, 55/45 head-tail clamping, heuristic summary, tags,
error signatures and the ``primaryTag|secondaryTag|tool|errCode`` signature).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from memmy.domain import summarise
from memmy.redact.keywords import KeywordScan
from memmy.redact.tags import neutralize_tags

TRUNCATION_MARK = "\n\n…[truncated]…\n\n"
MEMMY_TOOLS = frozenset({"memmy_memory_search", "memmy_memory_get"})
RESERVED_TAGS = frozenset({"trace", "turn", "memmy", "openclaw"})
_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9+]*$")
#: Keyword rules: (tag, pattern, needles). A pattern runs only when one of its needles (literal words every match
#: contains, case-folded) is in the text, so a turn pays for the few rules that can match, not for all 18.
_KEYWORD_TAGS: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (tag, re.compile(pattern, re.IGNORECASE), needles)
    for tag, pattern, needles in (
        ("docker", r"\bdocker(file)?\b|docker-compose", ("docker",)),
        ("kubernetes", r"\bkubernetes\b|\bkubectl\b|\bk8s\b", ("kubernetes", "kubectl", "k8s")),
        ("pip", r"\bpip3?\b", ("pip",)),
        ("npm", r"\bnpm\b|\bpnpm\b|\byarn\b", ("npm", "yarn")),
        ("database", r"\bdatabase\b|数据库", ("database", "数据库")),
        ("sql", r"\bsql(ite)?\b|\bpostgres(ql)?\b|\bmysql\b", ("sql", "postgres")),
        ("shell", r"\bbash\b|\bshell\b|\bzsh\b", ("bash", "shell", "zsh")),
        ("git", r"\bgit\b", ("git",)),
        ("python", r"\bpython3?\b|\.py\b|\bpytest\b", ("py",)),
        ("typescript", r"\btypescript\b|\.tsx?\b", ("typescript", ".ts")),
        ("javascript", r"\bjavascript\b|\.jsx?\b|\bnode(js)?\b", ("javascript", ".js", "node")),
        ("rust", r"\brust\b|\bcargo\b", ("rust", "cargo")),
        ("plugin", r"\bplugin\b|插件", ("plugin", "插件")),
        ("http", r"\bhttps?\b|\bapi\b", ("http", "api")),
        ("network", r"\bnetwork\b|\bdns\b|\btimeout\b|网络", ("network", "dns", "timeout", "网络")),
        ("auth", r"\bauth\w*\b|\btoken\b|\blogin\b|认证|登录", ("auth", "token", "login", "认证", "登录")),
        ("test", r"\btests?\b|\bpytest\b|\bvitest\b|\bjest\b|测试", ("test", "jest", "测试")),
        (
            "error",
            r"\berror\b|\bexception\b|\btraceback\b|报错|错误",
            ("error", "exception", "traceback", "报错", "错误"),
        ),
    )
)
#: Error-fragment patterns with their needles: (pattern, needles, needles are case-folded); () runs always.
_ERROR_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...], bool], ...] = (
    (re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b:?[^\n]{0,120}"), ("Error", "Exception"), False),
    (re.compile(r"\b(?:error|fatal):[^\n]{0,140}", re.IGNORECASE), ("error:", "fatal:"), True),
    (
        re.compile(
            r"[^\n]{0,80}\b(?:not found|no such file(?: or directory)?|permission denied|command not found)\b"
            r"[^\n]{0,40}",
            re.IGNORECASE,
        ),
        ("not found", "no such file", "permission denied"),
        True,
    ),
    (
        re.compile(r"[^\n]{0,60}\b(?:is required|must be|cannot|failed to)\b[^\n]{0,80}", re.IGNORECASE),
        ("is required", "must be", "cannot", "failed to"),
        True,
    ),
    (re.compile(r"\bexit (?:code|status) \d+\b", re.IGNORECASE), ("exit code", "exit status"), True),
    (re.compile(r"\b[45]\d\d [A-Z][a-zA-Z]+(?: [A-Z][a-zA-Z]+)*"), (), False),
    (re.compile(r"\b[A-Z][A-Z0-9]+(?:_[A-Z0-9]+)+\b"), ("_",), False),
    (re.compile(r"\bE[A-Z]{3,}\b[^\n]{0,80}"), ("E",), False),
)
#: Each distinct needle with the rules it lets run, all found in one pass over the text.
_TAG_NEEDLES: dict[str, tuple[int, ...]] = {
    needle: tuple(i for i, rule in enumerate(_KEYWORD_TAGS) if needle in rule[2])
    for needle in dict.fromkeys(n for rule in _KEYWORD_TAGS for n in rule[2])
}
_TAG_NEEDLE_SCAN = KeywordScan(_TAG_NEEDLES)
_ERR_CODE = re.compile(r"\b[A-Z][A-Z0-9_]{2,}_[A-Z0-9_]+\b")
_SCORE_ERROR = re.compile(r"Error|Exception")
_SCORE_SHAPE = re.compile(r"\bE[A-Z]{3,}\b|/[\w.-]+/")
_SCORE_BONUS = tuple(re.compile(p) for p in (r"code=\d+", r"\b\d{3}\b", r"_"))
_EXIT_CODE = re.compile(r"\bexit (?:code|status)[: ]+(\d+)", re.IGNORECASE)


def clamp_text(text: str | None, limit: int) -> str:
    """Keep 55 % head and 45 % tail around a truncation mark when ``text`` exceeds ``limit``."""
    if not text:
        return ""
    budget = max(200, limit)
    if len(text) <= budget:
        return text
    room = budget - len(TRUNCATION_MARK)
    head = int(room * 0.55)
    tail = room - head
    return text[:head] + TRUNCATION_MARK + text[len(text) - tail :]


def _first(mapping: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in mapping and mapping[name] is not None:
            return mapping[name]
    return None


def _as_text(value: Any) -> str | None:
    """Tool text as stored: JSON for structured values, wrapper tags made inert (tool output is untrusted)."""
    if value is None:
        return None
    if isinstance(value, str):
        return neutralize_tags(value)
    return neutralize_tags(json.dumps(value, ensure_ascii=False, default=str))


def normalize_tool_calls(calls: list[Any] | None, results: list[Any] | None) -> list[dict[str, Any]]:
    """Map every host's tool-call shape onto ``{id, name, input, output, error, success, ...}``.

    Aliases: name|function.name, id|call_id|tool_call_id, input|args|arguments|function.arguments,
    output|result (or the paired result at the same index: output|result|content, else the whole value),
    error|result.error|result.message; success is explicit, else False when there is an error.
    memmy's own recall tools are replaced by a placeholder so recalled memory is not captured twice.
    """
    results = results or []
    normalized: list[dict[str, Any]] = []
    for index, raw in enumerate(calls or []):
        if not isinstance(raw, dict):
            continue
        function: dict[str, Any] = raw["function"] if isinstance(raw.get("function"), dict) else {}
        name = str(_first(raw, "name", "tool_name", "toolName") or function.get("name") or "tool")
        call_id = _first(raw, "id", "call_id", "tool_call_id", "toolCallId", "toolUseId")
        call_input = _first(raw, "input", "args", "arguments", "parameters")
        if call_input is None:
            call_input = function.get("arguments")
        output = _first(raw, "output", "result")
        paired = results[index] if index < len(results) else None
        if output is None and paired is not None:
            output = _first(paired, "output", "result", "content") if isinstance(paired, dict) else paired
            if output is None:
                output = paired
        error = raw.get("error")
        result_obj = raw.get("result")
        if error is None and isinstance(result_obj, dict):
            error = result_obj.get("error") or (result_obj.get("message") if result_obj.get("isError") else None)
        if error is None and isinstance(paired, dict) and paired.get("is_error"):
            error = _as_text(_first(paired, "error", "content", "output"))
        success = raw.get("success")
        if not isinstance(success, bool):
            success = error is None
        item: dict[str, Any] = {
            "id": _as_text(call_id),
            "name": name,
            "input": call_input,
            "output": _as_text(output),
            "error": _as_text(error),
            "success": success,
            "startedAt": _first(raw, "startedAt", "started_at"),
            "endedAt": _first(raw, "endedAt", "ended_at"),
            "thinkingBefore": _first(raw, "thinkingBefore", "thinking_before"),
            "assistantTextBefore": _first(raw, "assistantTextBefore", "assistant_text_before"),
        }
        if name in MEMMY_TOOLS:
            item["output"] = f"[memmy memory result omitted from capture: {name}]"
            item["input"] = None
        normalized.append(item)
    return normalized


def derive_tags(text: str, tool_calls: list[dict[str, Any]], extra: list[str]) -> list[str]:
    """Up to 8 sorted tags from tool names, error codes, keyword rules and the request's own tags."""
    found: set[str] = set()
    for call in tool_calls:
        head = re.split(r"[.:/_\-]", call["name"].lower())[0]
        found.add(head)
        for code in _ERR_CODE.findall(call.get("error") or ""):
            found.update(part.lower() for part in code.split("_"))
    folded = text.casefold()
    found_needles = _TAG_NEEDLE_SCAN.found(folded)
    candidates = {i for needle in found_needles for i in _TAG_NEEDLES[needle]}
    for index in candidates:
        tag, pattern, _needles = _KEYWORD_TAGS[index]
        if pattern.search(text):
            found.add(tag)
    for tag in extra:
        found.add(tag.lower())
    valid = sorted(t for t in found if 3 <= len(t) <= 32 and _TAG_RE.match(t) and t not in RESERVED_TAGS)
    return valid[:8]


def error_signatures(text: str, limit: int = 4) -> list[str]:
    """Rank error-looking fragments (6-160 chars) by shape and frequency; keep the top ``limit``."""
    counts: Counter[str] = Counter()
    folded = text.casefold()
    for pattern, needles, fold in _ERROR_PATTERNS:
        if needles:
            haystack = folded if fold else text
            if not any([n in haystack for n in needles]):
                continue
        for match in pattern.finditer(text):
            fragment = " ".join(match.group(0).split())
            if 6 <= len(fragment) <= 160:
                counts[fragment] += 1

    def score(fragment: str) -> float:
        value = float(counts[fragment])
        if _SCORE_ERROR.search(fragment):
            value += 3
        if _SCORE_SHAPE.search(fragment):
            value += 2
        value += sum(1 for p in _SCORE_BONUS if p.search(fragment))
        return value

    ranked = sorted(counts, key=lambda f: (-score(f), f))
    return ranked[:limit]


_GENERIC_TAGS = frozenset({"error", "shell", "test", "http"})


def trace_signature(tags: list[str], tool_calls: list[dict[str, Any]], reflection: str) -> str:
    """``primaryTag|secondaryTag|tool|errCode`` with ``_`` for missing parts.

    The primary and secondary tags are the most specific ones: topic tags (docker, python, sql …) before
    generic ones (error, shell …) before the tool names, which the signature already carries; otherwise every
    ``bash`` turn would share one signature and unrelated tasks would be induced into one policy.
    """
    heads = {re.split(r"[.:/_\-]", str(c.get("name") or "").lower())[0] for c in tool_calls}
    ranked = sorted(tags, key=lambda t: (t in heads, t in _GENERIC_TAGS))
    primary = ranked[0] if ranked else "_"
    secondary = ranked[1] if len(ranked) > 1 else "_"
    tool = tool_calls[0]["name"].lower()[:64] if tool_calls else "_"
    outputs = " ".join((c.get("output") or "") + " " + (c.get("error") or "") for c in tool_calls)
    code_match = _ERR_CODE.search(outputs)
    if code_match:
        err = code_match.group(0)
    else:
        exit_match = _EXIT_CODE.search(outputs)
        reflection_match = _ERR_CODE.search(reflection or "")
        err = f"EXIT_{exit_match.group(1)}" if exit_match else (reflection_match.group(0) if reflection_match else "_")
    return f"{primary}|{secondary}|{tool}|{err}"


@dataclass
class TraceStep:
    """The L1 memory one completed turn produces."""

    summary: str
    content: str
    tags: list[str]
    signature: str
    error_signatures: list[str]
    user_text: str = ""
    agent_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    embedding_text: str = ""


def build_trace_step(
    *,
    user_text: str,
    assistant_text: str,
    tool_calls: list[dict[str, Any]],
    raw_turn_id: str,
    reasoning: str | None,
    request_tags: list[str],
    max_text_chars: int,
    max_tool_output_chars: int,
) -> TraceStep:
    """Build the single trace step of a turn with the capture caps applied."""
    user = clamp_text(user_text, max_text_chars)
    agent = clamp_text(assistant_text, max_text_chars)
    calls = []
    for call in tool_calls:
        capped = dict(call)
        capped["output"] = clamp_text(call.get("output"), max_tool_output_chars) if call.get("output") else None
        capped["error"] = clamp_text(call.get("error"), max_tool_output_chars) if call.get("error") else None
        calls.append(capped)
    first_tool = calls[0]["name"] if calls else None
    summary = summarise(user or agent or (f"Used tool {first_tool}" if first_tool else "") or "(empty turn)")
    tool_text = "\n".join(f"{c['name']} {c.get('output') or ''} {c.get('error') or ''}" for c in calls)
    inputs = "\n".join((_as_text(c.get("input")) or "")[:300] for c in calls)  # commands name the topic
    all_text = f"{user}\n{agent}\n{tool_text}\n{inputs}"
    tags = derive_tags(all_text, calls, request_tags)
    errors = error_signatures(tool_text + "\n" + agent)
    signature = trace_signature(tags, calls, reasoning or "")
    lines = [f"Summary: {summary}", f"RawTurn: {raw_turn_id}", "TraceStep: 0", f"User:\n{user}"]
    if calls:
        tool_lines = []
        for call in calls:
            line = f"- {call['name']}"
            if call.get("error"):
                line += f" error={summarise(call['error'], 160)}"
            tool_lines.append(line)
        lines.append("Tool calls:\n" + "\n".join(tool_lines))
    lines.append(f"Agent:\n{agent}")
    if reasoning:
        lines.append(f"Reflection: {clamp_text(reasoning, 800)}")
    embedding_text = f"Summary: {summary}\n\nOriginal exchange:\n{user}\n{agent}"[:3000]
    return TraceStep(
        summary=summary,
        content="\n".join(lines),
        tags=tags,
        signature=signature,
        error_signatures=errors,
        user_text=user,
        agent_text=agent,
        tool_calls=calls,
        embedding_text=embedding_text,
    )
