"""SVG snapshots of the TUI's main screens (pytest-textual-snapshot; update with ``--snapshot-update``):
the start screen, the slash menu, a turn with a tool call, and ``/help``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from memmy.agent.config import load_agent_config
from memmy.agent.tui.app import MemmyApp
from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, tool_results, write_agent_config

SIZE = (100, 28)


def brain(body: dict[str, Any]) -> Reply:
    results = tool_results(body)
    if results:
        return Reply(text="The shell printed hello-from-shell, so the tool works.")
    if "shell" in last_user_text(body):
        return Reply(tool_calls=[("exec", json.dumps({"command": "echo hello-from-shell"}))])
    return Reply(text="echo: " + last_user_text(body))


@pytest.fixture
def app(isolated_home: Path) -> Iterator[MemmyApp]:
    stub: ModelStub
    with run_model_stub(brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        yield MemmyApp(load_agent_config(), memory=False)


async def ready(pilot: Any) -> None:
    app: MemmyApp = pilot.app
    while app.runtime is None:
        await pilot.pause(0.05)
    app.query_one("#prompt", Input).cursor_blink = False
    await pilot.pause()


async def idle(pilot: Any) -> None:
    app: MemmyApp = pilot.app
    for _ in range(400):
        if not app.running and "tool works" in str(app.query("#log Static").last().render()):
            break
        await pilot.pause(0.05)
    await pilot.pause()


def test_start_screen(app: MemmyApp, snap_compare: Any) -> None:
    assert snap_compare(app, run_before=ready, terminal_size=SIZE)


def test_slash_menu(app: MemmyApp, snap_compare: Any) -> None:
    async def before(pilot: Any) -> None:
        await ready(pilot)
        await pilot.press("/", "h")

    assert snap_compare(app, run_before=before, terminal_size=SIZE)


def test_turn_with_a_tool_call(app: MemmyApp, snap_compare: Any) -> None:
    async def before(pilot: Any) -> None:
        await ready(pilot)
        await pilot.press(*"try the shell", "enter")
        await idle(pilot)

    assert snap_compare(app, run_before=before, terminal_size=SIZE)


def test_help(app: MemmyApp, snap_compare: Any) -> None:
    async def before(pilot: Any) -> None:
        await ready(pilot)
        await pilot.press(*"/help", "enter")
        await pilot.pause()

    assert snap_compare(app, run_before=before, terminal_size=SIZE)
