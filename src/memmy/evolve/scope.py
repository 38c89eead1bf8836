"""Scope of derived memory (L2, L3, Skills): the project(s) its evidence comes from.

A derived memory that rests on one project is stored with that project (and so recalled only there). One whose
evidence spans several projects is global only when its text names nothing project-specific (a project's
name, a file path, a scoped package); otherwise it is recalled only in the projects of its evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from memmy.kinds import memory as stored

_FILE_PATH = re.compile(
    r"(?:[\w.\-@~]+/)+[\w.\-]+|\b[\w\-]+\.(?:py|js|ts|tsx|jsx|json|ya?ml|toml|rs|go|java|tf|tfvars|sql|csv)\b"
)
_SCOPED_PACKAGE = re.compile(r"@[\w\-]+/[\w\-]+")


@dataclass(frozen=True)
class DerivedScope:
    """Where a derived memory may be recalled."""

    project_id: str | None  # the one project, else None
    projects: list[str]  # every project of the evidence
    is_global: bool

    def to_json(self) -> dict[str, Any]:
        """The ``properties.scope`` shape."""
        return {"projects": self.projects, "global": self.is_global}


def names_project_specific(text: str, projects: Iterable[str]) -> bool:
    """True when ``text`` names a project, a file path or a scoped package."""
    lowered = text.lower()
    for project in projects:
        name = PurePath(project).name.lower()
        if len(name) >= 3 and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", lowered):
            return True
    return bool(_FILE_PATH.search(text) or _SCOPED_PACKAGE.search(text))


def derived_scope(projects: Iterable[str | None], text: str) -> DerivedScope:
    """The scope of a derived memory from its evidence projects and its text."""
    found = sorted({p for p in projects if p})
    if not found:
        return DerivedScope(None, [], True)  # evidence from outside any project: pooled, as before
    if len(found) == 1:
        return DerivedScope(found[0], found, False)
    return DerivedScope(None, found, not names_project_specific(text, found))


def visible_in(properties: dict[str, Any], project_id: str | None) -> bool:
    """May a derived memory with these properties be recalled by a caller in ``project_id``?

    A memory without a recorded scope, a global one, and any memory for a caller outside a project are visible.
    """
    scope = stored.scope(properties)
    if scope is None or scope.get("global", True) or project_id is None:
        return True
    projects = scope.get("projects") or []
    return not projects or project_id in projects
