"""Episode: one task's traces, recalled as one rollup (``source == "episode"``) that stands in for them.

A rollup's content is one step line per trace, ``step N / <ask> → <outcome>`` (`` / <reflection>`` after it when
the trace has one): the step asked and what it concluded (the first sentences of the agent's answer and the
commands that worked), so the next session learns what was answered, not only what was asked. The agent reads a
rollup as one line: the task, its result, then its other steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from memmy.domain import Memory
from memmy.kinds.text import norm_line, sentence, whole_sentences
from memmy.kinds.trace import Trace

ASK_CHARS = 160
ANSWER_CHARS = 200
COMMAND_CHARS = 80
MAX_COMMANDS = 2
TITLE_PREFIX = "Past similar episode: "
ARROW = " → "  # between a step's ask and its outcome
_COMMAND_KEYS = ("command", "cmd", "script")
_STEP = re.compile(r"^step \d+ / (.*?)(?: / (?:IRRELEVANT|RELATED\w*|PIVOTAL\w*|[A-Z_]{6,}))?$")


def _leading_sentences(text: str, limit: int) -> str:
    """The leading whole sentences of ``text`` within ``limit`` characters, else its head cut at a word."""
    out = whole_sentences(text, limit)
    if out or not text.strip():
        return out
    head = " ".join(text.split())[:limit]
    return head.rsplit(" ", 1)[0] if " " in head[limit // 2 :] else head


def _command(call: Mapping[str, Any]) -> str:
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


def worked_commands(trace: Trace) -> list[str]:
    """Up to two distinct commands of the trace's tool calls that succeeded, the last ones first."""
    out: list[str] = []
    for call in reversed(trace.tool_calls):
        if call.get("success") is False or call.get("error"):
            continue
        command = _command(call)[:COMMAND_CHARS]
        if command and command not in out:
            out.append(command)
    return out[:MAX_COMMANDS]


def trace_outcome(trace: Trace) -> str:
    """What a trace concluded: its answer's leading sentences and the commands that worked (not already named)."""
    answer = _leading_sentences(trace.agent_text, ANSWER_CHARS)
    commands = [c for c in worked_commands(trace) if c not in answer]
    if commands:
        ran = "ran " + ", ".join(f"`{c}`" for c in commands)
        answer = f"{answer.rstrip('.。')} ({ran})" if answer else ran
    return answer


def step_line(number: int, trace: Trace, fallback_summary: str) -> str:
    """One rollup step: ``step N / <ask> → <outcome>`` plus `` / <reflection>`` when the trace has one."""
    ask = " ".join((trace.summary or fallback_summary).split())[:ASK_CHARS]
    outcome = trace_outcome(trace)
    line = f"step {number} / {ask}" + (f"{ARROW}{outcome}" if outcome else "")
    if trace.reflection:
        line += f" / {' '.join(trace.reflection.split())[:160]}"
    return line


def parse_step(line: str) -> tuple[str, str]:
    """``(ask, outcome)`` of a rollup step line (outcome "" when the step has none; a plain line is its ask)."""
    match = _STEP.match(line.strip())
    body = (match.group(1) if match else line).strip()
    ask, _, outcome = body.partition(ARROW.strip())
    return ask.strip(), outcome.strip()


def body(memory: Memory) -> str:
    """The reference layout of ``memory/search``: id, time, the rollup's title and its step lines."""
    return "\n".join([f"id: {memory.id}", f"timestamp: {memory.created_at}", "", memory.title, memory.content])


def line(memory: Memory) -> str:
    """A rollup in plain words: the task, what it concluded, then its other steps with theirs (best match first)."""
    title = memory.title.removeprefix(TITLE_PREFIX).strip()
    steps: list[tuple[str, str]] = []
    for step in memory.content.splitlines():
        ask, outcome = parse_step(step)
        if ask and norm_line(ask) not in {norm_line(a) for a, _ in steps}:
            steps.append((ask, outcome))
    out = f"Past task: {sentence(title)}"
    result = next((o for a, o in steps if norm_line(a) == norm_line(title)), "")
    if result:
        out += f" Result: {sentence(result)}"
    others = [f"{a} → {o.rstrip('.。')}" if o else a for a, o in steps if norm_line(a) != norm_line(title)][:3]
    return out + (" Steps: " + "; ".join(others).rstrip(".。") + "." if others else "")
