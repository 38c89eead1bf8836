"""OpenCode: a native ES-module plugin (recall in ``chat.message``, capture on ``session.idle``), its 0600 config,
the ``/memmy-resume`` command, the ``AGENTS.md`` block and the plugin-flavoured skill.

OpenCode loads every ``plugins/*.js`` of its config directory by itself, so no JSON config is merged. The plugin
is written as one self-contained module (:func:`~memmy.integrations.base.plugin_module`: the shared client plus
``templates/opencode_plugin.js``), so no helper module lands in ``plugins/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from memmy.integrations.base import (
    SECRET_MODE,
    InstallContext,
    file_change,
    home_of,
    instruction_change,
    on_path,
    plugin_module,
    runtime_config,
    skill_change,
)
from memmy.integrations.plan import FileChange, Plan

NAME = "opencode"
PLUGIN_FILE = "memmy-memory.js"
CONFIG_FILE = "memmy-memory-config.json"
RESUME_COMMAND = """---
description: Resume earlier work from Memmy memory (/memmy-resume <what you were working on>)
---
MEMMY_RESUME_COMMAND_ARGUMENTS:
$ARGUMENTS
MEMMY_RESUME_COMMAND_END
"""


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
            file_change(root / "plugins" / PLUGIN_FILE, install, plugin_module("opencode_plugin.js")),
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
