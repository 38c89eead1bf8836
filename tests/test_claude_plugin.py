"""The Claude Code plugin marketplace (``/plugin marketplace add`` + ``/plugin install``) and the MCP registry's
``server.json``: files consistent with what ``init`` installs, hooks that fail open, an MCP entry a real client
can start."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import click
from click.testing import CliRunner
from mcp.client.stdio import StdioServerParameters

from memmy import __version__
from memmy.cli.main import cli
from memmy.integrations.agents.hooked import RESUME_COMMAND
from memmy.integrations.base import skill_markdown
from tests.conftest import Daemon
from tests.test_mcp import list_names, stdio_env, with_client

ROOT = Path(__file__).resolve().parents[1]
MARKETPLACE = ROOT / ".claude-plugin" / "marketplace.json"


def plugin_root() -> Path:
    market = json.loads(MARKETPLACE.read_text())
    (entry,) = market["plugins"]
    assert entry["name"] == "memmy-memory" and entry["version"] == __version__
    return (ROOT / str(entry["source"])).resolve()


def test_marketplace_plugin_matches_what_init_installs() -> None:
    root = plugin_root()
    manifest = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "memmy-memory" and manifest["version"] == __version__
    assert (root / "skills" / "memmy-memory" / "SKILL.md").read_text() == skill_markdown("claude_code", True)
    assert (root / "commands" / "memmy-resume.md").read_text() == RESUME_COMMAND
    hooks = json.loads((root / "hooks" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {"UserPromptSubmit", "Stop"}
    for event, groups in hooks.items():
        command = groups[0]["hooks"][0]["command"]
        assert command == f'"${{CLAUDE_PLUGIN_ROOT}}/bin/memmy-plugin" hook claude_code {event}'
    assert os.access(root / "bin" / "memmy-plugin", os.X_OK)


def test_plugin_hook_fails_open_without_memmy(isolated_home: Path) -> None:
    env = {"HOME": str(isolated_home), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(plugin_root() / "bin" / "memmy-plugin"), "hook", "claude_code", "Stop"],
        input="{}",
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0 and "pipx install memmy" in done.stderr


def test_plugin_mcp_server_lists_tools(isolated_home: Path, daemon: Daemon) -> None:
    env = {"HOME": str(isolated_home), "MEMMY_HOME": str(isolated_home / ".memmy")}
    assert CliRunner().invoke(cli, ["init", "--no-agents", "--no-model"], env=env).exit_code == 0
    root = plugin_root()
    entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["memmy"]
    command = entry["command"].replace("${CLAUDE_PLUGIN_ROOT}", str(root))
    server = StdioServerParameters(
        command=command, args=entry["args"], env=stdio_env(isolated_home, daemon.url, daemon.token)
    )
    assert "memmy_memory_search" in with_client(server, list_names)


def test_registry_server_json_describes_the_stdio_server() -> None:
    server = json.loads((ROOT / "server.json").read_text())
    assert server["version"] == __version__ and server["name"].count("/") == 1
    (package,) = server["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == "memmy"
    assert package["version"] == __version__ and package["transport"] == {"type": "stdio"}
    assert [a["value"] for a in package["packageArguments"]] == ["mcp"]
    assert cli.get_command(click.Context(cli), "mcp") is not None  # the argument is a real command
