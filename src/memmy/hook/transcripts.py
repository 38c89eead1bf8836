"""Read the last turn (request, answer, tool trace, host identity) from Claude Code and Codex transcripts.

The records are read with the history importer's own readers (``memmy.transcripts``), from the tail of the live
file, so the turn carries the ids the importer will give it later: the conversation id and the id of the user
message that opened it. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from memmy.hook.wrappers import sanitize
from memmy.transcripts.claude_code import ClaudeTranscriptReader
from memmy.transcripts.codex import read_rollout, rollout_id_of, rollout_messages
from memmy.transcripts.model import ScanStats, SourceMessage, parse_jsonl_line
from memmy.transcripts.turn_grouping import group_messages

MAX_TAIL_BYTES = 4 * 1024 * 1024


def _tail_records(path: str, *, with_first_line: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of the file's last ``MAX_TAIL_BYTES`` (numbered as in the whole file).

    ``with_first_line`` adds line 1 when the tail does not reach it (a Codex rollout names its thread there).
    """
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            first_number, head = 1, b""
            if size > MAX_TAIL_BYTES:
                handle.seek(size - MAX_TAIL_BYTES)
                handle.readline()  # drop the partial first line
                start = handle.tell()
                handle.seek(0)
                head = handle.read(start)
                first_number = head.count(b"\n") + 1
            raw = handle.read()
    except OSError:
        return []
    records = list(_numbered(raw, first_number))
    if with_first_line and first_number > 1:
        records[:0] = list(_numbered(head.split(b"\n", 1)[0], 1))
    return records


def _numbered(raw: bytes, first_number: int) -> Iterator[tuple[int, dict[str, Any]]]:
    stats = ScanStats()
    for offset, line in enumerate(raw.split(b"\n")):
        record = parse_jsonl_line(line, stats, complete=True)
        if record is not None:
            yield first_number + offset, record


def _same_request(a: str, b: str) -> bool:
    """Whether the transcript's turn is the one the hook started (same request text, whitespace aside)."""
    return " ".join(a.split())[:500] == " ".join(b.split())[:500]


def last_turn(messages: list[SourceMessage], conversation_id: str) -> dict[str, Any]:
    """``{query, answer, toolCalls, hostConversationId, hostMessageId}`` of the last turn, ``{}`` when none."""
    turns, _orphans = group_messages(messages, sanitize)
    if not turns:
        return {}
    turn = turns[-1]
    answers = [m.content for m in turn if m.role == "assistant" and m.content.strip()]
    calls: dict[str, dict[str, Any]] = {}
    ordered: list[dict[str, Any]] = []
    for message in turn:
        if message.role != "tool":
            continue
        call = calls.get(message.tool_call_id or "") if message.tool_call_id else None
        if call is None:
            call = {"id": message.tool_call_id, "name": message.tool_name or "tool", "input": message.tool_input}
            ordered.append(call)
            if message.tool_call_id:
                calls[message.tool_call_id] = call
        if message.tool_output is not None:
            call["output"] = message.tool_output
        if message.tool_error is not None:
            call["error"] = message.tool_error
    return {
        "query": turn[0].content,
        "answer": answers[-1] if answers else "",
        "toolCalls": ordered,
        "hostConversationId": conversation_id,
        "hostMessageId": turn[0].message_id,
    }


def claude_last_turn(path: str | None) -> dict[str, Any]:
    """The last human turn of a Claude Code transcript (conversation id: the file name, as the importer's)."""
    if not path:
        return {}
    conversation_id = os.path.splitext(os.path.basename(path))[0]
    reader = ClaudeTranscriptReader(conversation_id, ScanStats())
    return last_turn(reader.read(_tail_records(path)), conversation_id)


def codex_last_turn(path: str | None) -> dict[str, Any]:
    """The last turn of a Codex rollout (envelope or bare lines; conversation id: the thread id of line 1)."""
    if not path:
        return {}
    from pathlib import Path  # only Codex needs it, for the rollout id in the file name

    stats = ScanStats()
    state = read_rollout(rollout_id_of(Path(path)), _tail_records(path, with_first_line=True), stats)
    return last_turn(rollout_messages(state, stats), state.conversation_id or state.rollout_id)


def host_identity(found: dict[str, Any], query: str) -> dict[str, str]:
    """The turn's host ids for the completion request, only when the transcript's last turn is this very turn."""
    if found.get("hostMessageId") and _same_request(str(found.get("query") or ""), query):
        return {"hostConversationId": str(found["hostConversationId"]), "hostMessageId": str(found["hostMessageId"])}
    return {}
