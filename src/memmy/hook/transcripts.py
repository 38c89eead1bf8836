"""Read the last turn (request, answer, tool trace) from Claude Code and Codex transcripts. Standard library only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_TAIL_BYTES = 4 * 1024 * 1024


def _tail_lines(path: str | None) -> list[dict[str, Any]]:
    if not path:
        return []
    try:
        file = Path(path)
        size = file.stat().st_size
        with file.open("rb") as handle:
            if size > MAX_TAIL_BYTES:
                handle.seek(size - MAX_TAIL_BYTES)
                handle.readline()  # drop the partial first line
            raw = handle.read()
    except OSError:
        return []
    lines = []
    for line in raw.splitlines():
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict):
            lines.append(obj)
    return lines


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text")
        ).strip()
    return ""


def claude_last_turn(path: str | None) -> dict[str, Any]:
    """``{query, answer, toolCalls}`` of the last human turn in a Claude Code transcript."""
    lines = [ln for ln in _tail_lines(path) if ln.get("type") in ("user", "assistant") and not ln.get("isSidechain")]
    start = None
    for index in range(len(lines) - 1, -1, -1):
        message = lines[index].get("message") or {}
        if lines[index]["type"] == "user" and _text(message.get("content")):
            start = index
            break
    if start is None:
        return {}
    query = _text((lines[start].get("message") or {}).get("content"))
    answer_parts: list[str] = []
    calls: dict[str, dict[str, Any]] = {}
    for line in lines[start + 1 :]:
        content = (line.get("message") or {}).get("content")
        if not isinstance(content, list):
            if line["type"] == "assistant" and isinstance(content, str):
                answer_parts.append(content)
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and line["type"] == "assistant":
                answer_parts.append(str(part.get("text", "")))
            elif part.get("type") == "tool_use":
                calls[str(part.get("id"))] = {
                    "id": part.get("id"),
                    "name": part.get("name"),
                    "input": part.get("input"),
                }
            elif part.get("type") == "tool_result":
                call = calls.setdefault(str(part.get("tool_use_id")), {"id": part.get("tool_use_id"), "name": "tool"})
                output = _text(part.get("content")) or json.dumps(part.get("content"))[:4000]
                call["error" if part.get("is_error") else "output"] = output
    return {"query": query, "answer": answer_parts[-1] if answer_parts else "", "toolCalls": list(calls.values())}


def codex_last_turn(path: str | None) -> dict[str, Any]:
    """``{query, answer, toolCalls}`` of the last turn in a Codex rollout (envelope or bare lines)."""
    items = []
    for line in _tail_lines(path):
        payload = line.get("payload") if line.get("type") == "response_item" else (line if "role" in line else None)
        if isinstance(payload, dict):
            items.append(payload)
    start = None
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        text = _text(item.get("content"))
        if item.get("type") == "message" and item.get("role") == "user" and text and not text.startswith("<"):
            start = index
            break
    if start is None:
        return {}
    query = _text(items[start].get("content"))
    answer = ""
    calls: dict[str, dict[str, Any]] = {}
    for item in items[start + 1 :]:
        kind = item.get("type")
        if kind == "message" and item.get("role") == "assistant":
            answer = _text(item.get("content")) or answer
        elif kind in ("function_call", "custom_tool_call"):
            calls[str(item.get("call_id"))] = {
                "id": item.get("call_id"),
                "name": item.get("name"),
                "input": item.get("arguments") or item.get("input"),
            }
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call = calls.setdefault(str(item.get("call_id")), {"id": item.get("call_id"), "name": "tool"})
            output = item.get("output")
            call["output"] = output if isinstance(output, str) else json.dumps(output)[:4000]
    return {"query": query, "answer": answer, "toolCalls": list(calls.values())}
