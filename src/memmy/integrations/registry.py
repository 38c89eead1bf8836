"""Every agent installer, by source id (the order ``init`` installs and reports them in)."""

from __future__ import annotations

from memmy.integrations.agents import hermes, openclaw, opencode
from memmy.integrations.agents.hooked import CLAUDE_CODE, CODEX, CURSOR, PI, QWENWORK, WORKBUDDY
from memmy.integrations.base import Installer

INSTALLERS: dict[str, Installer] = {
    installer.name: installer
    for installer in (
        CLAUDE_CODE,
        CODEX,
        CURSOR,
        opencode.INSTALLER,
        openclaw.INSTALLER,
        hermes.INSTALLER,
        WORKBUDDY,
        PI,
        QWENWORK,
    )
}
ALIASES = {"claude": "claude_code", "claude-code": "claude_code", "claudecode": "claude_code"}


def resolve(names: list[str]) -> list[str]:
    """Normalise agent names (aliases, case, ``-``); raise ValueError for unknown ones."""
    resolved = []
    for raw in names:
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower().replace("-", "_"))
        if name not in INSTALLERS:
            raise ValueError(f"unknown agent {raw!r}; known: {', '.join(INSTALLERS)}")
        resolved.append(name)
    return list(dict.fromkeys(resolved))
