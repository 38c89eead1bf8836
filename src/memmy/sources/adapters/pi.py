"""Pi coding agent history, plus the transcript helpers the other adapters share.

Where: ``$PI_CODING_AGENT_SESSION_DIR``, else ``$PI_CODING_AGENT_DIR/sessions``, else ``~/.pi/agent/sessions``;
one file per session, ``--<cwd with / as ->--/<iso-time>_<uuid>.jsonl``.

Format (session v3; pi-mono ``coding-agent/docs/session.md``): a ``session`` header, then entries that form a
tree through ``id``/``parentId``. Only the current branch (the path from the last entry to the root) is read;
entries off it are counted as ``off_branch``. v1 files without ids are read in file order::

    {"type":"session","version":3,"id":"019f94e7-…","timestamp":"2026-07-24T16:13:57.159Z","cwd":"/home/u/proj"}
    {"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"…","message":{"role":"user","content":"hi"}}
    {"type":"message","id":"b2c3d4e5","parentId":"a1b2c3d4","message":{"role":"assistant","content":[
        {"type":"text","text":"Running"},{"type":"toolCall","id":"t1","name":"bash","arguments":{"command":"ls"}}]}}
    {"type":"message","id":"c3d4e5f6","parentId":"b2c3d4e5","message":{"role":"toolResult","toolCallId":"t1",
        "toolName":"bash","content":[{"type":"text","text":"a.py"}],"isError":false}}

Message roles: ``user``, ``assistant`` (text kept, ``thinking`` dropped, each ``toolCall`` becomes a ``tool``
message), ``toolResult`` (merged into its call), ``bashExecution`` (a user-run ``!command``: a ``bash`` tool
message placed right after the next user prompt, which it informs, so that it does not end the previous turn;
kept back as ``shell_without_prompt`` until that prompt exists).
``custom``/``custom_message`` entries are extension injections and are skipped, as are summaries.
Message ids are ``<session id>:<entry id>`` because entry ids are 8 hex digits, unique only per session.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import Transcript, as_text, env_dir
from memmy.sources.model import (
    Conversation,
    ScanStats,
    extract_text,
    home_of,
    iter_jsonl,
    to_iso,
)

NON_MESSAGE_ENTRIES = frozenset(
    "session model_change thinking_level_change compaction branch_summary custom label session_info".split()
)
SKIPPED_ROLES = {"custom": "custom_message", "branchSummary": "summary_message", "compactionSummary": "summary_message"}


# --- shared with the other adapters (candidates for memmy.sources.model) -------------------------------------


# --- pi session files ----------------------------------------------------------------------------------------


def header_of(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``session`` header entry (empty when the file has none)."""
    return next((e for e in entries if e.get("type") == "session"), {})


def current_branch(entries: list[dict[str, Any]], stats: ScanStats) -> list[dict[str, Any]]:
    """Entries on the path from the last entry to the root (file order for v1 files without ids)."""
    body = [e for e in entries if e.get("type") != "session"]
    if not body or not all(isinstance(e.get("id"), str) and "parentId" in e for e in body):
        return body
    by_id = {e["id"]: e for e in body}
    path: list[dict[str, Any]] = []
    node: dict[str, Any] | None = body[-1]
    while node is not None and len(path) <= len(body):
        path.append(node)
        parent = node.get("parentId")
        node = by_id.get(parent) if isinstance(parent, str) else None
    if len(body) > len(path):
        stats.skip("off_branch", len(body) - len(path))
    return path[::-1]


def build_conversation(
    entries: list[dict[str, Any]],
    source: str,
    origin: str,
    conversation_id: str,
    workspace: str | None,
    stats: ScanStats,
) -> Conversation | None:
    """Turn pi session entries (from a file or OpenClaw's database) into one conversation."""
    transcript = Transcript(source, conversation_id, workspace, stats)
    shell: list[tuple[str, dict[str, Any], str]] = []  # user-run commands wait for the prompt they inform
    for number, entry in enumerate(current_branch(entries, stats), start=1):
        kind = entry.get("type")
        message = entry.get("message")
        if kind == "custom_message":
            stats.skip("custom_message")
        elif kind in NON_MESSAGE_ENTRIES:
            stats.skip("non_message_entry")
        elif kind != "message" or not isinstance(message, dict):
            stats.skip("unknown_type")
        else:
            entry_id = entry.get("id") if isinstance(entry.get("id"), str) else f"line{number}"
            at = to_iso(message.get("timestamp") or entry.get("timestamp"))
            if message.get("role") == "bashExecution":
                shell.append((f"{conversation_id}:{entry_id}", message, at))
                continue
            message_id = f"{conversation_id}:{entry_id}"
            _add_message(transcript, message_id, message, at)
            if transcript.messages and transcript.messages[-1].message_id == message_id and message["role"] == "user":
                for args in shell:
                    _add_shell(transcript, *args)
                shell.clear()
    if shell:
        stats.skip("shell_without_prompt", len(shell))
    return transcript.conversation(origin)


def _add_shell(transcript: Transcript, message_id: str, message: dict[str, Any], at: str) -> None:
    """A user-run ``!command`` (pi's ``bashExecution``) as a ``bash`` tool message."""
    code = message.get("exitCode")
    error = f"exit code {code}" if isinstance(code, int) and code != 0 else None
    command, output = as_text(message.get("command")), as_text(message.get("output"))
    transcript.tool_call(message_id, at, "bash", None, command, output=output, error=error)


def _add_message(transcript: Transcript, message_id: str, message: dict[str, Any], at: str) -> None:
    role = message.get("role")
    if role == "user":
        transcript.text(message_id, "user", extract_text(message.get("content")), at)
    elif role == "assistant":
        _add_assistant(transcript, message_id, message.get("content"), at)
    elif role == "toolResult":
        text = extract_text(message.get("content")) or None
        failed = bool(message.get("isError"))
        transcript.tool_result(
            message_id,
            at,
            message.get("toolName"),
            message.get("toolCallId"),
            output=None if failed else text,
            error=text if failed else None,
        )
    else:
        transcript.stats.skip(SKIPPED_ROLES.get(str(role), "unknown_role"))


def _add_assistant(transcript: Transcript, message_id: str, content: Any, at: str) -> None:
    """Text segments and tool calls in order; later text segments get ``:<n>`` ids."""
    parts = content if isinstance(content, list) else [content]
    texts: list[str] = []
    segments = 0
    emitted = False

    def flush() -> None:
        nonlocal segments, emitted
        if texts:
            transcript.text(
                message_id if segments == 0 else f"{message_id}:{segments}", "assistant", "\n".join(texts), at
            )
            texts.clear()
            segments += 1
            emitted = True

    for part in parts:
        if isinstance(part, dict) and part.get("type") == "toolCall":
            flush()
            call_id = part.get("id") if isinstance(part.get("id"), str) else None
            transcript.tool_call(
                f"{message_id}:{call_id or len(transcript.messages)}",
                at,
                part.get("name"),
                call_id,
                as_text(part.get("arguments")),
            )
            emitted = True
        elif isinstance(part, dict) and part.get("type") == "thinking":
            continue
        else:
            text = extract_text(part)
            if text:
                texts.append(text)
    flush()
    if not emitted:
        transcript.stats.skip("empty_message")


def session_id_from_name(path: Path) -> str:
    """The uuid of ``<iso-time>_<uuid>.jsonl`` (the whole stem when there is no ``_``)."""
    return path.stem.rsplit("_", 1)[-1]


def cwd_from_dir_name(name: str) -> str | None:
    """Best-effort cwd from ``--home-u-proj--`` (lossy: dashes inside names cannot be told apart)."""
    if name.startswith("--") and name.endswith("--") and len(name) > 4:
        return "/" + name[2:-2].replace("-", "/")
    return None


class PiAdapter:
    """Reads pi's session JSONL files."""

    name = "pi"

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """The sessions directory."""
        sessions = env_dir(env, "PI_CODING_AGENT_SESSION_DIR")
        if sessions is not None:
            return [sessions]
        agent = env_dir(env, "PI_CODING_AGENT_DIR") or home_of(env) / ".pi" / "agent"
        return [agent / "sessions"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """One conversation per session file."""
        for root in self.roots(env):
            if not root.is_dir():
                continue
            for path in sorted(root.rglob("*.jsonl")):
                stats.files += 1
                entries = [obj for _, obj in iter_jsonl(path, stats)]
                header = header_of(entries)
                conversation_id = header.get("id") if isinstance(header.get("id"), str) else None
                cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else None
                conversation = build_conversation(
                    entries,
                    self.name,
                    str(path),
                    conversation_id or session_id_from_name(path),
                    cwd or cwd_from_dir_name(path.parent.name),
                    stats,
                )
                if conversation is not None:
                    yield conversation


ADAPTER = PiAdapter()
