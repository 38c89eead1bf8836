"""Keep the daemon up after login: a systemd user unit on Linux, launchd / Task Scheduler notes elsewhere."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from memmy.integrations.plan import Plan, change

UNIT_NAME = "memmy.service"
LAUNCHD_LABEL = "dev.memmy.memory"


def unit_path(env: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/systemd/user/memmy.service`` (``~/.config`` by default)."""
    config_home = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(config_home) / "systemd" / "user" / UNIT_NAME


def unit_text(python: str, env: Mapping[str, str]) -> str:
    """The systemd unit: one daemon for every agent, restarted on failure."""
    lines = [
        "[Unit]",
        "Description=memmy memory service (shared memory for coding agents)",
        "After=network.target",
        "",
        "[Service]",
        f"ExecStart={shlex.quote(python)} -m memmy serve",
        "Restart=on-failure",
        "RestartSec=3",
    ]
    for name in ("MEMMY_HOME", "MEMMY_CONFIG"):
        if env.get(name):
            lines.append(f"Environment={name}={env[name]}")
    lines += ["", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)


def plan_unit(env: Mapping[str, str], install: bool, python: str = sys.executable) -> Plan:
    """Install or remove the unit file."""
    plan = Plan("service", [change(unit_path(env), unit_text(python, env) if install else None)])
    if install:
        plan.notes.append("enable it with: systemctl --user daemon-reload && systemctl --user enable --now memmy")
    else:
        plan.notes.append("stop it first with: systemctl --user disable --now memmy")
    return plan


def other_platform_instructions(python: str = sys.executable) -> str:
    """What to do on macOS (launchd) or Windows (Task Scheduler), where memmy does not write system files."""
    if sys.platform == "darwin":
        return (
            f"Create ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist with ProgramArguments [{python}, -m, memmy, "
            f"serve], RunAtLoad and KeepAlive true, then: launchctl load ~/Library/LaunchAgents/{LAUNCHD_LABEL}.plist"
        )
    return (
        f'schtasks /Create /TN memmy /SC ONLOGON /TR "\\"{python}\\" -m memmy serve" '
        "(or add a shortcut to that command in shell:startup)"
    )
