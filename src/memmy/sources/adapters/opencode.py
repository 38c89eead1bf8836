"""OpenCode history: ``$XDG_DATA_HOME/opencode`` (default ``~/.local/share/opencode``).

v1.2+ keeps everything in ``opencode.db`` (SQLite, WAL); ``data`` columns hold the message/part JSON without
``id``/``sessionID``/``messageID``::

    session(id, project_id, directory, title, time_created, …)    project(id, worktree, …)
    message(id, session_id, time_created, time_updated, data)
        'msg_01JU', 'ses_01', 1780305834748, …, '{"role":"user","time":{"created":1780305834748}}'
    part(id, message_id, session_id, time_created, time_updated, data)
        'prt_01JU1', 'msg_01JU', 'ses_01', 1780305834757, …, '{"type":"text","text":"fix the tests"}'
        'prt_01JA2', 'msg_01JA', 'ses_01', …, '{"type":"tool","tool":"bash","callID":"c1",
            "state":{"status":"completed","input":{"command":"pytest"},"output":"3 passed"}}'

v1.1 and earlier wrote the same bodies (with their ids) as files, which stay on disk after the migration:
``storage/session/<project>/ses_*.json``, ``storage/message/<session>/msg_*.json``,
``storage/part/<message>/prt_*.json``. Sessions already read from the database are not read again
(``duplicate_session``).

Messages are ordered by (time, id) and parts by (time_created, id) (files: by id); times may be epoch ms or s.
``text`` parts make the message text (``synthetic``/``ignored`` ones are skipped as ``synthetic_part``; a text
run after the first gets the id ``<msg>:<prt>``), each ``tool`` part becomes a ``tool`` message with the part
id, and other part types (reasoning, file, step-*, patch, …) are skipped as ``unsupported_part``. The workspace is
``session.directory``, else the assistant's ``path.cwd``/``path.root``, else the project worktree.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.sources.adapters.shared import Transcript, as_dict, as_text, env_dir
from memmy.sources.model import (
    Conversation,
    Role,
    ScanStats,
    home_of,
    open_sqlite_readonly,
    table_columns,
    to_iso,
)

MESSAGE_COLUMNS = {"id", "session_id", "time_created", "data"}
PART_COLUMNS = {"id", "message_id", "time_created", "data"}
ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}


@dataclass
class Part:
    """One part: ``order`` sorts it inside its message, ``at`` dates it when it starts a text run."""

    id: str
    data: dict[str, Any]
    order: str
    at: str | None


@dataclass
class Message:
    """One message with its info JSON and parts."""

    id: str
    info: dict[str, Any]
    at: str
    parts: list[Part] = field(default_factory=list)


def parse_object(text: Any, stats: ScanStats) -> dict[str, Any] | None:
    """A JSON object from a ``data`` column, or ``None`` (counted as ``bad_json``)."""
    try:
        value = json.loads(text) if isinstance(text, str | bytes) else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        value = None
    if not isinstance(value, dict):
        stats.skip("bad_json")
        return None
    return value


def read_json(path: Path, stats: ScanStats) -> dict[str, Any] | None:
    """A JSON object file, or ``None`` (unreadable files go to ``stats.errors``)."""
    stats.files += 1
    stats.records += 1
    try:
        text = path.read_bytes()
    except OSError as exc:
        stats.errors.append(f"{path}: {exc.strerror or exc}")
        return None
    return parse_object(text, stats)


def created_of(info: dict[str, Any], fallback: Any) -> str:
    """The message time: ``time.created`` in the JSON, else the row's ``time_created``."""
    time = info.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    return to_iso(created if created is not None else fallback)


def part_time(data: dict[str, Any]) -> Any:
    """A file part's own start time (text ``time.start`` or tool ``state.time.start``), if any."""
    for holder in (data, data.get("state")):
        time = holder.get("time") if isinstance(holder, dict) else None
        if isinstance(time, dict) and time.get("start") is not None:
            return time["start"]
    return None


def workspace_of(directory: Any, messages: list[Message], worktree: Any) -> str | None:
    """``session.directory``, else a message's ``path.cwd``/``path.root``, else the project worktree."""
    if isinstance(directory, str) and directory:
        return directory
    for message in messages:
        path = message.info.get("path")
        if isinstance(path, dict):
            for key in ("cwd", "root"):
                if isinstance(path.get(key), str) and path[key]:
                    return str(path[key])
    return worktree if isinstance(worktree, str) and worktree not in ("", "/") else None


class OpenCodeAdapter:
    """Reads ``opencode.db`` and the older ``storage/`` JSON files."""

    name = "opencode"

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """OpenCode's data directory."""
        data = env_dir(env, "XDG_DATA_HOME") or home_of(env) / ".local" / "share"
        return [data / "opencode"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Sessions from the database, then file-storage sessions the database does not hold."""
        for root in self.roots(env):
            seen: set[str] = set()
            if (root / "opencode.db").is_file():
                yield from self._from_db(root / "opencode.db", seen, stats)
            if (root / "storage" / "message").is_dir():
                yield from self._from_files(root / "storage", seen, stats)

    def _from_db(self, path: Path, seen: set[str], stats: ScanStats) -> Iterator[Conversation]:
        try:
            conn = open_sqlite_readonly(path)
        except (sqlite3.Error, OSError) as exc:
            stats.errors.append(f"{path}: {exc}")
            return
        try:
            if not (MESSAGE_COLUMNS <= table_columns(conn, "message") and PART_COLUMNS <= table_columns(conn, "part")):
                stats.skip("schema_mismatch")
                return
            stats.files += 1
            sessions = self._sessions(conn)
            ids = [str(r[0]) for r in conn.execute("SELECT DISTINCT session_id FROM message ORDER BY session_id")]
            for session_id in ids:
                seen.add(session_id)
                messages: dict[str, Message] = {}
                for row in conn.execute(
                    "SELECT id, time_created, data FROM message WHERE session_id = ?", (session_id,)
                ):
                    stats.records += 1
                    info = parse_object(row["data"], stats)
                    if info is not None:
                        messages[str(row["id"])] = Message(str(row["id"]), info, created_of(info, row["time_created"]))
                parts = conn.execute(
                    "SELECT p.id, p.message_id, p.time_created, p.data FROM part p "
                    "JOIN message m ON m.id = p.message_id WHERE m.session_id = ?",
                    (session_id,),
                )
                for row in parts:
                    stats.records += 1
                    data = parse_object(row["data"], stats)
                    owner = messages.get(str(row["message_id"]))
                    if data is not None and owner is not None:
                        at = to_iso(row["time_created"])
                        owner.parts.append(Part(str(row["id"]), data, at, at))
                directory, worktree = sessions.get(session_id, (None, None))
                conversation = self._build(
                    session_id, directory, worktree, list(messages.values()), f"{path}#{session_id}", stats
                )
                if conversation is not None:
                    yield conversation
        except sqlite3.Error as exc:
            stats.errors.append(f"{path}: {exc}")
        finally:
            conn.close()

    @staticmethod
    def _sessions(conn: sqlite3.Connection) -> dict[str, tuple[Any, Any]]:
        """session id -> (directory, project worktree), from whichever columns exist."""
        columns = table_columns(conn, "session")
        if "id" not in columns:
            return {}
        directory = "s.directory" if "directory" in columns else "NULL"
        worktree = "NULL"
        if "project_id" in columns and {"id", "worktree"} <= table_columns(conn, "project"):
            worktree = "(SELECT p.worktree FROM project p WHERE p.id = s.project_id)"
        rows = conn.execute(f"SELECT s.id, {directory}, {worktree} FROM session s")
        return {str(row[0]): (row[1], row[2]) for row in rows}

    def _from_files(self, storage: Path, seen: set[str], stats: ScanStats) -> Iterator[Conversation]:
        infos: dict[str, dict[str, Any]] = {}
        for path in sorted((storage / "session").rglob("ses_*.json")):
            info = read_json(path, stats)
            if info is not None:
                infos[str(info.get("id") or path.stem)] = info
        for folder in sorted(p for p in (storage / "message").iterdir() if p.is_dir()):
            session_id = folder.name
            if session_id in seen:
                stats.skip("duplicate_session")
                continue
            messages: list[Message] = []
            for path in sorted(folder.glob("*.json")):
                info = read_json(path, stats)
                if info is None:
                    continue
                message = Message(str(info.get("id") or path.stem), info, created_of(info, None))
                for part_path in sorted((storage / "part" / message.id).glob("*.json")):
                    data = read_json(part_path, stats)
                    if data is not None:
                        time = part_time(data)
                        message.parts.append(
                            Part(
                                str(data.get("id") or part_path.stem), data, "", None if time is None else to_iso(time)
                            )
                        )
                messages.append(message)
            info = infos.get(session_id, {})
            conversation = self._build(session_id, info.get("directory"), None, messages, str(folder), stats)
            if conversation is not None:
                yield conversation

    def _build(
        self, session_id: str, directory: Any, worktree: Any, messages: list[Message], origin: str, stats: ScanStats
    ) -> Conversation | None:
        messages.sort(key=lambda m: (m.at, m.id))
        transcript = Transcript(self.name, session_id, workspace_of(directory, messages, worktree), stats)
        for message in messages:
            role = ROLES.get(str(message.info.get("role")))
            if role is None:
                stats.skip("unknown_role")
                continue
            self._add_parts(transcript, message, role, stats)
        return transcript.conversation(origin)

    @staticmethod
    def _add_parts(transcript: Transcript, message: Message, role: Role, stats: ScanStats) -> None:
        """Text runs and tool parts of one message, in part order (a run after a tool is dated by its part)."""
        texts: list[str] = []
        run_id, run_at = message.id, message.at
        runs = tools = 0

        def flush() -> None:
            nonlocal runs
            if texts:
                transcript.text(run_id, role, "\n".join(texts), run_at)
                texts.clear()
                runs += 1

        for part in sorted(message.parts, key=lambda p: (p.order, p.id)):
            kind = part.data.get("type")
            if kind == "text" and (part.data.get("synthetic") or part.data.get("ignored")):
                stats.skip("synthetic_part")
            elif kind == "text" and isinstance(part.data.get("text"), str):
                if not texts and (runs or tools):
                    run_id = f"{message.id}:{part.id}" if runs else message.id
                    run_at = part.at or message.at
                texts.append(part.data["text"])
            elif kind == "tool":
                flush()
                state = as_dict(part.data.get("state"))
                status = state.get("status")
                transcript.tool_call(
                    part.id,
                    part.at or message.at,
                    part.data.get("tool"),
                    part.data.get("callID"),
                    as_text(state.get("input")),
                    output=as_text(state.get("output")) if status == "completed" else None,
                    error=as_text(state.get("error")) if status == "error" else None,
                    status=status if isinstance(status, str) else None,
                )
                tools += 1
            else:
                stats.skip("unsupported_part")
        flush()
        if not runs and not tools:
            stats.skip("empty_message")


ADAPTER = OpenCodeAdapter()
