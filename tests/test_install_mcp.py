"""``init`` registers memmy's MCP server in each agent's own config (comments, odd indentation and foreign entries
kept); a real MCP client started from each registration lists memmy's tools; ``remove`` gives the original bytes.
Also: hooks survive moving the install (``init --check`` flags them first, re-running ``init`` repairs them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from mcp.client.stdio import StdioServerParameters

from memmy.cli.main import cli
from memmy.integrations import check_installed
from memmy.integrations.launcher import recorded_python
from memmy.integrations.mcp_config import registered
from tests.conftest import Daemon
from tests.test_mcp import list_names, stdio_env, with_client

CLAUDE_JSON = '{\n    "numStartups": 12,\n    "mcpServers": {\n        "github": {\n            "type": "stdio",\n' \
    '            "command": "gh-mcp",\n            "args": []\n        }\n    },\n    "theme": "dark"\n}\n'
CODEX_TOML = """# my codex settings
model = "gpt-5"   # the default model

[mcp_servers.docs]
command = "docs-mcp"  # keep this one
args = ["--port", "0"]

[profiles.fast]
model = "gpt-5-mini"
"""
CURSOR_JSON = '{\n\t"mcpServers": {\n\t\t"linear": {\n\t\t\t"url": "https://mcp.linear.app/sse"\n\t\t}\n\t}\n}'
OPENCODE_JSON = '{\n   "$schema": "https://opencode.ai/config.json",\n   "theme": "tokyonight",\n   "mcp": {\n' \
    '      "sentry": {"type": "remote", "url": "https://mcp.sentry.dev/mcp"}\n   }\n}\n'
HERMES_YAML = """# Hermes config, hand written
model:
    default: anthropic/claude-sonnet   # main model
    provider: openrouter

mcp_servers:
    time:   # a foreign server
        command: uvx
        args:
            - mcp-server-time

toolsets:
    - hermes-cli
"""
AGENTS = "claude_code,codex,cursor,opencode,hermes"


def seed(home: Path) -> dict[str, Path]:
    files = {
        "claude_code": home / ".claude.json",
        "codex": home / ".codex" / "config.toml",
        "cursor": home / ".cursor" / "mcp.json",
        "opencode": home / ".config" / "opencode" / "opencode.json",
        "hermes": home / ".hermes" / "config.yaml",
    }
    texts = [CLAUDE_JSON, CODEX_TOML, CURSOR_JSON, OPENCODE_JSON, HERMES_YAML]
    for path, text in zip(files.values(), texts, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (home / ".claude").mkdir(exist_ok=True)
    (home / ".claude" / "settings.json").write_text('{\n   "model": "opus"\n}')
    return files


def snapshot(home: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and ".memmy" not in p.parts
    }


def run_cli(home: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    base = {"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "PATH": os.environ.get("PATH", "")}
    return CliRunner().invoke(cli, list(args), env={**base, **(env or {})}, catch_exceptions=False)


def test_mcp_registered_everywhere_styles_kept_tools_listed_and_original_bytes_back(
    isolated_home: Path, daemon: Daemon
) -> None:
    home = isolated_home
    files = seed(home)
    before = snapshot(home)
    result = run_cli(home, "init", "--agent", AGENTS, "--endpoint", daemon.url, "--no-model")
    assert result.exit_code == 0, result.output

    claude = files["claude_code"].read_text()
    assert claude.startswith('{\n    "numStartups": 12,\n    "mcpServers": {\n        "github"')  # 4-space indent
    assert json.loads(claude)["theme"] == "dark" and "gh-mcp" in claude
    codex = files["codex"].read_text()
    head, tail = CODEX_TOML.split("[profiles.fast]")
    assert codex.startswith(head + "[mcp_servers.memmy]\n") and codex.endswith("\n\n[profiles.fast]" + tail)
    assert tomllib.loads(codex)["mcp_servers"]["docs"]["command"] == "docs-mcp"
    cursor = files["cursor"].read_text()
    assert cursor.startswith('{\n\t"mcpServers": {\n\t\t"linear"') and not cursor.endswith("\n")  # tabs, no newline
    opencode = json.loads(files["opencode"].read_text())
    assert opencode["mcp"]["sentry"]["type"] == "remote" and opencode["mcp"]["memmy"]["type"] == "local"
    hermes = files["hermes"].read_text()
    assert "# Hermes config, hand written" in hermes and "# a foreign server" in hermes and "# main model" in hermes
    parsed = yaml.safe_load(hermes)
    assert parsed["mcp_servers"]["time"]["command"] == "uvx" and parsed["toolsets"] == ["hermes-cli"]
    assert "- mcp-server-time\n    memmy:\n        command: " in hermes  # own 4-space indent, no stray blank
    assert hermes.count("\n\n") == HERMES_YAML.count("\n\n") and "\n\ntoolsets:" in hermes  # blank lines stay put

    for agent in AGENTS.split(","):
        entry = registered(agent, {"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
        assert entry is not None, agent
        assert entry["command"] == str(home / ".memmy" / "bin" / "memmy-memory"), agent
        assert entry["args"] == ["--source", agent, "mcp"], agent
        env = {**stdio_env(home, daemon.url, daemon.token), **(entry.get("env") or {})}
        server = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
        names = with_client(server, list_names)
        assert "memmy_memory_search" in names and "memmy_memory_get" in names, agent

    again = run_cli(home, "init", "--agent", AGENTS, "--endpoint", daemon.url, "--no-model")
    assert again.exit_code == 0 and "installed (" not in again.output  # idempotent

    removed = run_cli(home, "remove", "--agent", AGENTS)
    assert removed.exit_code == 0, removed.output
    assert snapshot(home) == before  # byte for byte, every agent


def test_remove_after_the_user_edited_the_file_keeps_their_edit(isolated_home: Path) -> None:
    home = isolated_home
    files = seed(home)
    assert run_cli(home, "init", "--agent", "codex", "--no-model").exit_code == 0
    edited = files["codex"].read_text().replace('model = "gpt-5"', 'model = "gpt-6"')
    files["codex"].write_text(edited)
    assert run_cli(home, "remove", "--agent", "codex").exit_code == 0
    text = files["codex"].read_text()
    assert 'model = "gpt-6"   # the default model' in text and "memmy" not in text
    assert "[mcp_servers.docs]" in text and "# keep this one" in text


def test_compact_json_stays_compact_and_comes_back_byte_for_byte(isolated_home: Path) -> None:
    home = isolated_home
    (home / ".claude").mkdir()
    (home / ".cursor").mkdir()
    minified = {
        home / ".claude" / "settings.json": '{"model":"opus","permissions":{"allow":["Bash(ls, -la)","Read(a: b)"]}}',
        home / ".claude.json": '{"numStartups":3,"theme":"dark","mcpServers":{}}\n',
    }
    one_line = {home / ".cursor" / "hooks.json": '{"version": 1, "hooks": {"stop": [{"command": "say done"}]}}\n'}
    for path, text in {**minified, **one_line}.items():
        path.write_text(text)
    before = snapshot(home)
    assert run_cli(home, "init", "--agent", "claude_code,cursor", "--no-model").exit_code == 0
    for path, text in {**minified, **one_line}.items():
        after = path.read_text()
        assert after.strip().count("\n") == 0, (path, after)  # still one line
        assert after.endswith("\n") == text.endswith("\n"), path
        assert len(after) > len(text) and "memmy" in after, path
    for path in minified:
        shape = re.sub(r'"(?:[^"\\]|\\.)*"', '""', path.read_text())
        assert ", " not in shape and ": " not in shape, path  # no spaces added between items
    cursor_shape = re.sub(r'"(?:[^"\\]|\\.)*"', '""', (home / ".cursor" / "hooks.json").read_text())
    assert ", " in cursor_shape and ": " in cursor_shape and ",\"" not in cursor_shape
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert settings["permissions"]["allow"] == ["Bash(ls, -la)", "Read(a: b)"] and settings["hooks"]["Stop"]
    assert json.loads((home / ".claude.json").read_text())["mcpServers"]["memmy"]["args"][-1] == "mcp"
    assert run_cli(home, "remove", "--agent", "claude_code,cursor").exit_code == 0
    assert snapshot(home) == before


def _python_copy(target: Path) -> Path:
    """A relocatable interpreter for the test: a venv made from this interpreter (inherits its packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(target)], check=True)
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    for child in site.glob("*.pth"):  # an editable memmy install is found through a .pth file
        dest = next(target.glob("lib/python3*/site-packages")) / child.name
        shutil.copy(child, dest)
    (next(target.glob("lib/python3*/site-packages")) / "_inherit.pth").write_text(str(site) + "\n")
    return target / "bin" / "python"


def test_moving_the_install_is_flagged_then_repaired_by_init(
    isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = isolated_home
    seed(home)
    (home / ".codex" / "hooks.json").write_text("{}\n")
    (home / ".cursor" / "hooks.json").write_text("{}\n")
    old = _python_copy(tmp_path / "install-a")
    monkeypatch.setattr(sys, "executable", str(old))
    assert run_cli(home, "init", "--agent", AGENTS, "--no-model").exit_code == 0
    launcher = home / ".memmy" / "bin" / "memmy-hook"
    assert recorded_python(launcher) == str(old)
    settings = (home / ".claude" / "settings.json").read_text()
    assert str(old) not in settings and str(launcher) in settings  # hooks call the launcher, never the venv
    ok = run_cli(home, "init", "--check")
    assert ok.exit_code == 0 and "✓" in ok.output, ok.output

    moved = tmp_path / "install-b"
    shutil.move(tmp_path / "install-a", moved)
    findings = check_installed(home, {"MEMMY_HOME": str(home / ".memmy")})
    agents = {f.agent for f in findings if f.severity == "error"}
    assert {"claude_code", "codex", "cursor", "opencode", "hermes"} <= agents
    assert all("memmy-memory init" == f.fix for f in findings)
    flagged = run_cli(home, "init", "--check", "--json")
    assert flagged.exit_code == 1 and json.loads(flagged.output)["ok"] is False

    # A hook run now fails open (the agent is never blocked) and says how to fix it.
    env = {"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "PATH": "/usr/bin:/bin"}
    broken = subprocess.run([str(launcher), "claude_code", "Stop"], input="{}", capture_output=True, text=True, env=env)
    assert broken.returncode == 0 and "memmy-memory init" in broken.stderr

    monkeypatch.setattr(sys, "executable", str(moved / "bin" / "python"))
    repaired = run_cli(home, "init", "--agent", AGENTS, "--no-model")
    assert repaired.exit_code == 0, repaired.output
    assert check_installed(home, {"MEMMY_HOME": str(home / ".memmy")}) == []
    assert run_cli(home, "init", "--check").exit_code == 0
    # The repaired launcher really runs memmy from the new place.
    version = subprocess.run(
        [str(home / ".memmy" / "bin" / "memmy-memory"), "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and "memmy-memory" in version.stdout, version.stderr


def test_legacy_interpreter_hooks_are_flagged(isolated_home: Path) -> None:
    home = isolated_home
    (home / ".codex").mkdir()
    gone = "/nonexistent/checkout/.venv/bin/python3"
    hooks = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": f"{gone} -m memmy.hook codex Stop"}]}]}}
    (home / ".codex" / "hooks.json").write_text(json.dumps(hooks))
    findings = check_installed(home, {})
    assert [(f.agent, f.severity) for f in findings] == [("codex", "error")] and gone in findings[0].message
    assert run_cli(home, "init", "--agent", "codex", "--no-model").exit_code == 0  # replaces the legacy entry
    text = (home / ".codex" / "hooks.json").read_text()
    assert gone not in text and "memmy-hook codex Stop" in text
    assert check_installed(home, {"MEMMY_HOME": str(home / ".memmy")}) == []


def test_opencode_jsonc_with_comments_is_left_alone_with_a_note(isolated_home: Path) -> None:
    root = isolated_home / ".config" / "opencode"
    root.mkdir(parents=True)
    jsonc = '{\n  // my theme\n  "theme": "tokyonight"\n}\n'
    (root / "opencode.jsonc").write_text(jsonc)
    result = run_cli(isolated_home, "init", "--agent", "opencode", "--no-model")
    assert result.exit_code == 0, result.output
    assert (root / "opencode.jsonc").read_text() == jsonc and (root / "plugins" / "memmy-memory.js").exists()
    assert "has comments" in result.output and '"type": "local"' in result.output
