"""Cursor chat history in the ``state.vscdb`` SQLite files of Cursor's User directory.

User directory: ``$MEMMY_CURSOR_USER_DIR``, else ``~/Library/Application Support/Cursor/User`` (macOS),
``%APPDATA%/Cursor/User`` (Windows) or ``$XDG_CONFIG_HOME|~/.config`` + ``/Cursor/User`` (Linux). It holds
``globalStorage/state.vscdb`` and ``workspaceStorage/<hash>/{state.vscdb,workspace.json}``; workspace.json is
``{"folder": "file:///home/u/proj"}`` (or ``"workspace"``). Both tables are ``(key TEXT UNIQUE, value BLOB)``
holding JSON::

    cursorDiskKV  composerData:<cid>        {"composerId":"<cid>","createdAt":1766691308486,
                                             "fullConversationHeadersOnly":[{"bubbleId":"b1","type":1}, ...]}
    cursorDiskKV  bubbleId:<cid>:<bid>      {"type":1,"bubbleId":"b1","text":"fix the test","createdAt":"2025-..."}
    ItemTable     composer.composerData     {"allComposers":[{"composerId":"<cid>"}]}   (links cid to workspace)
    ItemTable     workbench.panel.aichat.view.aichat.chatdata
                                            {"tabs":[{"tabId","bubbles":[{"type":"user"|"ai","text"}]}]}

One conversation per composer (id ``composerId``, message id ``bubbleId``) or legacy chat tab (``tabId``).
Order: the composer's ``fullConversationHeadersOnly``, else its inline ``conversation``, else bubble time then
insertion order. Time: the bubble's ``createdAt`` (or ``timingInfo.clientStartTime``); a bubble without one takes
the previous message's time, starting from the composer's ``createdAt``. Type 1 → user, 2 → assistant; an assistant
bubble's ``toolFormerData{name,rawArgs|params,result,status,toolCallId}`` becomes one ``tool`` message holding
input and output (id ``bubbleId``, or ``bubbleId:tool`` next to text). Workspace composers are read before the
global database so that the global copy of a composer takes its workspace from ``composer.composerData``.

Skip reasons: ``malformed_value``, ``missing_bubble``, ``unreferenced_bubble``, ``unknown_bubble_type``,
``empty_message``, ``empty_conversation``, ``duplicate_conversation``. Unreadable databases go to ``stats.errors``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from memmy.sources.adapters.shared import tool_content
from memmy.sources.model import (
    EPOCH,
    Conversation,
    Role,
    ScanStats,
    SourceMessage,
    git_root_of,
    home_of,
    open_sqlite_readonly,
    table_columns,
    to_iso,
)

SOURCE = "cursor"
_LEGACY_CHAT_KEY = "workbench.panel.aichat.view.aichat.chatdata"
_ROLES: dict[Any, Role] = {1: "user", 2: "assistant", "user": "user", "ai": "assistant", "assistant": "assistant"}
_DRIVE = re.compile(r"^/[A-Za-z]:")
Bubble = dict[str, Any]


def cursor_user_dir(env: Mapping[str, str], platform: str = sys.platform) -> Path:
    """Cursor's ``User`` directory for ``platform`` (``MEMMY_CURSOR_USER_DIR`` wins)."""
    override = env.get("MEMMY_CURSOR_USER_DIR")
    if override:
        return Path(override)
    home = home_of(env)
    if platform == "darwin":
        return home / "Library" / "Application Support" / "Cursor" / "User"
    if platform.startswith("win"):
        appdata = env.get("APPDATA")
        return (Path(appdata) if appdata else home / "AppData" / "Roaming") / "Cursor" / "User"
    config = env.get("XDG_CONFIG_HOME")
    return (Path(config) if config else home / ".config") / "Cursor" / "User"


def uri_to_path(uri: str) -> str | None:
    """Decode a workspace URI (``file:///home/u/my%20proj`` → ``/home/u/my proj``; ``file:///c%3A/x`` → ``c:/x``)."""
    parts = urlsplit(uri)
    if not parts.scheme or len(parts.scheme) == 1:  # a plain path (or a Windows drive letter)
        return uri or None
    path = unquote(parts.path)
    if _DRIVE.match(path):
        path = path[1:]
    elif parts.scheme == "file" and parts.netloc:
        path = f"//{parts.netloc}{path}"
    return path or None


def workspace_folder(workspace_json: Path) -> str | None:
    """The folder a ``workspaceStorage/<hash>/workspace.json`` names, decoded to a path."""
    try:
        data = json.loads(workspace_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    uri = data.get("folder") or data.get("workspace") if isinstance(data, dict) else None
    return uri_to_path(uri) if isinstance(uri, str) else None


def _load(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return None


def _item(conn: sqlite3.Connection, key: str, stats: ScanStats) -> Any:
    rows = conn.execute("SELECT value FROM ItemTable WHERE key = ?", (key,)).fetchall()
    if not rows:
        return None
    stats.records += 1
    data = _load(rows[0][0])
    if data is None:
        stats.skip("malformed_value")
    return data


def _bubble_time(bubble: Bubble) -> str:
    when = to_iso(bubble.get("createdAt") or bubble.get("timestamp"))
    timing = bubble.get("timingInfo")
    if when == EPOCH and isinstance(timing, dict):
        when = to_iso(timing.get("clientStartTime"))
    return when


def _order(composer: dict[str, Any] | None, bubbles: dict[str, tuple[int, Bubble]], stats: ScanStats) -> list[Bubble]:
    """The composer's bubbles in conversation order (see the module docstring)."""
    headers = composer.get("fullConversationHeadersOnly") if composer else None
    inline = composer.get("conversation") if composer else None
    refs = headers if isinstance(headers, list) and headers else inline if isinstance(inline, list) else None
    if not refs:
        ranked = sorted(bubbles.items(), key=lambda kv: (_bubble_time(kv[1][1]), kv[1][0]))
        return [{**bubble, "bubbleId": bubble.get("bubbleId") or bid} for bid, (_, bubble) in ranked]
    ordered: list[Bubble] = []
    for ref in refs:
        stored = bubbles.pop(str(ref["bubbleId"]), None) if isinstance(ref, dict) and ref.get("bubbleId") else None
        if stored is not None:
            ordered.append({**ref, **stored[1]})  # the header gives order (and type), the stored bubble the rest
        elif isinstance(ref, dict) and refs is inline and "text" in ref:
            ordered.append(dict(ref))  # an older inline conversation entry carries its own text
        else:
            stats.skip("missing_bubble")
    if bubbles:
        stats.skip("unreferenced_bubble", len(bubbles))
    return ordered


def _messages(conversation_id: str, bubbles: list[Bubble], start: str, stats: ScanStats) -> list[SourceMessage]:
    messages: list[SourceMessage] = []
    last = start
    for index, bubble in enumerate(bubbles):
        role = _ROLES.get(bubble.get("type"))
        if role is None:
            stats.skip("unknown_bubble_type")
            continue
        when = _bubble_time(bubble)
        last = when if when != EPOCH else last
        bubble_id = str(bubble.get("bubbleId") or bubble.get("id") or f"{conversation_id}:{index}")
        raw_text = bubble.get("text")
        text = raw_text if isinstance(raw_text, str) else ""
        if text.strip():
            messages.append(SourceMessage(bubble_id, conversation_id, role, text, last, SOURCE))
        tool = bubble.get("toolFormerData")
        if role == "assistant" and isinstance(tool, dict) and tool.get("name"):
            tool_id = f"{bubble_id}:tool" if text.strip() else bubble_id
            messages.append(_tool_message(SourceMessage(tool_id, conversation_id, "tool", "", last, SOURCE), tool))
        elif not text.strip():
            stats.skip("empty_message")
    return messages


def _tool_message(shell: SourceMessage, tool: dict[str, Any]) -> SourceMessage:
    """Fill an empty tool message from ``toolFormerData`` (call and result live in the same bubble)."""
    name = str(tool["name"])
    call_id = str(tool.get("toolCallId") or shell.message_id.removesuffix(":tool"))
    raw_input = tool.get("rawArgs") if tool.get("rawArgs") is not None else tool.get("params")
    tool_input = None if raw_input is None else raw_input if isinstance(raw_input, str) else json.dumps(raw_input)
    raw_result = tool.get("result")
    result = None if raw_result is None else raw_result if isinstance(raw_result, str) else json.dumps(raw_result)
    status = tool.get("status") if isinstance(tool.get("status"), str) else None
    output, error = (None, result or status) if status == "error" else (result, None)
    content = tool_content(name, call_id, tool_input, output, error, status)
    return replace(
        shell,
        content=content,
        tool_name=name,
        tool_call_id=call_id,
        tool_input=tool_input,
        tool_output=output,
        tool_error=error,
    )


class CursorAdapter:
    """Reads Cursor composer and legacy chat history from its SQLite state databases."""

    name = SOURCE

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """Cursor's ``User`` directory for this platform (``MEMMY_CURSOR_USER_DIR`` overrides)."""
        return [cursor_user_dir(env)]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Workspace databases first (they say which workspace owns a composer), then the global one."""
        scan = _Scan(stats)
        for user_dir in self.roots(env):
            storage = user_dir / "workspaceStorage"
            for db in sorted(storage.glob("*/state.vscdb")) if storage.is_dir() else []:
                workspace = workspace_folder(db.parent / "workspace.json")
                yield from self._database(db, workspace, scan)
            global_db = user_dir / "globalStorage" / "state.vscdb"
            if global_db.is_file():
                yield from self._database(global_db, None, scan)

    def _database(self, db: Path, workspace: str | None, scan: _Scan) -> Iterator[Conversation]:
        stats = scan.stats
        try:
            conn = open_sqlite_readonly(db)
        except (sqlite3.Error, OSError) as exc:
            stats.errors.append(f"{db}: {exc}")
            return
        stats.files += 1
        with closing(conn):
            try:
                yield from self._read(conn, db, workspace, scan)
            except sqlite3.Error as exc:
                stats.errors.append(f"{db}: {exc}")

    def _read(self, conn: sqlite3.Connection, db: Path, workspace: str | None, scan: _Scan) -> Iterator[Conversation]:
        stats = scan.stats
        if table_columns(conn, "ItemTable"):
            index = _item(conn, "composer.composerData", stats)
            entries = index.get("allComposers") if isinstance(index, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                cid = entry.get("composerId") if isinstance(entry, dict) else None
                if not isinstance(cid, str):
                    continue
                if workspace:
                    scan.owners.setdefault(cid, workspace)
                if isinstance(entry.get("conversation"), list) and entry["conversation"]:
                    yield from scan.emit(db, cid, _messages_of(cid, entry, {}, stats), workspace)
            chat = _item(conn, _LEGACY_CHAT_KEY, stats)
            tabs = chat.get("tabs") if isinstance(chat, dict) else None
            for tab in tabs if isinstance(tabs, list) else []:
                if isinstance(tab, dict) and tab.get("tabId") and isinstance(tab.get("bubbles"), list):
                    tid = str(tab["tabId"])
                    start = to_iso(tab.get("lastSendTime") or tab.get("createdAt"))
                    yield from scan.emit(db, tid, _messages(tid, tab["bubbles"], start, stats), workspace)
        if table_columns(conn, "cursorDiskKV"):
            yield from self._composers(conn, db, workspace, scan)

    def _composers(
        self, conn: sqlite3.Connection, db: Path, workspace: str | None, scan: _Scan
    ) -> Iterator[Conversation]:
        # Every query is read to the end before anything is yielded: no read lock is held on Cursor's live
        # database while the importer works on a conversation.
        stats = scan.stats
        keys = conn.execute("SELECT key FROM cursorDiskKV WHERE key >= 'composerData:' AND key < 'composerData;'")
        listed = [str(key).split(":", 1)[1] for (key,) in keys.fetchall()]
        for cid in listed:
            row = conn.execute("SELECT value FROM cursorDiskKV WHERE key = ?", (f"composerData:{cid}",)).fetchall()
            stats.records += 1
            composer = _load(row[0][0]) if row else None
            if not isinstance(composer, dict):
                stats.skip("malformed_value")
                continue
            messages = _messages_of(cid, composer, _bubbles(conn, cid, stats), stats)
            yield from scan.emit(db, cid, messages, scan.owners.get(cid, workspace))
        bubble_keys = conn.execute("SELECT key FROM cursorDiskKV WHERE key >= 'bubbleId:' AND key < 'bubbleId;'")
        orphans = {str(key).split(":")[1] for (key,) in bubble_keys if str(key).count(":") >= 2}
        for cid in sorted(orphans - set(listed)):
            messages = _messages_of(cid, None, _bubbles(conn, cid, stats), stats)
            yield from scan.emit(db, cid, messages, scan.owners.get(cid, workspace))


def _bubbles(conn: sqlite3.Connection, cid: str, stats: ScanStats) -> dict[str, tuple[int, Bubble]]:
    """``bubbleId -> (rowid, bubble)`` for one composer."""
    found: dict[str, tuple[int, Bubble]] = {}
    query = "SELECT rowid, key, value FROM cursorDiskKV WHERE key >= ? AND key < ?"
    for rowid, key, value in conn.execute(query, (f"bubbleId:{cid}:", f"bubbleId:{cid};")).fetchall():
        stats.records += 1
        bubble = _load(value)
        if not isinstance(bubble, dict):
            stats.skip("malformed_value")
            continue
        found[str(key).split(":", 2)[2]] = (int(rowid), bubble)
    return found


def _messages_of(
    cid: str, composer: dict[str, Any] | None, bubbles: dict[str, tuple[int, Bubble]], stats: ScanStats
) -> list[SourceMessage]:
    start = to_iso(composer.get("createdAt")) if composer else EPOCH
    return _messages(cid, _order(composer, bubbles, stats), start, stats)


@dataclass
class _Scan:
    """State shared by all databases of one scan: composer owners, conversations already yielded, git roots."""

    stats: ScanStats
    owners: dict[str, str] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    git_roots: dict[str, str | None] = field(default_factory=dict)

    def emit(self, db: Path, cid: str, messages: list[SourceMessage], workspace: str | None) -> Iterator[Conversation]:
        """Yield the conversation once (first database wins), with workspace and git root filled in."""
        if cid in self.seen:
            self.stats.skip("duplicate_conversation")
            return
        self.seen.add(cid)
        if not messages:
            self.stats.skip("empty_conversation")
            return
        if workspace and workspace not in self.git_roots:
            self.git_roots[workspace] = git_root_of(workspace) if Path(workspace).is_absolute() else None
        root = self.git_roots.get(workspace) if workspace else None
        done = [replace(m, workspace_path=workspace, git_root=root) for m in messages]
        self.stats.messages += len(done)
        yield Conversation(SOURCE, cid, done, f"{db}#{cid}", workspace)


ADAPTER = CursorAdapter()
