"""The command lines start at once: ``memmy-memory --help`` imports only what printing help needs (no HTTP
client, no numpy, no onnxruntime, no rich, no YAML parser, no server or store), its command list comes from a
declared table whose short helps are checked against the commands' own, and a lazily loaded command behaves as
before. Times are measured in bench/cli_start.py, never asserted here."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from memmy.agent.cli import LAZY_COMMANDS as AGENT_LAZY
from memmy.agent.cli import cli as agent_cli
from memmy.cli.main import LAZY_COMMANDS, cli

HEAVY = (
    "httpx",
    "numpy",
    "onnxruntime",
    "rich",
    "yaml",
    "starlette",
    "uvicorn",
    "mcp",
    "openai",
    "anthropic",
    "textual",
    "memmy.embed",
    "memmy.service",
    "memmy.store",
    "memmy.server",
    "memmy.integrations",
    "memmy.recall",
    "telegram",
    "discord",
    "lark_oapi",
    "dingtalk_stream",
)


def imported_modules(code: str, *args: str, check: bool = True) -> set[str]:
    """The modules a fresh interpreter imports running ``code`` (read from ``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 or not check, done.stderr[-2000:]
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_memmy_memory_help_imports_nothing_heavy() -> None:
    modules = imported_modules("from memmy.cli.main import main; main()", "--help")
    assert "click" in modules and "memmy.cli.main" in modules  # the measurement sees the imports at all
    assert heavy(modules) == set()


@pytest.mark.parametrize("width", [45, 78, 200])
def test_the_declared_short_helps_are_the_commands_own(width: int) -> None:
    for name, (module, attribute, short_help) in LAZY_COMMANDS.items():
        command = getattr(importlib.import_module(module), attribute)
        assert command.name == name
        assert click.Command(name, help=short_help).get_short_help_str(width) == command.get_short_help_str(width)


def test_help_lists_every_command_and_a_lazy_command_runs() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["--help"])
    assert listed.exit_code == 0
    for name in [*LAZY_COMMANDS, "add", "search", "serve"]:
        assert f"\n  {name} " in listed.output
    detail = runner.invoke(cli, ["tombstones", "--help"])
    assert detail.exit_code == 0 and "restore" in detail.output
    unknown = runner.invoke(cli, ["no-such-command"])
    assert unknown.exit_code == 2 and "No such command" in unknown.output


def test_memmy_help_and_status_import_nothing_heavy() -> None:
    """``memmy --help`` and ``memmy status`` (no model configured) load neither the providers' SDKs, nor MCP,
    Textual, the workbench or the channels' SDKs."""
    code = "from memmy.agent.cli import main; main()"
    shown = imported_modules(code, "--help")
    assert "memmy.agent.cli" in shown and heavy(shown) == set()
    status = imported_modules(code, "status", check=False)
    assert "memmy.agent.memory" in status  # it did ask the memory daemon
    assert heavy(status) - {"h11"} == set() and not any(m.startswith("memmy.workbench") for m in status)


def test_memmy_lists_its_lazy_commands_with_their_own_help() -> None:
    for name, (module, attribute, short_help) in AGENT_LAZY.items():
        command = getattr(importlib.import_module(module), attribute)
        assert click.Command(name, help=short_help).get_short_help_str(78) == command.get_short_help_str(78)
    listed = CliRunner().invoke(agent_cli, ["--help"])
    assert listed.exit_code == 0 and "\n  channels " in listed.output
