"""Local, resumable agent sessions: one JSON file per session under ``$MEMMY_HOME/agent/sessions``, shared by
``memmy agent``, the TUI and the workbench of ``memmy serve`` (a session started in one continues in the others).
The workbench's list metadata (title, pinned, archived, unread) lives in the same file; files written before
those fields existed load with their defaults, and unknown keys are ignored."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memmy.agent.config import DEFAULT_SESSION


@dataclass
class Session:
    """One conversation: its messages (OpenAI shape, no system prompt), compactions, goal and usage."""

    name: str
    project: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    goal: dict[str, Any] | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    preset: str = "default"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    title: str = ""
    pinned: bool = False
    archived: bool = False
    unread: bool = False

    @property
    def id(self) -> str:
        """The session's id in URLs: its file name without ``.json`` (safe, unique per name)."""
        return file_name(self.name).removesuffix(".json")

    @property
    def label(self) -> str:
        """What a list shows: the title, else the first user message, else the name."""
        if self.title:
            return self.title
        first = next((m.get("content") for m in self.messages if m.get("role") == "user"), None)
        text = first if isinstance(first, str) else ""
        text = text.split("<attachment name=", 1)[0].split("[image attached: ", 1)[0]  # the user's own words
        return " ".join(text.split())[:80] or self.name

    @property
    def key(self) -> str:
        """The memory session key: one memory session per agent session."""
        return f"{self.name}\x00{self.created}"

    @property
    def turns(self) -> int:
        """How many user messages the session holds."""
        return sum(1 for m in self.messages if m.get("role") == "user")


def from_dict(data: dict[str, Any]) -> Session:
    """A session from its saved JSON (unknown keys ignored, missing ones defaulted)."""
    return Session(**{k: v for k, v in data.items() if k in Session.__dataclass_fields__})


def to_json(session: Session) -> str:
    """The session's saved JSON (encoded straight from its fields: ``dataclasses.asdict`` deep-copied every message
    first, which cost more than the encoding)."""
    return json.dumps({name: getattr(session, name) for name in Session.__dataclass_fields__}, ensure_ascii=False)


def file_name(name: str) -> str:
    """A safe, collision-free file name for a session name like ``cli:work``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:60]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.json"


class SessionStore:
    """Loads and saves sessions atomically."""

    def __init__(self, home: Path) -> None:
        self.dir = home / "agent" / "sessions"
        self._heads: dict[Path, tuple[tuple[int, int], Session, int]] = {}
        self._writing = threading.Lock()
        self._order = itertools.count()  # when each copy was taken: an older one never replaces a newer one
        self._written: dict[Path, int] = {}

    def path(self, name: str) -> Path:
        """Where the session ``name`` lives."""
        return self.dir / file_name(name)

    def exists(self, name: str) -> bool:
        """Whether a session of that name was saved."""
        return self.path(name).exists()

    def load(self, name: str = DEFAULT_SESSION, project: str | None = None) -> Session:
        """The saved session, or a new one (not written until the first save)."""
        try:
            data = json.loads(self.path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return Session(name=name, project=project)
        session = from_dict(data)
        if project and not session.project:
            session.project = project
        return session

    def by_id(self, session_id: str) -> Session | None:
        """The saved session whose :attr:`Session.id` is ``session_id``, or None."""
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,80}", session_id) or session_id.startswith("."):
            return None
        try:
            return from_dict(json.loads((self.dir / f"{session_id}.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None

    def delete(self, session: Session) -> bool:
        """Remove the session's file; whether there was one."""
        try:
            self.path(session.name).unlink()
        except FileNotFoundError:
            return False
        return True

    def save(self, session: Session, touch: bool = True) -> None:
        """Write the session (0600, atomic); ``touch=False`` keeps its ``updated`` time (a rename, a pin)."""
        if touch:
            session.updated = time.time()
        self._write(self.path(session.name), to_json(session), next(self._order))

    async def save_async(self, session: Session) -> None:
        """:meth:`save` with the file written in a thread: a host of many sessions (``memmy serve`` with chat
        channels) keeps serving the others while one is written. The session is encoded first, on the caller's
        loop, so it may change while the file is written."""
        session.updated = time.time()
        await asyncio.to_thread(self._write, self.path(session.name), to_json(session), next(self._order))

    def _write(self, target: Path, text: str, order: int) -> None:
        with self._writing:  # one writer at a time (the temporary file is shared by the saves of a session)
            if order < self._written.get(target, -1):
                return  # a newer copy of the session (taken later) is on disk already
            self._written[target] = order
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)

    def heads(self) -> list[tuple[Session, int]]:
        """Every saved session with its number of turns, most recently used first; each session holds only its first
        user message (what a list shows). A file is read again only when its time or size changed."""
        found: dict[Path, tuple[tuple[int, int], Session, int]] = {}
        for path in self.dir.glob("*.json") if self.dir.exists() else []:
            try:
                stat = path.stat()
                stamp = (stat.st_mtime_ns, stat.st_size)
                known = self._heads.get(path)
                if known is None or known[0] != stamp:
                    full = from_dict(json.loads(path.read_text(encoding="utf-8")))
                    first = next(([m] for m in full.messages if m.get("role") == "user"), [])
                    known = (stamp, replace(full, messages=first), full.turns)
            except (OSError, ValueError, TypeError):
                continue
            found[path] = known
        self._heads = found
        return sorted(((s, turns) for _, s, turns in found.values()), key=lambda row: row[0].updated, reverse=True)

    def list(self) -> list[Session]:
        """Every saved session, most recently used first."""
        found = []
        for path in self.dir.glob("*.json") if self.dir.exists() else []:
            try:
                found.append(from_dict(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(found, key=lambda s: s.updated, reverse=True)
