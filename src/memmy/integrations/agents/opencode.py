"""OpenCode: a native ES-module plugin (recall in ``chat.message``, capture on ``session.idle``), its 0600 config,
the ``/memmy-resume`` command, the ``AGENTS.md`` block and the plugin-flavoured skill.

OpenCode loads every ``plugins/*.js`` of its config directory by itself, so no JSON config is merged. The small
helpers here (templates, runtime config, skill and instruction-block changes) are shared by the OpenClaw and
Hermes installers.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from memmy.integrations.base import InstallContext, instruction_block, skill_markdown
from memmy.integrations.plan import FileChange, Plan, dump_json, read_text, remove_block, upsert_block

NAME = "opencode"
PLUGIN_FILE = "memmy-memory.js"
CONFIG_FILE = "memmy-memory-config.json"
SECRET_MODE = 0o600
RESUME_COMMAND = """---
description: Resume earlier work from Memmy memory (/memmy-resume <what you were working on>)
---
MEMMY_RESUME_COMMAND_ARGUMENTS:
$ARGUMENTS
MEMMY_RESUME_COMMAND_END
"""


def load_template(name: str) -> str:
    """The text of one file of ``memmy/integrations/templates`` (shipped as package data)."""
    return (resources.files("memmy.integrations") / "templates" / name).read_text(encoding="utf-8")


def home_of(env: Mapping[str, str]) -> Path:
    """HOME from the environment the installer was given (falls back to the process's home)."""
    return Path(env.get("HOME") or Path.home())


def on_path(env: Mapping[str, str], program: str) -> bool:
    """True when ``program`` is on the PATH of ``env``."""
    return shutil.which(program, path=env.get("PATH")) is not None


def runtime_config(ctx: InstallContext) -> str:
    """The plugin's ``memmy-memory-config.json``: endpoint, token and time budgets (written 0600)."""
    timeout_ms = max(1, round(ctx.timeout_s * 1000))
    return dump_json(
        {
            "endpoint": ctx.endpoint,
            "token": ctx.token,
            "timeoutMs": timeout_ms,
            "captureTimeoutMs": max(timeout_ms, 5000),
            "toolTimeoutMs": 10000,
            "memmyConfigPath": str(ctx.config_path),
        }
    )


def file_change(path: Path, install: bool, text: str, mode: int | None = None) -> FileChange:
    """Write ``text`` to a file memmy owns on install; delete it on removal."""
    return FileChange(path, read_text(path), text if install else None, mode)


def skill_change(root: Path, agent: str, install: bool, automatic: bool = True) -> FileChange:
    """``<root>/skills/memmy-memory/SKILL.md``."""
    return file_change(root / "skills" / "memmy-memory" / "SKILL.md", install, skill_markdown(agent, automatic))


def instruction_change(path: Path, agent: str, install: bool) -> FileChange:
    """Upsert or remove memmy's marker block; a file that only held the block is deleted again."""
    before = read_text(path)
    if install:
        return FileChange(path, before, upsert_block(before, instruction_block(agent)))
    if before is None:
        return FileChange(path, None, None)
    after = remove_block(before)
    return FileChange(path, before, after if after.strip() else None)


class OpenCodeInstaller:
    """Install planner for OpenCode (``$OPENCODE_CONFIG_DIR`` | ``$XDG_CONFIG_HOME/opencode`` | ``~/.config``)."""

    name = NAME

    def root(self, env: Mapping[str, str]) -> Path:
        """OpenCode's global config directory."""
        if env.get("OPENCODE_CONFIG_DIR"):
            return Path(env["OPENCODE_CONFIG_DIR"]).expanduser()
        if env.get("XDG_CONFIG_HOME"):
            return Path(env["XDG_CONFIG_HOME"]).expanduser() / "opencode"
        return home_of(env) / ".config" / "opencode"

    def detected(self, env: Mapping[str, str]) -> bool:
        """OpenCode's config directory exists or ``opencode`` is on the PATH."""
        return self.root(env).is_dir() or on_path(env, "opencode")

    def _changes(self, ctx: InstallContext, install: bool) -> list[FileChange]:
        root = self.root(ctx.env)
        return [
            file_change(root / "plugins" / PLUGIN_FILE, install, load_template("opencode_plugin.js")),
            file_change(root / "plugins" / CONFIG_FILE, install, runtime_config(ctx), SECRET_MODE),
            file_change(root / "commands" / "memmy-resume.md", install, RESUME_COMMAND),
            instruction_change(root / "AGENTS.md", NAME, install),
            skill_change(root, NAME, install),
        ]

    def plan_install(self, ctx: InstallContext) -> Plan:
        """The plugin, its config, the command, the AGENTS.md block and the skill."""
        plan = Plan(agent=NAME, changes=self._changes(ctx, install=True))
        if plan.effective:
            plan.notes.append("Restart OpenCode (or open a new session) to load the memmy-memory plugin.")
        return plan

    def plan_remove(self, ctx: InstallContext) -> Plan:
        """Delete memmy's files and its AGENTS.md block; everything else is left as it is."""
        return Plan(agent=NAME, changes=self._changes(ctx, install=False))


INSTALLER = OpenCodeInstaller()
