"""Keep the daemon up after login: a systemd user unit on Linux, a launchd agent on macOS, notes on Windows.

Both run the stable launcher (``$MEMMY_HOME/bin/memmy-memory serve``, see :mod:`memmy.integrations.launcher`),
so moving or upgrading the install does not break the service.
"""

from __future__ import annotations

import plistlib
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from memmy.integrations.plan import Plan, change

UNIT_NAME = "memmy.service"
LAUNCHD_LABEL = "dev.memmy.memory"
ENV_NAMES = ("MEMMY_HOME", "MEMMY_CONFIG")


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def unit_path(env: Mapping[str, str], platform: str = sys.platform) -> Path:
    """systemd: ``$XDG_CONFIG_HOME/systemd/user/memmy.service``; macOS: ``~/Library/LaunchAgents/<label>.plist``."""
    if platform == "darwin":
        return _home(env) / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    config_home = env.get("XDG_CONFIG_HOME") or str(_home(env) / ".config")
    return Path(config_home) / "systemd" / "user" / UNIT_NAME


def unit_text(launcher: str, env: Mapping[str, str]) -> str:
    """The systemd unit: one daemon for every agent, restarted on failure."""
    lines = [
        "[Unit]",
        "Description=memmy memory service (shared memory for coding agents)",
        "After=network.target",
        "",
        "[Service]",
        f"ExecStart={shlex.quote(launcher)} serve",
        "Restart=on-failure",
        "RestartSec=3",
    ]
    for name in ENV_NAMES:
        if env.get(name):
            lines.append(f"Environment={name}={env[name]}")
    lines += ["", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)


def plist_text(launcher: str, env: Mapping[str, str], log_dir: Path) -> str:
    """The launchd agent: started at login, kept alive, logs under ``$MEMMY_HOME/logs``."""
    data: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": [launcher, "serve"],
        "RunAtLoad": True,
        "KeepAlive": True,
        "ProcessType": "Background",
        "StandardOutPath": str(log_dir / "daemon.out.log"),
        "StandardErrorPath": str(log_dir / "daemon.err.log"),
    }
    extra = {name: env[name] for name in ENV_NAMES if env.get(name)}
    if extra:
        data["EnvironmentVariables"] = extra
    return plistlib.dumps(data, sort_keys=False).decode("utf-8")


def plan_unit(
    env: Mapping[str, str], install: bool, launcher: str, log_dir: Path, platform: str = sys.platform
) -> Plan:
    """Install or remove the unit file (systemd) or agent plist (launchd)."""
    path = unit_path(env, platform)
    darwin = platform == "darwin"
    text = (plist_text(launcher, env, log_dir) if darwin else unit_text(launcher, env)) if install else None
    plan = Plan("service", [change(path, text)])
    if darwin:
        plan.notes.append(
            f"load it with: launchctl bootstrap gui/$(id -u) {path}" if install else f"unload it first with: "
            f"launchctl bootout gui/$(id -u) {path}"
        )
    elif install:
        plan.notes.append("enable it with: systemctl --user daemon-reload && systemctl --user enable --now memmy")
    else:
        plan.notes.append("stop it first with: systemctl --user disable --now memmy")
    return plan


def other_platform_instructions(launcher: str) -> str:
    """What to do on Windows (Task Scheduler), where memmy does not write system files."""
    return (
        f'schtasks /Create /TN memmy /SC ONLOGON /TR "\\"{launcher}\\" serve" '
        "(or add a shortcut to that command in shell:startup)"
    )
