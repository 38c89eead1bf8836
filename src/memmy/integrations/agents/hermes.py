"""Hermes: a Python MemoryProvider plugin in ``plugins/memmy-memory`` activated by ``memory.provider``.

``config.yaml`` is edited line by line so the user's comments and layout survive; every edit is checked by parsing
the result, and falls back to a full (comment-less) YAML dump only when the line edit does not parse to the
expected data. The provider value memmy replaced is recorded in ``plugins/memmy-memory/memmy-install-state.json``
so removal restores it. Hermes runs one external provider: when another one is configured the installer keeps
it, installs only the (manual) skill and says so in the plan, unless ``MEMMY_REPLACE_MEMORY_PLUGIN=1``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from memmy import __version__
from memmy.integrations.base import (
    SECRET_MODE,
    InstallContext,
    file_change,
    home_of,
    instruction_change,
    load_template,
    on_path,
    runtime_config,
    skill_change,
)
from memmy.integrations.plan import FileChange, Plan, read_text

NAME = "hermes"
PLUGIN_ID = "memmy-memory"
STATE_FILE = "memmy-install-state.json"
REPLACE_ENV = "MEMMY_REPLACE_MEMORY_PLUGIN"
FREE_PROVIDERS = ("", "none", "builtin", "built-in", PLUGIN_ID)
PLUGIN_YAML = f"""name: {PLUGIN_ID}
version: {__version__}
description: Memmy shared local memory (recall before each turn, capture after it)
kind: exclusive
"""
_MEMORY_KEY = re.compile(r"^memory:[ \t]*(#.*)?$")


def load_yaml(path: Path, text: str | None) -> dict[str, Any]:
    """Parse config.yaml (``{}`` when absent); a broken file is an error naming it, never overwritten."""
    if text is None or not text.strip():
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML ({exc}); fix it first, memmy will not overwrite it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a YAML mapping at the top level")
    return data


def dump_yaml(data: Mapping[str, Any]) -> str:
    """The fallback writer (loses comments)."""
    return yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, default_flow_style=False)


def _parses_to(text: str, expected: Mapping[str, Any]) -> bool:
    try:
        return (yaml.safe_load(text) or {}) == expected
    except yaml.YAMLError:
        return False


def _memory_block(lines: list[str]) -> tuple[int, int, str] | None:
    """(header index, end of the indented body, child indent) of a top-level block-style ``memory:`` key."""
    for index, line in enumerate(lines):
        if _MEMORY_KEY.match(line.rstrip("\r\n")):
            end = index + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t")):
                end += 1
            while end > index + 1 and not lines[end - 1].strip():
                end -= 1
            children = [ln for ln in lines[index + 1 : end] if ln.strip() and not ln.lstrip().startswith("#")]
            indent = children[0][: len(children[0]) - len(children[0].lstrip())] if children else "  "
            return index, end, indent
    return None


def _provider_line(lines: list[str], block: tuple[int, int, str]) -> int | None:
    start, end, indent = block
    for index in range(start + 1, end):
        line = lines[index]
        if line.startswith(indent + "provider:"):
            return index
    return None


def _provider(data: Mapping[str, Any]) -> Any:
    memory = data.get("memory")
    return memory.get("provider") if isinstance(memory, dict) else None


class HermesInstaller:
    """Install planner for Hermes Agent (``$HERMES_HOME`` | ``~/.hermes``)."""

    name = NAME

    def root(self, env: Mapping[str, str]) -> Path:
        """Hermes' home directory."""
        if env.get("HERMES_HOME"):
            return Path(env["HERMES_HOME"]).expanduser()
        return home_of(env) / ".hermes"

    def detected(self, env: Mapping[str, str]) -> bool:
        """The home directory exists or ``hermes`` is on the PATH."""
        return self.root(env).is_dir() or on_path(env, "hermes")

    def plugin_dir(self, env: Mapping[str, str]) -> Path:
        """``<root>/plugins/memmy-memory``."""
        return self.root(env) / "plugins" / PLUGIN_ID

    def memory_conflict(self, env: Mapping[str, str]) -> str | None:
        """The name of another configured memory provider, else None."""
        path = self.root(env) / "config.yaml"
        provider = _provider(load_yaml(path, read_text(path)))
        if isinstance(provider, str) and provider.strip().lower() not in FREE_PROVIDERS:
            return provider
        return None

    def _state(self, env: Mapping[str, str]) -> dict[str, Any] | None:
        text = read_text(self.plugin_dir(env) / STATE_FILE)
        try:
            state = json.loads(text) if text else None
        except json.JSONDecodeError:
            return None
        return state if isinstance(state, dict) else None

    @staticmethod
    def _snapshot(text: str | None, data: Mapping[str, Any]) -> dict[str, Any]:
        lines = (text or "").splitlines(keepends=True)
        block = _memory_block(lines)
        line = _provider_line(lines, block) if block else None
        memory = data.get("memory")
        present = isinstance(memory, dict) and "provider" in memory and memory["provider"] != PLUGIN_ID
        return {
            "configExisted": text is not None,
            "memoryExisted": "memory" in data,
            "providerPresent": present,
            "providerValue": memory.get("provider") if present and isinstance(memory, dict) else None,
            "providerLine": lines[line] if present and line is not None else None,
        }

    @staticmethod
    def _with_provider(text: str | None, data: dict[str, Any]) -> tuple[str, bool]:
        """config.yaml with ``memory.provider: memmy-memory``, and whether the line edit had to be abandoned."""
        expected = copy.deepcopy(data)
        memory = expected["memory"] if isinstance(expected.get("memory"), dict) else {}
        expected["memory"] = {**memory, "provider": PLUGIN_ID}
        lines = (text or "").splitlines(keepends=True)
        block = _memory_block(lines)
        new_line = f"{block[2] if block else '  '}provider: {PLUGIN_ID}\n"
        if block is None:
            if "memory" in data:
                return dump_yaml(expected), True
            head = "".join(lines)
            candidate = head + ("\n" if head and not head.endswith("\n") else "") + f"memory:\n{new_line}"
        else:
            index = _provider_line(lines, block)
            if index is None:
                lines.insert(block[0] + 1, new_line)
            else:
                lines[index] = new_line
            candidate = "".join(lines)
        return (candidate, False) if _parses_to(candidate, expected) else (dump_yaml(expected), True)

    @staticmethod
    def _without_provider(text: str, data: dict[str, Any], state: dict[str, Any] | None) -> str | None:
        """config.yaml with memmy's provider line undone (None: delete a file memmy created)."""
        state = state or {}
        expected = copy.deepcopy(data)
        memory = dict(expected["memory"])
        lines = text.splitlines(keepends=True)
        block = _memory_block(lines)
        index = _provider_line(lines, block) if block else None
        removed = 0
        if state.get("providerPresent"):
            memory["provider"] = state.get("providerValue")
            replacement = state.get("providerLine") or f"{block[2] if block else '  '}provider: ''\n"
            if index is not None:
                lines[index] = replacement
        else:
            del memory["provider"]
            if index is not None:
                del lines[index]
                removed = 1
        if memory:
            expected["memory"] = memory
        elif state.get("memoryExisted", True):
            expected["memory"] = None  # a block-style ``memory:`` with no children
        else:
            del expected["memory"]
            end = block[1] - removed if block else 0
            if block is not None and not any(ln.strip() for ln in lines[block[0] + 1 : end]):
                del lines[block[0] : end]
        candidate = "".join(lines)
        if not expected and not state.get("configExisted", True) and not candidate.strip():
            return None
        return candidate if _parses_to(candidate, expected) else dump_yaml(expected)

    def plan_install(self, ctx: InstallContext) -> Plan:
        """The provider plugin, ``memory.provider`` in config.yaml, the SOUL.md block and the skill."""
        root, plugin_dir = self.root(ctx.env), self.plugin_dir(ctx.env)
        path = root / "config.yaml"
        before = read_text(path)
        data = load_yaml(path, before)
        instructions = instruction_change(root / "SOUL.md", NAME, install=True)
        plan = Plan(agent=NAME)
        holder = self.memory_conflict(ctx.env)
        if holder and ctx.env.get(REPLACE_ENV) != "1":
            plan.changes += [instructions, skill_change(root, NAME, install=True, automatic=False)]
            plan.notes.append(
                f"Hermes already uses the memory provider '{holder}'; memmy left it in place and installed only its "
                f"skill (manual recall with memmy-memory search/get). To replace '{holder}' with memmy-memory, "
                f"confirm (or set {REPLACE_ENV}=1) and install again; removing memmy later restores '{holder}'."
            )
            return plan
        if holder:
            plan.notes.append(f"memmy-memory replaces the Hermes memory provider '{holder}' (restored on removal).")
        state_text = read_text(plugin_dir / STATE_FILE) or json.dumps(self._snapshot(before, data), indent=2) + "\n"
        after, fallback = self._with_provider(before, data)
        if fallback:
            plan.notes.append(f"{path} was rewritten as plain YAML (its comments could not be kept).")
        plan.changes += [
            file_change(plugin_dir / "plugin.yaml", True, PLUGIN_YAML),
            file_change(plugin_dir / "__init__.py", True, load_template("hermes_provider.py")),
            file_change(plugin_dir / "memmy-memory-config.json", True, runtime_config(ctx), SECRET_MODE),
            file_change(plugin_dir / STATE_FILE, True, state_text),
            FileChange(path, before, after),
            instructions,
            skill_change(root, NAME, install=True),
        ]
        if plan.effective:
            plan.notes.append("Start a new Hermes session to load the memmy-memory provider.")
        return plan

    def plan_remove(self, ctx: InstallContext) -> Plan:
        """Delete the plugin and skill, undo ``memory.provider`` and drop the SOUL.md block."""
        root, plugin_dir = self.root(ctx.env), self.plugin_dir(ctx.env)
        path = root / "config.yaml"
        before = read_text(path)
        data = load_yaml(path, before)
        changes = [
            file_change(plugin_dir / name, False, "")
            for name in ("plugin.yaml", "__init__.py", "memmy-memory-config.json", STATE_FILE)
        ]
        if before is not None and _provider(data) == PLUGIN_ID:
            changes.append(FileChange(path, before, self._without_provider(before, data, self._state(ctx.env))))
        changes.append(instruction_change(root / "SOUL.md", NAME, install=False))
        changes.append(skill_change(root, NAME, install=False))
        return Plan(agent=NAME, changes=changes)


INSTALLER = HermesInstaller()
