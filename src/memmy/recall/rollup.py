"""What an episode rollup says for each trace it stands in for: the step asked and what it concluded.

A rollup replaces its member traces in the injected text (they are dropped as ``covered_by_episode_rollup``),
so each step line carries the step's outcome, the first sentences of the agent's answer and the commands that
worked, not only the user's request: a rollup that listed the questions alone told the next session what was
asked without what was answered. A step line reads ``step N / <ask> → <outcome>`` (`` / <reflection>`` after
it when the trace has one); :func:`memmy.recall.render.parse_step` reads it back.
"""

from __future__ import annotations

import json
from typing import Any

from memmy.recall.render import ARROW, whole_sentences

ASK_CHARS = 160
ANSWER_CHARS = 200
COMMAND_CHARS = 80
MAX_COMMANDS = 2
_COMMAND_KEYS = ("command", "cmd", "script")


def _leading_sentences(text: str, limit: int) -> str:
    """The leading whole sentences of ``text`` within ``limit`` characters, else its head cut at a word."""
    out = whole_sentences(text, limit)
    if out or not text.strip():
        return out
    head = " ".join(text.split())[:limit]
    return head.rsplit(" ", 1)[0] if " " in head[limit // 2 :] else head


def _command(call: dict[str, Any]) -> str:
    """The shell command a tool call ran ("" when its input names none)."""
    value = call.get("input")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return " ".join(value.split()) if call.get("name") in ("bash", "shell", "exec", "run") else ""
    if isinstance(value, dict):
        for key in _COMMAND_KEYS:
            if isinstance(value.get(key), str):
                return " ".join(str(value[key]).split())
    return ""


def worked_commands(trace: dict[str, Any]) -> list[str]:
    """Up to two distinct commands of the trace's tool calls that succeeded, the last ones first."""
    out: list[str] = []
    for call in reversed(trace.get("tool_calls") or []):
        if not isinstance(call, dict) or call.get("success") is False or call.get("error"):
            continue
        command = _command(call)[:COMMAND_CHARS]
        if command and command not in out:
            out.append(command)
    return out[:MAX_COMMANDS]


def trace_outcome(trace: dict[str, Any]) -> str:
    """What a trace concluded: its answer's leading sentences and the commands that worked (not already named)."""
    answer = _leading_sentences(str(trace.get("agentText") or ""), ANSWER_CHARS)
    commands = [c for c in worked_commands(trace) if c not in answer]
    if commands:
        ran = "ran " + ", ".join(f"`{c}`" for c in commands)
        answer = f"{answer.rstrip('.。')} ({ran})" if answer else ran
    return answer


def step_line(number: int, trace: dict[str, Any], fallback_summary: str) -> str:
    """One rollup step: ``step N / <ask> → <outcome>`` plus `` / <reflection>`` when the trace has one."""
    ask = " ".join(str(trace.get("summary") or fallback_summary).split())[:ASK_CHARS]
    outcome = trace_outcome(trace)
    line = f"step {number} / {ask}" + (f"{ARROW}{outcome}" if outcome else "")
    if trace.get("reflection"):
        line += f" / {' '.join(str(trace['reflection']).split())[:160]}"
    return line
