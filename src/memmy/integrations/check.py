"""``init --check`` and the ``doctor`` command: is every installed hook and MCP registration still runnable?

A hook that names a missing interpreter fails silently inside the agent, so this looks at what is installed
rather than at what ``init`` would write: each memmy hook command (Claude Code, Codex, Cursor), each MCP
registration and the service unit. The fix is always the same: re-run ``memmy-memory init``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from memmy.integrations.agents.hooked import CLAUDE_CODE, CODEX, CURSOR, JsonHookInstaller
from memmy.integrations.hooks_json import is_memmy_command
from memmy.integrations.launcher import HOOK_SHIM, recorded_python
from memmy.integrations.mcp_config import TARGETS, registered
from memmy.integrations.plan import read_text

FIX = "memmy-memory init"


@dataclass(frozen=True)
class Finding:
    """One problem with an installed integration."""

    severity: Literal["error", "warning"]
    agent: str
    path: str
    message: str
    fix: str = FIX

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def check_command(agent: str, where: Path, executable: str) -> list[Finding]:
    """Findings for one installed command whose program is ``executable``."""
    if recorded_python(Path(executable)) is not None or Path(executable).name in (HOOK_SHIM, "memmy-memory"):
        python = recorded_python(Path(executable))
        if not _runnable(executable):
            return [Finding("error", agent, str(where), f"the memmy launcher {executable} is missing")]
        if python is not None and not _runnable(python):
            return [
                Finding(
                    "error",
                    agent,
                    str(where),
                    f"the launcher {executable} records the interpreter {python}, which no longer exists "
                    "(memmy was moved or removed); it falls back to a memmy-memory on PATH",
                )
            ]
        return []
    if not _runnable(executable):
        return [Finding("error", agent, str(where), f"the hook runs {executable}, which does not exist")]
    return [
        Finding(
            "warning",
            agent,
            str(where),
            f"the hook runs the interpreter {executable} by path; it breaks when that install moves",
        )
    ]


def memmy_hook_commands(installer: JsonHookInstaller, env: Mapping[str, str]) -> tuple[Path, list[tuple[str, str]]]:
    """The agent's hooks file and every memmy hook installed there, as ``(event, command line)``."""
    path = installer.root(env) / installer.hooks_file
    text = read_text(path)
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return path, []
    commands: list[tuple[str, str]] = []
    hooks = data.get("hooks") if isinstance(data, dict) else None
    for event, entries in hooks.items() if isinstance(hooks, dict) else ():
        for entry in entries if isinstance(entries, list) else ():
            handlers = entry.get("hooks") if isinstance(entry, dict) and "hooks" in entry else [entry]
            for handler in handlers if isinstance(handlers, list) else ():
                command = handler.get("command") if isinstance(handler, dict) else None
                if is_memmy_command(command):
                    commands.append((str(event), str(command)))
    return path, commands


def _hook_commands(installer: JsonHookInstaller, env: Mapping[str, str]) -> tuple[Path, list[str]]:
    path, commands = memmy_hook_commands(installer, env)
    return path, [command for _, command in commands]


def installed_hook_files(env: Mapping[str, str]) -> dict[str, Path]:
    """Agents whose hooks file holds a memmy hook command (Claude Code, Codex, Cursor), and that file."""
    found: dict[str, Path] = {}
    for installer in (CLAUDE_CODE, CODEX, CURSOR):
        path, commands = _hook_commands(installer, env)
        if commands:
            found[installer.name] = path
    return found


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def same_endpoint(endpoint: str, daemon_url: str) -> bool:
    """Does ``endpoint`` reach the daemon at ``daemon_url`` (any loopback name for a loopback host, same port)?"""
    try:
        want, got = urlsplit(daemon_url), urlsplit(endpoint)
        want_port = want.port or (443 if want.scheme == "https" else 80)
        got_port = got.port or (443 if got.scheme == "https" else 80)
    except ValueError:
        return False
    same_host = got.hostname == want.hostname or (got.hostname in LOOPBACK and want.hostname in LOOPBACK)
    return same_host and got_port == want_port


def check_hook_settings(memmy_home: Path, daemon_url: str, token: str | None) -> list[Finding]:
    """``<memmy home>/hook.json`` (where hooks find the daemon): unreadable, another endpoint, another token.

    ``token`` is the one the daemon requires (None or empty when it requires none).
    """
    path = memmy_home / "hook.json"
    text = read_text(path)
    if text is None:
        return []
    try:
        settings = json.loads(text)
    except ValueError:
        settings = None
    if not isinstance(settings, dict):
        return [Finding("error", "hooks", str(path), "is unreadable, so hooks fall back to the defaults")]
    findings = []
    endpoint = str(settings.get("endpoint") or "")
    if endpoint and not same_endpoint(endpoint, daemon_url):
        findings.append(
            Finding(
                "error",
                "hooks",
                str(path),
                f"sends hooks to {endpoint}, but the daemon answers at {daemon_url}",
                f"memmy-memory init --endpoint {daemon_url.rstrip('/')}",
            )
        )
    if token and settings.get("token") != token:
        findings.append(
            Finding("error", "hooks", str(path), "holds another token than the daemon's, so hook calls get 401")
        )
    return findings


def check_installed(home: Path, env: Mapping[str, str] | None = None) -> list[Finding]:
    """Every installed memmy hook, MCP registration and service unit whose program is missing or fragile.

    ``home`` is the user's home directory (agent config roots are resolved against it and ``env``).
    """
    merged = dict(os.environ if env is None else env)
    merged["HOME"] = str(home)
    findings: list[Finding] = []
    for installer in (CLAUDE_CODE, CODEX, CURSOR):
        path, commands = _hook_commands(installer, merged)
        for executable in dict.fromkeys(shlex.split(c)[0] for c in commands if c.strip()):
            findings += check_command(installer.name, path, executable)
    for agent, target in TARGETS.items():
        try:
            entry = registered(agent, merged)
        except Exception:  # noqa: BLE001 - a config memmy cannot read is reported by init itself
            entry = None
        if entry and entry.get("command"):
            findings += check_command(agent, target.path(merged), str(entry["command"]))
    from memmy.integrations.service_unit import unit_path

    unit = unit_path(merged)
    text = read_text(unit)
    for line in (text or "").splitlines():
        if line.startswith("ExecStart="):
            findings += check_command("service", unit, shlex.split(line[len("ExecStart=") :])[0])
    return findings
