"""Registering memmy's MCP server (``memmy-memory --source <agent> mcp``, over stdio) in each agent's own config.

| agent | file (scope) | where |
| --- | --- | --- |
| Claude Code | ``~/.claude.json`` (user scope; ``$CLAUDE_CONFIG_DIR/.claude.json``) | ``mcpServers.memmy`` |
| Codex | ``$CODEX_HOME/config.toml`` (``~/.codex``) | ``[mcp_servers.memmy]`` |
| Cursor | ``~/.cursor/mcp.json`` (global) | ``mcpServers.memmy`` |
| OpenCode | ``<config dir>/opencode.json`` (global; ``opencode.jsonc`` when only it exists) | ``mcp.memmy`` |
| Hermes | ``$HERMES_HOME/config.yaml`` (``~/.hermes``) | ``mcp_servers.memmy`` |

Edits keep the user's layout: JSON in its own indentation, escaping and final newline (key order is kept), TOML
through tomlkit and YAML through ruamel.yaml (comments, order and quoting survive). Removal deletes only memmy's
entry (and a container it left empty); :mod:`memmy.integrations.originals` gives back the exact original bytes
when nothing else changed the file. OpenClaw (its memory plugin already exposes memmy's tools) and the
skill-only agents get no MCP entry.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from memmy.integrations.base import InstallContext, home_of
from memmy.integrations.json_style import dump_like
from memmy.integrations.plan import FileChange, Plan, load_json_object, read_text

SERVER_NAME = "memmy"


class ManualStep(ValueError):
    """memmy will not rewrite this file (e.g. JSONC with comments); the message says what to add by hand."""


def server_args(agent: str) -> list[str]:
    """The launcher's arguments: ``--source <agent> mcp``."""
    return ["--source", agent, "mcp"]


def server_env(ctx: InstallContext) -> dict[str, str]:
    """Environment the server needs beyond the agent's own (a non-default ``MEMMY_HOME``)."""
    return {"MEMMY_HOME": ctx.env["MEMMY_HOME"]} if ctx.env.get("MEMMY_HOME") else {}


# -- JSON -------------------------------------------------------------------------------------------------------
def _json_edit(
    path: Path, text: str | None, container: tuple[str, ...], entry: dict[str, Any] | None, seed: dict[str, Any]
) -> str | None:
    """Set (or with ``entry=None`` delete) ``<container>.memmy``; None when the file would be left empty."""
    data = load_json_object(path, text)
    if entry is not None:
        if text is None or not text.strip():
            data = {**seed, **data}
        node = data
        for key in container:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[SERVER_NAME] = entry
        return dump_like(data, text)
    parents: list[dict[str, Any]] = [data]
    for key in container:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return text
        parents.append(child)
    if SERVER_NAME not in parents[-1]:
        return text
    del parents[-1][SERVER_NAME]
    for key, parent in zip(reversed(container), reversed(parents[:-1]), strict=True):
        if parent.get(key) == {}:
            del parent[key]
    if not data or data == seed:
        return None
    return dump_like(data, text)


# -- TOML -------------------------------------------------------------------------------------------------------
def _toml_edit(path: Path, text: str | None, entry: dict[str, Any] | None) -> str | None:
    try:
        doc = tomlkit.parse(text or "")
    except tomlkit.exceptions.ParseError as exc:
        raise ValueError(f"{path} is not valid TOML ({exc}); fix it first, memmy will not overwrite it") from None
    servers = doc.get("mcp_servers")
    if entry is not None:
        if servers is None:
            servers = tomlkit.table(is_super_table=True)
            if text and text.strip() and not text.endswith("\n\n"):
                doc.add(tomlkit.nl())
            doc["mcp_servers"] = servers
        table = tomlkit.table()
        for key, value in entry.items():
            if isinstance(value, dict):
                inline = tomlkit.inline_table()
                inline.update(value)
                table[key] = inline
            else:
                table[key] = value
        table.add(tomlkit.nl())  # a blank line before whatever table follows
        servers[SERVER_NAME] = table
        result = tomlkit.dumps(doc)
        return result[:-1] if result.endswith("\n\n") and not (text or "").endswith("\n\n") else result
    if servers is None or SERVER_NAME not in servers:
        return text
    del servers[SERVER_NAME]
    if not servers:
        del doc["mcp_servers"]
    result = tomlkit.dumps(doc)
    if result.endswith("\n\n"):  # the blank line memmy put before its table
        result = result.rstrip("\n") + "\n"
    return result if result.strip() else None


# -- YAML -------------------------------------------------------------------------------------------------------
def _yaml_layout(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as the file already uses them."""
    mapping = 2
    match = re.search(r"^[^\s#][^\n]*:\s*\n(?:\s*#[^\n]*\n)*( +)[^\s-]", text, re.MULTILINE)
    if match:
        mapping = len(match.group(1))
    offset = 0
    dash = re.search(r"^( *)[^\s#][^\n]*:\s*\n( *)- ", text, re.MULTILINE)
    if dash:
        offset = max(0, len(dash.group(2)) - len(dash.group(1)))
    return mapping, offset + 2, offset


def _last_leaf(node: Any) -> tuple[Any, Any] | None:
    """(container, key) of the last scalar under ``node`` in document order, where ruamel keeps trailing blanks."""
    while isinstance(node, CommentedMap | CommentedSeq) and len(node):
        key = list(node)[-1] if isinstance(node, CommentedMap) else len(node) - 1
        child = node[key]
        if isinstance(child, CommentedMap | CommentedSeq) and len(child):
            node = child
            continue
        return node, key
    return None


def _move_blank_lines(source: Any, target: Any) -> None:
    """Move the blank lines that trail ``source`` (an entry) to the end of ``target`` (the entry now after it)."""
    src, dst = _last_leaf(source), _last_leaf(target)
    if src is None or dst is None:
        return
    container, key = src
    slot = 0 if isinstance(container, CommentedSeq) else 2
    tokens = container.ca.items.get(key)
    token = tokens[slot] if tokens and len(tokens) > slot else None
    if token is None or getattr(token, "value", "x").strip():
        return  # nothing, or a real comment: leave it where the user put it
    tokens[slot] = None
    holder, leaf = dst
    holder.ca.items.setdefault(leaf, [None, None, None, None])[0 if isinstance(holder, CommentedSeq) else 2] = token


def _commented(value: Any) -> Any:
    if isinstance(value, dict):
        return CommentedMap((k, _commented(v)) for k, v in value.items())
    if isinstance(value, list):
        return CommentedSeq(_commented(v) for v in value)
    return value


def _yaml_edit(path: Path, text: str | None, entry: dict[str, Any] | None) -> str | None:
    yaml = YAML()
    yaml.preserve_quotes = True
    mapping, sequence, offset = _yaml_layout(text or "")
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    yaml.width = 4096
    try:
        doc = yaml.load(text or "") if text and text.strip() else None
    except YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML ({exc}); fix it first, memmy will not overwrite it") from None
    if doc is None:
        if entry is None:
            return text
        doc = CommentedMap()
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a YAML mapping at the top level")
    servers = doc.get("mcp_servers")
    if entry is not None:
        if not isinstance(servers, dict):
            doc["mcp_servers"] = servers = CommentedMap()
        # The blank lines that end the block move with the last entry (or stay with memmy's when it is rewritten).
        if SERVER_NAME in servers:
            previous = servers[SERVER_NAME]
        else:
            previous = servers[list(servers)[-1]] if servers else None
        servers[SERVER_NAME] = _commented(entry)
        if previous is not None:
            _move_blank_lines(previous, servers[SERVER_NAME])
    else:
        if not isinstance(servers, dict) or SERVER_NAME not in servers:
            return text
        keys = list(servers)
        if keys[-1] == SERVER_NAME and len(keys) > 1:
            _move_blank_lines(servers[SERVER_NAME], servers[keys[-2]])
        del servers[SERVER_NAME]
        if not servers:
            del doc["mcp_servers"]
        if not doc:
            return None
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


# -- targets ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class McpTarget:
    """Where and how one agent registers MCP servers."""

    agent: str
    path: Callable[[Mapping[str, str]], Path]
    edit: Callable[[Path, str | None, InstallContext | None], str | None]  # ctx None = remove

    def change(self, ctx: InstallContext, install: bool, before: FileChange | None = None) -> FileChange:
        """The file change; stacked on ``before`` when another installer already edits the same file."""
        path = self.path(ctx.env)
        original = before.before if before is not None else read_text(path)
        current = before.after if before is not None else original
        return FileChange(path, original, self.edit(path, current, ctx if install else None))


def _stdio_entry(ctx: InstallContext, agent: str, typed: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "stdio"} if typed else {}
    entry.update({"command": ctx.cli_launcher, "args": server_args(agent)})
    env = server_env(ctx)
    if env:
        entry["env"] = env
    return entry


def _claude_path(env: Mapping[str, str]) -> Path:
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser() / ".claude.json"
    return home_of(env) / ".claude.json"


def _codex_path(env: Mapping[str, str]) -> Path:
    root = Path(env["CODEX_HOME"]).expanduser() if env.get("CODEX_HOME") else home_of(env) / ".codex"
    return root / "config.toml"


def _opencode_path(env: Mapping[str, str]) -> Path:
    from memmy.integrations.agents.opencode import INSTALLER

    root = INSTALLER.root(env)
    if not (root / "opencode.json").exists() and (root / "opencode.jsonc").exists():
        return root / "opencode.jsonc"
    return root / "opencode.json"


def _hermes_path(env: Mapping[str, str]) -> Path:
    root = Path(env["HERMES_HOME"]).expanduser() if env.get("HERMES_HOME") else home_of(env) / ".hermes"
    return root / "config.yaml"


def _claude_edit(path: Path, text: str | None, ctx: InstallContext | None) -> str | None:
    entry = _stdio_entry(ctx, "claude_code", typed=True) if ctx else None
    return _json_edit(path, text, ("mcpServers",), entry, {})


def _cursor_edit(path: Path, text: str | None, ctx: InstallContext | None) -> str | None:
    entry = _stdio_entry(ctx, "cursor", typed=False) if ctx else None
    return _json_edit(path, text, ("mcpServers",), entry, {})


def _codex_edit(path: Path, text: str | None, ctx: InstallContext | None) -> str | None:
    return _toml_edit(path, text, _stdio_entry(ctx, "codex", typed=False) if ctx else None)


def _hermes_edit(path: Path, text: str | None, ctx: InstallContext | None) -> str | None:
    return _yaml_edit(path, text, _stdio_entry(ctx, "hermes", typed=False) if ctx else None)


def _opencode_edit(path: Path, text: str | None, ctx: InstallContext | None) -> str | None:
    entry: dict[str, Any] | None = None
    if ctx is not None:
        entry = {"type": "local", "command": [ctx.cli_launcher, *server_args("opencode")], "enabled": True}
        env = server_env(ctx)
        if env:
            entry["environment"] = env
    if path.suffix == ".jsonc" and text and _has_comments(text):
        if entry is None:
            return text
        raise ManualStep(
            f"{path} has comments, which memmy does not rewrite: add this under \"mcp\" yourself, then run init "
            f'again: "memmy": {dump_like(entry, None).strip()}'
        )
    return _json_edit(path, text, ("mcp",), entry, {"$schema": "https://opencode.ai/config.json"})


def _has_comments(text: str) -> bool:
    """True when JSONC text has a ``//`` or ``/* */`` comment outside strings."""
    return bool(re.search(r'^(?:[^"\n]|"(?:[^"\\\n]|\\.)*")*?(?://|/\*)', text, re.MULTILINE))


TARGETS: dict[str, McpTarget] = {
    target.agent: target
    for target in (
        McpTarget("claude_code", _claude_path, _claude_edit),
        McpTarget("codex", _codex_path, _codex_edit),
        McpTarget("cursor", lambda env: home_of(env) / ".cursor" / "mcp.json", _cursor_edit),
        McpTarget("opencode", _opencode_path, _opencode_edit),
        McpTarget("hermes", _hermes_path, _hermes_edit),
    )
}


def with_mcp(plan: Plan, ctx: InstallContext, install: bool) -> Plan:
    """``plan`` plus the agent's MCP registration (or its removal); stacked on an edit of the same file."""
    target = TARGETS.get(plan.agent)
    if target is None:
        return plan
    path = target.path(ctx.env)
    try:
        for index, existing in enumerate(plan.changes):
            if existing.path == path:
                plan.changes[index] = target.change(ctx, install, existing)
                return plan
        plan.changes.append(target.change(ctx, install))
    except ManualStep as exc:  # everything else is still installed; the note says what to do
        plan.notes.append(str(exc))
    return plan


def registered(agent: str, env: Mapping[str, str]) -> dict[str, Any] | None:
    """memmy's registration as the agent will read it (``command`` + ``args``), or None."""
    target = TARGETS.get(agent)
    if target is None:
        return None
    path = target.path(env)
    text = read_text(path)
    if not text:
        return None
    if path.suffix == ".toml":
        servers = tomlkit.parse(text).get("mcp_servers") or {}
        entry = servers.get(SERVER_NAME)
        return entry.unwrap() if entry is not None else None
    if path.suffix == ".yaml":
        loaded = YAML(typ="safe").load(text) or {}
        entry = (loaded.get("mcp_servers") or {}).get(SERVER_NAME)
        return dict(entry) if isinstance(entry, dict) else None
    data = load_json_object(path, text)
    if agent == "opencode":
        raw = (data.get("mcp") or {}).get(SERVER_NAME)
        if not isinstance(raw, dict):
            return None
        command = list(raw.get("command") or [])
        return {"command": command[0] if command else "", "args": command[1:], "env": raw.get("environment") or {}}
    raw = (data.get("mcpServers") or {}).get(SERVER_NAME)
    return dict(raw) if isinstance(raw, dict) else None
