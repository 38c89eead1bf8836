"""Install and remove agent integrations from the panel's Cross-agent page (the same plans `init` / `remove` apply),
and the Overview's warnings about installed hooks and plugins that are broken, point elsewhere or have gone quiet."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from memmy.config import MemmyConfig
from memmy.integrations.agents.hooked import hook_settings_change
from memmy.integrations.base import InstallContext
from memmy.integrations.check import check_hook_settings, check_installed, installed_hook_files
from memmy.integrations.launcher import shim_changes
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
        [
            # The stable launchers every hook calls, as `init` writes them (a hook without them fails silently).
            Plan("memmy-launcher", shim_changes(ctx.memmy_home, ctx.python, install=True)),
            Plan("memmy-hooks", [hook_settings_change(ctx)]),
            installer.plan_install(ctx),
        ]
        if install
        else [installer.plan_remove(ctx)]
    )
    files = [str(c.path) for plan in plans for c in plan.effective]
    for plan in plans:
        plan.apply()
    return files


#: An installed hook or plugin that has not called the daemon for this long is reported on the Overview.
STALE_AFTER_DAYS = 7


def _age_days(stamp: str | float, now: float) -> float:
    seconds = stamp if isinstance(stamp, float) else datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return (now - seconds) / 86400


def hook_warnings(config: MemmyConfig, daemon_url: str, last_seen: dict[str, str]) -> list[str]:
    """Installed hooks/plugins that are broken (what ``memmy-memory doctor`` checks), point at another endpoint or
    token than this daemon's, or have not called the daemon for ``STALE_AFTER_DAYS``; each with the fixing command.

    ``last_seen`` maps an agent (a session's source) to its newest session activity.
    """
    env = dict(os.environ)
    home = Path(env.get("HOME") or Path.home())
    warnings = [
        f"{f.agent}: {f.message} ({f.path}); fix: {f.fix}" for f in check_installed(home, env) if f.agent != "service"
    ]
    token = "" if config.server.auth_disabled else config.storage.token
    warnings += [
        f"{f.agent}: {f.path} {f.message}; fix: {f.fix}" for f in check_hook_settings(config.home, daemon_url, token)
    ]
    now = time.time()
    installed: dict[str, float] = {name: path.stat().st_mtime for name, path in installed_hook_files(env).items()}
    for row in agents():
        skill = Path(row["root"]) / "skills" / "memmy-memory" / "SKILL.md"
        if row["installed"] and row["agent"] not in installed:
            installed[row["agent"]] = skill.stat().st_mtime
    for agent, installed_at in sorted(installed.items()):
        seen = last_seen.get(agent)
        if seen is not None and _age_days(seen, now) < STALE_AFTER_DAYS:
            continue
        if seen is None and _age_days(installed_at, now) < STALE_AFTER_DAYS:
            continue  # installed recently and not used yet
        since = f"since {seen[:10]}" if seen else "since it was installed"
        warnings.append(
            f"{agent}: memmy is installed but {agent} has not called the daemon {since} "
            f"(over {STALE_AFTER_DAYS} days); check with memmy-memory init --check, or remove it: "
            f"memmy-memory remove --agent {agent}"
        )
    return warnings
