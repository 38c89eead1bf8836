"""OpenClaw: a ``kind: "memory"`` plugin in ``extensions/memmy-memory`` plus a merge of ``openclaw.json``.

The merge sets ``plugins.enabled``, points ``plugins.slots.memory`` at memmy, adds ``plugins.entries`` and
``plugins.installs`` records, adds the id to an existing ``allow`` list and drops it from ``deny``; every other key
is kept. What the merge overwrote is recorded in ``extensions/memmy-memory/memmy-install-state.json`` so removal
puts the user's previous values back. OpenClaw has one memory slot: when another plugin holds it, the installer
keeps it, installs only the (manual) skill and says so in the plan, unless ``MEMMY_REPLACE_MEMORY_PLUGIN=1``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memmy import __version__
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
from memmy.integrations.json_style import dump_like
from memmy.integrations.plan import FileChange, Plan, dump_json, load_json_object, read_text

NAME = "openclaw"
PLUGIN_ID = "memmy-memory"
STATE_FILE = "memmy-install-state.json"
REPLACE_ENV = "MEMMY_REPLACE_MEMORY_PLUGIN"
FREE_SLOTS = ("", "none", PLUGIN_ID)
#: Paths the merge sets; their previous values go into the state file.
SET_PATHS = (("plugins", "enabled"), ("plugins", "slots", "memory"))
CONTAINERS = (("plugins",), ("plugins", "slots"), ("plugins", "entries"), ("plugins", "installs"))
_MISSING = object()


def _get(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _container(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """The dict at ``path``, created (or replacing a non-dict) as needed."""
    node = data
    for key in path:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    return node


def _prune(data: dict[str, Any], path: tuple[str, ...]) -> None:
    parent = _get(data, path[:-1]) if len(path) > 1 else data
    if isinstance(parent, dict) and parent.get(path[-1]) == {}:
        del parent[path[-1]]


def manifest() -> dict[str, Any]:
    """``openclaw.plugin.json``."""
    return {
        "id": PLUGIN_ID,
        "name": "Memmy Memory",
        "description": "Shared local memory for coding agents (recall before each prompt, capture after each run)",
        "version": __version__,
        "kind": "memory",
        "activation": {"onStartup": True},
        "contracts": {"tools": ["memmy_memory_search", "memmy_memory_get", "memmy_memory_add"]},
        "commandAliases": [{"name": "memmy-resume", "kind": "runtime-slash"}],
        "configSchema": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "memmyConfigPath": {"type": "string"},
                "endpoint": {"type": "string"},
                "token": {"type": "string"},
            },
        },
    }


def package_json() -> dict[str, Any]:
    """``package.json`` of the extension."""
    return {
        "name": PLUGIN_ID,
        "version": __version__,
        "description": "Memmy local memory adapter for OpenClaw",
        "type": "module",
        "private": True,
        "openclaw": {"id": PLUGIN_ID, "kind": "memory", "extensions": ["./index.mjs"]},
    }


class OpenClawInstaller:
    """Install planner for OpenClaw (``$OPENCLAW_STATE_DIR`` | ``~/.openclaw``)."""

    name = NAME

    def root(self, env: Mapping[str, str]) -> Path:
        """OpenClaw's state directory."""
        if env.get("OPENCLAW_STATE_DIR"):
            return Path(env["OPENCLAW_STATE_DIR"]).expanduser()
        return home_of(env) / ".openclaw"

    def detected(self, env: Mapping[str, str]) -> bool:
        """The state directory exists or ``openclaw`` is on the PATH."""
        return self.root(env).is_dir() or on_path(env, "openclaw")

    def config_path(self, env: Mapping[str, str]) -> Path:
        """``$OPENCLAW_CONFIG_PATH`` or ``<root>/openclaw.json``."""
        if env.get("OPENCLAW_CONFIG_PATH"):
            return Path(env["OPENCLAW_CONFIG_PATH"]).expanduser()
        return self.root(env) / "openclaw.json"

    def workspace(self, env: Mapping[str, str], config: Mapping[str, Any]) -> Path:
        """``agents.defaults.workspace``, ``$OPENCLAW_WORKSPACE_DIR``, or ``<root>/workspace[-<profile>]``."""
        configured = _get(config, ("agents", "defaults", "workspace"))
        if isinstance(configured, str) and configured.strip():
            return Path(configured.strip()).expanduser()
        if env.get("OPENCLAW_WORKSPACE_DIR"):
            return Path(env["OPENCLAW_WORKSPACE_DIR"]).expanduser()
        profile = (env.get("OPENCLAW_PROFILE") or "").strip()
        return self.root(env) / (f"workspace-{profile}" if profile and profile != "default" else "workspace")

    def plugin_dir(self, env: Mapping[str, str]) -> Path:
        """``<root>/extensions/memmy-memory``."""
        return self.root(env) / "extensions" / PLUGIN_ID

    def memory_conflict(self, env: Mapping[str, str]) -> str | None:
        """The id of another plugin holding ``plugins.slots.memory``, else None."""
        path = self.config_path(env)
        slot = _get(load_json_object(path, read_text(path)), ("plugins", "slots", "memory"))
        if isinstance(slot, str) and slot.strip().lower() not in FREE_SLOTS:
            return slot
        return None

    def _state(self, env: Mapping[str, str]) -> dict[str, Any] | None:
        text = read_text(self.plugin_dir(env) / STATE_FILE)
        try:
            state = json.loads(text) if text else None
        except json.JSONDecodeError:
            return None
        return state if isinstance(state, dict) else None

    def _snapshot(self, existed: bool, config: dict[str, Any]) -> dict[str, Any]:
        """What the first install overwrites, so removal can restore it."""
        previous = {}
        for path in SET_PATHS:
            value = _get(config, path)
            absent = value is _MISSING or value == PLUGIN_ID  # a leftover of an older install is not the user's
            previous[".".join(path)] = {"present": False} if absent else {"present": True, "value": value}
        allow, deny = _get(config, ("plugins", "allow")), _get(config, ("plugins", "deny"))
        return {
            "configExisted": existed,
            "previous": previous,
            "createdContainers": [".".join(p) for p in CONTAINERS if not isinstance(_get(config, p), dict)],
            "allowAdded": isinstance(allow, list) and PLUGIN_ID not in allow,
            "denyIndex": deny.index(PLUGIN_ID) if isinstance(deny, list) and PLUGIN_ID in deny else None,
        }

    def _merged(self, ctx: InstallContext, config: dict[str, Any]) -> dict[str, Any]:
        merged = copy.deepcopy(config)
        plugins = _container(merged, ("plugins",))
        plugins["enabled"] = True
        _container(merged, ("plugins", "slots"))["memory"] = PLUGIN_ID
        entries = _container(merged, ("plugins", "entries"))
        entry = _as_dict(entries.get(PLUGIN_ID))
        hooks = _as_dict(entry.get("hooks"))
        entries[PLUGIN_ID] = {
            **entry,
            "enabled": True,
            "config": {"memmyConfigPath": str(ctx.config_path), "endpoint": ctx.endpoint},
            "hooks": {**hooks, "allowPromptInjection": True, "allowConversationAccess": True},
        }
        installs = _container(merged, ("plugins", "installs"))
        record = _as_dict(installs.get(PLUGIN_ID))
        plugin_dir = str(self.plugin_dir(ctx.env))
        installed_at = record.get("installedAt") or datetime.now(UTC).isoformat(timespec="milliseconds")
        installs[PLUGIN_ID] = {
            **record,
            "source": "path",
            "sourcePath": plugin_dir,
            "installPath": plugin_dir,
            "version": __version__,
            "installedAt": installed_at,
        }
        if isinstance(plugins.get("allow"), list) and PLUGIN_ID not in plugins["allow"]:
            plugins["allow"] = [*plugins["allow"], PLUGIN_ID]
        if isinstance(plugins.get("deny"), list):
            plugins["deny"] = [item for item in plugins["deny"] if item != PLUGIN_ID]
        return merged

    def _unmerged(self, config: dict[str, Any], state: dict[str, Any] | None) -> dict[str, Any]:
        result = copy.deepcopy(config)
        plugins = result.get("plugins")
        if not isinstance(plugins, dict):
            return result
        for key in ("entries", "installs"):
            if isinstance(plugins.get(key), dict):
                plugins[key].pop(PLUGIN_ID, None)
        previous = (state or {}).get("previous") or {}
        slots = plugins.get("slots")
        if isinstance(slots, dict) and slots.get("memory") == PLUGIN_ID:
            before = previous.get("plugins.slots.memory") or {"present": False}
            if before.get("present"):
                slots["memory"] = before.get("value")
            else:
                del slots["memory"]
        enabled = previous.get("plugins.enabled")
        if isinstance(enabled, dict) and plugins.get("enabled") is True:
            if enabled.get("present"):
                plugins["enabled"] = enabled.get("value")
            else:
                del plugins["enabled"]
        if isinstance(plugins.get("allow"), list) and (state is None or state.get("allowAdded")):
            plugins["allow"] = [item for item in plugins["allow"] if item != PLUGIN_ID]
        deny_index = (state or {}).get("denyIndex")
        if isinstance(deny_index, int) and isinstance(plugins.get("deny"), list) and PLUGIN_ID not in plugins["deny"]:
            plugins["deny"].insert(deny_index, PLUGIN_ID)
        for dotted in sorted((state or {}).get("createdContainers") or [], key=len, reverse=True):
            _prune(result, tuple(str(dotted).split(".")))
        return result

    def plan_install(self, ctx: InstallContext) -> Plan:
        """The extension, the openclaw.json merge, the workspace AGENTS.md block and the skill."""
        path = self.config_path(ctx.env)
        before = read_text(path)
        config = load_json_object(path, before)
        root, plugin_dir = self.root(ctx.env), self.plugin_dir(ctx.env)
        instructions = instruction_change(self.workspace(ctx.env, config) / "AGENTS.md", NAME, install=True)
        plan = Plan(agent=NAME)
        holder = self.memory_conflict(ctx.env)
        if holder and ctx.env.get(REPLACE_ENV) != "1":
            plan.changes += [instructions, skill_change(root, NAME, install=True, automatic=False)]
            plan.notes.append(
                f"OpenClaw's memory slot is held by '{holder}'; memmy left it in place and installed only its skill "
                f"(manual recall with memmy-memory search/get). To replace '{holder}' with the memmy-memory plugin, "
                f"confirm (or set {REPLACE_ENV}=1) and install again; removing memmy later gives the slot back."
            )
            return plan
        state = self._state(ctx.env) or self._snapshot(before is not None, config)
        if holder:
            plan.notes.append(f"memmy-memory replaces '{holder}' in OpenClaw's memory slot (restored on removal).")
        if _get(config, ("plugins", "enabled")) is False:
            plan.notes.append("OpenClaw plugins were disabled (plugins.enabled=false); memmy enables plugin loading.")
        plan.changes += [
            file_change(plugin_dir / "package.json", True, dump_json(package_json())),
            file_change(plugin_dir / "openclaw.plugin.json", True, dump_json(manifest())),
            file_change(plugin_dir / "index.mjs", True, plugin_module("openclaw_index.mjs")),
            file_change(plugin_dir / "memmy-memory-config.json", True, runtime_config(ctx), SECRET_MODE),
            file_change(plugin_dir / STATE_FILE, True, read_text(plugin_dir / STATE_FILE) or dump_json(state)),
            FileChange(path, before, dump_like(self._merged(ctx, config), before)),
            instructions,
            skill_change(root, NAME, install=True),
        ]
        if plan.effective:
            plan.notes.append("Restart the OpenClaw gateway to load the memmy-memory plugin.")
        return plan

    def plan_remove(self, ctx: InstallContext) -> Plan:
        """Delete the extension and skill, drop memmy's openclaw.json entries and give the memory slot back."""
        path = self.config_path(ctx.env)
        before = read_text(path)
        config = load_json_object(path, before)
        plugin_dir = self.plugin_dir(ctx.env)
        state = self._state(ctx.env)
        changes = [
            file_change(plugin_dir / name, False, "")
            for name in ("package.json", "openclaw.plugin.json", "index.mjs", "memmy-memory-config.json", STATE_FILE)
        ]
        if before is not None:
            restored = self._unmerged(config, state)
            if restored == config:
                after: str | None = before
            elif not restored and state is not None and not state.get("configExisted"):
                after = None
            else:
                after = dump_like(restored, before)
            changes.append(FileChange(path, before, after))
        changes.append(instruction_change(self.workspace(ctx.env, config) / "AGENTS.md", NAME, install=False))
        changes.append(skill_change(self.root(ctx.env), NAME, install=False))
        return Plan(agent=NAME, changes=changes)


INSTALLER = OpenClawInstaller()
