"""Hermes Agent history: ``$HERMES_HOME`` (default ``~/.hermes``).

``state.db`` (SQLite; columns probed, older builds have fewer)::

    sessions(id TEXT PRIMARY KEY, source, model, started_at REAL, cwd TEXT, title, parent_session_id, …)
    messages(id INTEGER PRIMARY KEY, session_id, role, content, tool_call_id, tool_calls, tool_name,
             timestamp REAL, active INTEGER DEFAULT 1, …)

    (1, 's1', 'user', 'fix the tests', NULL, NULL, NULL, 1785579301.2, 1)
    (2, 's1', 'assistant', NULL, NULL, '[{"id":"c1","type":"function","function":{"name":"terminal",
        "arguments":"{\\"command\\":\\"pytest\\"}"}}]', NULL, 1785579302.0, 1)
    (3, 's1', 'tool', '3 passed', 'c1', NULL, 'terminal', 1785579303.0, 1)

Rows with ``active=0`` are excluded (``inactive_row``). Each entry of an assistant row's ``tool_calls`` becomes a
``tool`` message (id ``<row id>:<n>``), and the ``tool`` row answering it is merged into that message. Times are
epoch seconds. Message ids are ``messages.id``; one conversation per ``session_id``, workspace ``sessions.cwd``.

``sessions/<session_id>.jsonl`` is the legacy transcript (a fallback when state.db refuses writes): one
OpenAI-style message per line (``role``, ``content``, ``tool_calls?``, ``tool_call_id?``, ``tool_name?``,
``timestamp?``); ``message`` and ``response_item`` ``payload`` wrappers are unwrapped, and the first ``cwd`` on
any line is the workspace. A session already read from state.db is not read again from its jsonl
(``duplicate_session``). Ids are ``messageId|id`` or ``<session>:<line>``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from itertools import groupby
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import Transcript, as_dict, as_text, env_dir
from memmy.sources.model import (
    Conversation,
    Role,
    ScanStats,
    extract_text,
    home_of,
    iter_jsonl,
    open_sqlite_readonly,
    table_columns,
    to_iso,
)

REQUIRED = {"id", "session_id", "role", "content", "timestamp"}
OPTIONAL = ("tool_call_id", "tool_calls", "tool_name", "active")
ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system"}


def tool_calls_of(value: Any, stats: ScanStats) -> list[dict[str, Any]]:
    """OpenAI ``tool_calls`` (a JSON string or a list) as a list of objects."""
    if isinstance(value, str) and value.strip():
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            stats.skip("bad_json")
            return []
    return [call for call in value if isinstance(call, dict)] if isinstance(value, list) else []


def add_message(
    transcript: Transcript,
    message_id: str,
    role: Any,
    content: str,
    at: str,
    record: Mapping[str, Any],
    stats: ScanStats,
) -> None:
    """Add one Hermes message (a state.db row or a legacy line) to the transcript."""
    if role == "tool":
        transcript.tool_result(
            message_id,
            at,
            record.get("tool_name") or record.get("name"),
            record.get("tool_call_id"),
            output=content or None,
        )
        return
    mapped = ROLES.get(role) if isinstance(role, str) else None
    if mapped is None:
        stats.skip("unknown_role")
        return
    calls = tool_calls_of(record.get("tool_calls"), stats) if mapped == "assistant" else []
    if content.strip() or not calls:
        transcript.text(message_id, mapped, content, at)
    for number, call in enumerate(calls):
        function = as_dict(call.get("function"))
        transcript.tool_call(
            f"{message_id}:{number}",
            at,
            function.get("name") or call.get("name"),
            call.get("id"),
            as_text(function.get("arguments", call.get("arguments"))),
        )


class HermesAdapter:
    """Reads Hermes' ``state.db`` and legacy ``sessions/*.jsonl`` transcripts."""

    name = "hermes"

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """The Hermes home."""
        return [env_dir(env, "HERMES_HOME") or home_of(env) / ".hermes"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Sessions from state.db first, then legacy jsonl sessions it does not hold."""
        for root in self.roots(env):
            seen: set[str] = set()
            if (root / "state.db").is_file():
                yield from self._from_db(root / "state.db", seen, stats)
            sessions = root / "sessions"
            if sessions.is_dir():
                for path in sorted(sessions.rglob("*.jsonl")):
                    conversation = self._from_jsonl(path, seen, stats)
                    if conversation is not None:
                        yield conversation

    def _from_db(self, path: Path, seen: set[str], stats: ScanStats) -> Iterator[Conversation]:
        try:
            conn = open_sqlite_readonly(path)
        except (sqlite3.Error, OSError) as exc:
            stats.errors.append(f"{path}: {exc}")
            return
        try:
            columns = table_columns(conn, "messages")
            if not REQUIRED <= columns:
                stats.skip("schema_mismatch")
                return
            stats.files += 1
            cwd: dict[str, str] = {}
            if {"id", "cwd"} <= table_columns(conn, "sessions"):
                cwd = {str(r["id"]): r["cwd"] for r in conn.execute("SELECT id, cwd FROM sessions") if r["cwd"]}
            extra = ", ".join(name if name in columns else f"NULL AS {name}" for name in OPTIONAL)
            rows = conn.execute(
                f"SELECT id, session_id, role, content, timestamp, {extra} FROM messages "
                "ORDER BY session_id, timestamp, id"
            )
            for session_id, group in groupby(rows, key=lambda row: str(row["session_id"])):
                seen.add(session_id)
                transcript = Transcript(self.name, session_id, cwd.get(session_id), stats)
                for row in group:
                    stats.records += 1
                    if row["active"] is not None and row["active"] == 0:
                        stats.skip("inactive_row")
                        continue
                    content = row["content"] if isinstance(row["content"], str) else ""
                    add_message(
                        transcript, str(row["id"]), row["role"], content, to_iso(row["timestamp"]), dict(row), stats
                    )
                conversation = transcript.conversation(f"{path}#{session_id}")
                if conversation is not None:
                    yield conversation
        except sqlite3.Error as exc:
            stats.errors.append(f"{path}: {exc}")
        finally:
            conn.close()

    def _from_jsonl(self, path: Path, seen: set[str], stats: ScanStats) -> Conversation | None:
        session_id = path.stem
        if session_id in seen:
            stats.skip("duplicate_session")
            return None
        stats.files += 1
        lines = list(iter_jsonl(path, stats))
        cwd = next((line["cwd"] for _, line in lines if isinstance(line.get("cwd"), str) and line["cwd"]), None)
        transcript = Transcript(self.name, session_id, cwd, stats)
        for number, raw in lines:
            record = _unwrap(raw)
            if record is None:
                stats.skip("non_message_record")
                continue
            message_id = record.get("messageId") or record.get("id") or f"{session_id}:{number}"
            at = to_iso(record.get("timestamp") or raw.get("timestamp"))
            content = extract_text(record.get("content"))
            add_message(transcript, str(message_id), record.get("role"), content, at, record, stats)
        return transcript.conversation(str(path))


def _unwrap(raw: dict[str, Any]) -> dict[str, Any] | None:
    """The message object of a legacy line (itself, its ``payload`` or its ``message``), or ``None``."""
    for candidate in (raw.get("payload") if raw.get("type") == "response_item" else None, raw.get("message"), raw):
        if isinstance(candidate, dict) and isinstance(candidate.get("role"), str):
            return candidate
    return None


ADAPTER = HermesAdapter()
