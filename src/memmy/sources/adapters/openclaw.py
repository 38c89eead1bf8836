"""OpenClaw history: ``$OPENCLAW_STATE_DIR`` (default ``~/.openclaw``).

Transcripts are written by pi's ``SessionManager``, so every record is a pi v3 entry (see
:mod:`memmy.sources.adapters.pi`). Two containers:

* newest builds (2026.9+): ``agents/<agentId>/agent/openclaw-agent.sqlite`` (openclaw ``src/state/
  openclaw-agent-schema.sql``), where each row of ``transcript_events`` is one logical JSONL line::

      transcript_events(session_id TEXT, seq INTEGER, event_json TEXT, created_at INTEGER,
                        PRIMARY KEY (session_id, seq))
      ('9a1f…', 0, '{"type":"session","version":3,"id":"9a1f…","cwd":"/home/u/.openclaw/workspace"}', 1757325600000)
      ('9a1f…', 1, '{"type":"message","id":"a1b2c3d4","parentId":null,"message":{"role":"user",…}}', …)

* older builds and archives: ``agents/<agentId>/sessions/<sessionId>.jsonl`` (topics
  ``<sessionId>-topic-<threadId>.jsonl``, pruned ones under ``archive/``) and legacy ``sessions/*.jsonl``.
  Soft-deleted ``*.jsonl.deleted.<ts>`` files are not read.

The conversation id is the database ``session_id`` or the file stem; a file whose session the database (or an
earlier file) already gave is skipped (``duplicate_session``). The workspace is the header ``cwd``. Unlike upstream
memmy, other SQLite files under the state directory (plugin memory stores) are not read: they copy these transcripts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from memmy.sources.adapters.pi import build_conversation, header_of
from memmy.sources.adapters.shared import env_dir
from memmy.sources.model import (
    Conversation,
    ScanStats,
    home_of,
    iter_jsonl,
    open_sqlite_readonly,
    table_columns,
)

EVENT_COLUMNS = {"session_id", "seq", "event_json"}


def cwd_of(entries: list[dict[str, Any]]) -> str | None:
    """The session header's ``cwd``."""
    cwd = header_of(entries).get("cwd")
    return cwd if isinstance(cwd, str) and cwd else None


class OpenClawAdapter:
    """Reads OpenClaw's per-agent SQLite transcripts and its session JSONL files."""

    name = "openclaw"

    def roots(self, env: Mapping[str, str]) -> list[Path]:
        """The OpenClaw state directory."""
        return [env_dir(env, "OPENCLAW_STATE_DIR") or home_of(env) / ".openclaw"]

    def conversations(self, env: Mapping[str, str], stats: ScanStats) -> Iterator[Conversation]:
        """Database sessions first, then JSONL sessions the databases do not hold."""
        for root in self.roots(env):
            seen: set[str] = set()
            for db in sorted(root.glob("agents/*/agent/openclaw-agent.sqlite")):
                yield from self._from_db(db, seen, stats)
            files = sorted(root.glob("agents/*/sessions/**/*.jsonl")) + sorted(root.glob("sessions/**/*.jsonl"))
            for path in files:
                if path.stem in seen:
                    stats.skip("duplicate_session")
                    continue
                seen.add(path.stem)
                stats.files += 1
                entries = [obj for _, obj in iter_jsonl(path, stats)]
                conversation = build_conversation(entries, self.name, str(path), path.stem, cwd_of(entries), stats)
                if conversation is not None:
                    yield conversation

    def _from_db(self, path: Path, seen: set[str], stats: ScanStats) -> Iterator[Conversation]:
        try:
            conn = open_sqlite_readonly(path)
        except (sqlite3.Error, OSError) as exc:
            stats.errors.append(f"{path}: {exc}")
            return
        try:
            if not EVENT_COLUMNS <= table_columns(conn, "transcript_events"):
                stats.skip("schema_mismatch")
                return
            stats.files += 1
            ids = [str(r[0]) for r in conn.execute("SELECT DISTINCT session_id FROM transcript_events ORDER BY 1")]
            for session_id in ids:
                seen.add(session_id)
                entries: list[dict[str, Any]] = []
                rows = conn.execute(
                    "SELECT event_json FROM transcript_events WHERE session_id = ? ORDER BY seq", (session_id,)
                )
                for (event_json,) in rows:
                    stats.records += 1
                    try:
                        entry = json.loads(event_json)
                    except (TypeError, json.JSONDecodeError, UnicodeDecodeError):
                        entry = None
                    if isinstance(entry, dict):
                        entries.append(entry)
                    else:
                        stats.skip("bad_json")
                conversation = build_conversation(
                    entries, self.name, f"{path}#{session_id}", session_id, cwd_of(entries), stats
                )
                if conversation is not None:
                    yield conversation
        except sqlite3.Error as exc:
            stats.errors.append(f"{path}: {exc}")
        finally:
            conn.close()


ADAPTER = OpenClawAdapter()
