"""The workbench's slash commands: the TUI's (``/help``, ``/status``, ``/model``, ``/goal``, ``/memory`` … from
:mod:`memmy.agent.slash_commands`) plus ``/new``, ``/stop``, ``/restart`` carried out by the workbench and ``/dream``,
``/dream-log``, ``/dream-restore ID`` asked of the memory daemon."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memmy.agent import slash_commands
from memmy.agent.daemon_link import DaemonError
from memmy.agent.loop import Agent
from memmy.agent.memory import MemoryBridge

#: (command, argument hint, purpose) in the command panel's order.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("/new", "", "Start a new task"),
    ("/stop", "", "Stop the running turn"),
    ("/restart", "", "Run the last message again (stops the running turn first)"),
    ("/status", "", "Model, provider, memory, session"),
    ("/model", "[list | NAME]", "Show the model; list presets; switch preset"),
    ("/goal", "[TEXT | status | pause | resume | edit TEXT | budget N|none | clear]", "Persistent goal"),
    ("/memory", "", "What memory told the model this turn"),
    ("/history", "[n]", "The last n messages of this session"),
    ("/image", "PROMPT", "Make a picture through the image generation slot"),
    ("/dream", "[dry]", "Run a Dream pass over memory now (dry: report only)"),
    ("/dream-log", "", "Recent Dream passes"),
    ("/dream-restore", "ID", "Undo a Dream pass"),
    ("/help", "", "This list"),
)
ACTIONS = {"/new": "new", "/stop": "stop", "/restart": "restart"}


@dataclass(frozen=True)
class Outcome:
    """What to show, and what the workbench does next (``new``, ``stop``, ``restart`` or nothing)."""

    text: str
    action: str | None = None


def help_text() -> str:
    """The ``/help`` answer."""
    lines = [f"{name} {hint}".rstrip().ljust(32) + purpose for name, hint, purpose in COMMANDS]
    lines.append("Enter sends · Shift+Enter new line · Ctrl/Cmd+K searches tasks · messages queue while a turn runs")
    return "\n".join(lines)


def _dream_pass(answer: dict[str, Any]) -> str:
    stats = answer.get("stats") or {}
    counts = ", ".join(f"{k} {v}" for k, v in stats.items() if isinstance(v, int | float)) or "no changes"
    head = "Dream (dry run)" if answer.get("dryRun") else f"Dream {answer.get('id')}"
    return f"{head}: {answer.get('status')} · {counts} · {len(answer.get('changes') or [])} changes"


def _dream_log(answer: dict[str, Any]) -> str:
    rows = [
        f"{d.get('id')}  {d.get('status')}  {d.get('trigger')}  {d.get('startedAt')}"
        for d in answer.get("dreams") or []
        if isinstance(d, dict)
    ]
    return "\n".join(rows) or "no Dream passes yet"


async def dream(memory: MemoryBridge | None, name: str, arg: str) -> str:
    """``/dream``, ``/dream-log`` and ``/dream-restore ID`` through the memory daemon."""
    if memory is None or not memory.enabled:
        return "memory is off: Dream runs in the memory daemon"
    try:
        if name == "/dream":
            return _dream_pass(await memory.request("POST", "/dream/run", {"dryRun": arg.strip() == "dry"}))
        if name == "/dream-log":
            return _dream_log(await memory.request("GET", "/dream/log?limit=10"))
        dream_id = arg.strip()
        if not dream_id or not all(c.isalnum() or c in "_-" for c in dream_id):
            return "usage: /dream-restore ID (/dream-log lists them)"
        answer = await memory.request("POST", f"/dream/{dream_id}/restore", {})
        return f"Dream {answer.get('id')} restored: {answer.get('changes')} changes undone"
    except DaemonError as exc:
        return f"{name}: {exc}"


async def run(agent: Agent, line: str, problems: list[str]) -> Outcome:
    """Run one slash command over the session's agent."""
    name, _, arg = line.strip().partition(" ")
    if name == "/help":
        return Outcome(help_text())
    if name in ACTIONS:
        return Outcome("", ACTIONS[name])
    if name in ("/dream", "/dream-log", "/dream-restore"):
        return Outcome(await dream(agent.memory, name, arg))
    if name in ("/quit", "/exit", "/last-compaction") or name in {c[0] for c in slash_commands.COMMANDS}:
        done = slash_commands.run_command(agent, line, problems)
        return Outcome(done.text if done.action != "quit" else "close the tab to leave")
    return Outcome(f"unknown command {name}; /help lists them")
