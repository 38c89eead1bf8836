"""Local, resumable agent sessions: one JSON file per session under ``$MEMMY_HOME/agent/sessions``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
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

    @property
    def key(self) -> str:
        """The memory session key: one memory session per agent session."""
        return f"{self.name}\x00{self.created}"

    @property
    def turns(self) -> int:
        """How many user messages the session holds."""
        return sum(1 for m in self.messages if m.get("role") == "user")


def file_name(name: str) -> str:
    """A safe, collision-free file name for a session name like ``cli:work``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:60]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.json"


class SessionStore:
    """Loads and saves sessions atomically."""

    def __init__(self, home: Path) -> None:
        self.dir = home / "agent" / "sessions"

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
        known = {k: v for k, v in data.items() if k in Session.__dataclass_fields__}
        session = Session(**known)
        if project and not session.project:
            session.project = project
        return session

    def save(self, session: Session) -> None:
        """Write the session (0600, atomic)."""
        session.updated = time.time()
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self.path(session.name)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(asdict(session), ensure_ascii=False), encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)

    def list(self) -> list[Session]:
        """Every saved session, most recently used first."""
        found = []
        for path in self.dir.glob("*.json") if self.dir.exists() else []:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                found.append(Session(**{k: v for k, v in data.items() if k in Session.__dataclass_fields__}))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(found, key=lambda s: s.updated, reverse=True)
