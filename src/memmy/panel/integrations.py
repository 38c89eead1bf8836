"""Install and remove agent integrations from the panel's Cross-agent page (the same plans `init` / `remove` apply)."""

from __future__ import annotations

import os
from typing import Any

from memmy.config import MemmyConfig
from memmy.integrations.agents.hooked import hook_settings_change
from memmy.integrations.base import InstallContext
from memmy.integrations.plan import Plan
from memmy.integrations.registry import INSTALLERS


def _context(config: MemmyConfig) -> InstallContext:
    return InstallContext.create(dict(os.environ), config.storage.endpoint, config.storage.token or None, config.path)


def agents() -> list[dict[str, Any]]:
    """Every agent memmy can integrate with: detected on this machine, and whether memmy's skill is installed."""
    env = dict(os.environ)
    rows = []
    for name, installer in INSTALLERS.items():
        root = installer.root(env)
        rows.append(
            {
                "agent": name,
                "root": str(root),
                "detected": installer.detected(env),
                "installed": (root / "skills" / "memmy-memory" / "SKILL.md").exists(),
            }
        )
    return rows


def change(config: MemmyConfig, agent: str, install: bool) -> list[str]:
    """Apply the install (hooks, plugin, skill, instructions) or removal plan for one agent; return changed files."""
    if agent not in INSTALLERS:
        raise ValueError(f"unknown agent {agent!r}; known: {', '.join(sorted(INSTALLERS))}")
    installer = INSTALLERS[agent]
    if install and not installer.detected(dict(os.environ)):
        raise ValueError(f"{agent} is not installed on this machine ({installer.root(dict(os.environ))})")
    ctx = _context(config)
    plans = (
        [Plan("memmy-hooks", [hook_settings_change(ctx)]), installer.plan_install(ctx)]
        if install
        else [installer.plan_remove(ctx)]
    )
    files = [str(c.path) for plan in plans for c in plan.effective]
    for plan in plans:
        plan.apply()
    return files
