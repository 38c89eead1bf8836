"""Who is calling: user, project, source agent, host session key; derived from headers and body."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from memmy.domain import DEFAULT_SOURCE, DEFAULT_USER_ID, team_keys

KNOWN_SOURCES = (
    "claude_code",
    "codex",
    "cursor",
    "opencode",
    "openclaw",
    "hermes",
    "workbuddy",
    "pi",
    "qwenwork",
    "cli",
    "mcp",
    "unknown",
)


GIT_ROOT_TTL_S = 60.0  # a found repository is re-checked after this long
NO_ROOT_TTL_S = 2.0  # "not in a repository" is re-checked quickly: ``git init`` may come any time
_GIT_ROOTS: dict[str, tuple[float, str | None]] = {}


def git_root(path: str) -> str | None:
    """The git root above ``path`` (a ``.git`` dir or file), or None outside a repository.

    Cached briefly, not for the daemon's lifetime: a folder first seen before ``git init`` (or after the
    repository was removed) gets its project as soon as that changes.
    """
    now = time.monotonic()
    cached = _GIT_ROOTS.get(path)
    if cached is not None and now - cached[0] < (GIT_ROOT_TTL_S if cached[1] else NO_ROOT_TTL_S):
        return cached[1]
    current = Path(path).expanduser()
    found = next((str(c) for c in (current, *current.parents) if (c / ".git").exists()), None)
    if len(_GIT_ROOTS) >= 512:
        _GIT_ROOTS.pop(next(iter(_GIT_ROOTS)))
    _GIT_ROOTS[path] = (now, found)
    return found


def project_root(path: str) -> str:
    """The project of a working directory: its git root, else the directory itself."""
    return git_root(path) or str(Path(path).expanduser())


@dataclass(frozen=True)
class Namespace:
    """The caller's identity for scoping reads and stamping writes."""

    user_id: str = DEFAULT_USER_ID
    source: str = DEFAULT_SOURCE
    project_id: str | None = None
    workspace_path: str | None = None
    session_key: str | None = None
    profile_id: str = "default"
    #: Whose memories a read may see: None (the owner on their own machine) sees every memory of the store; a
    #: person sees their own memories and the team-scope memories of their team project, never another's private.
    reader: str | None = None
    #: The team project this caller opted into (``x-memmy-team-project``): it is the project id, and what the
    #: caller writes is shared with the team (``visibility = 'team'``).
    team_project: str | None = None

    @property
    def visibility(self) -> str:
        """What a write of this caller is stamped with: ``team`` inside a team project, else ``private``."""
        return "team" if self.team_project else "private"

    @property
    def key_owner(self) -> str:
        """Whose key graph the caller reads and writes: a team project's shared graph inside one (its keys point at
        the project's team memories, whoever wrote them), else the caller's own."""
        return team_keys(self.team_project) if self.team_project else self.user_id

    def may_read(self, author: str, visibility: str, project_id: str | None, *, write: bool = False) -> bool:
        """Whether the caller may read (``write``: change) a memory of ``author``: everyone on a store without
        people; a team server's person their own memories, and reads of the team memories of their team project."""
        if self.reader is None or author == self.reader:
            return True
        return not write and visibility == "team" and project_id == self.team_project

    @property
    def in_repository(self) -> bool:
        """True when the caller works inside a git repository (the ``auto`` scope then means ``project``)."""
        return bool(self.workspace_path and git_root(self.workspace_path))

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], default_user: str, person: str | None = None) -> Namespace:
        """Read the ``x-memmy-*`` headers (lower-case names).

        ``person``: the team member whose token authenticated the request; they are the user (whatever
        ``x-memmy-user-id`` says) and the reader. The owner reads as a person too inside a team project.
        """
        workspace = headers.get("x-memmy-workspace-path") or None
        team = (headers.get("x-memmy-team-project") or "").strip()[:200] or None
        project = team or headers.get("x-memmy-project-id") or (project_root(workspace) if workspace else None)
        user = person or headers.get("x-memmy-user-id") or default_user
        return cls(
            reader=user if person or team else None,
            team_project=team,
            user_id=user,
            source=normalise_source(headers.get("x-memmy-source") or DEFAULT_SOURCE),
            project_id=project,
            workspace_path=workspace,
            session_key=headers.get("x-memmy-session-key") or None,
            profile_id=headers.get("x-memmy-profile-id") or "default",
        )

    def with_body(self, source: object, workspace_path: object = None) -> Namespace:
        """Apply a body-level ``source`` / ``workspacePath`` (they win over headers)."""
        updated = self
        if isinstance(source, str) and source.strip():
            updated = replace(updated, source=normalise_source(source))
        if isinstance(workspace_path, str) and workspace_path.strip():
            project = self.team_project or project_root(workspace_path)
            updated = replace(updated, workspace_path=workspace_path, project_id=project)
        return updated


def normalise_source(value: str) -> str:
    """Lower-case, ``-`` to ``_``, and the aliases ``claude`` / ``claude-code`` to ``claude_code``."""
    cleaned = value.strip().lower().replace("-", "_")
    if cleaned in ("claude", "claudecode"):
        return "claude_code"
    return cleaned[:64] or DEFAULT_SOURCE
