"""Slash commands of the TUI, as plain functions over the :class:`Agent` (the TUI shows the text and carries out
the action: ``new``, ``stop``, ``quit``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from memmy.agent.loop import Agent
from memmy.agent.sessions import Session

#: (command, argument hint, purpose) in menu order.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("/help", "", "Show help for the available commands"),
    ("/status", "", "Runtime status: model, provider, memory, session"),
    ("/model", "[list | NAME]", "Show the model; list presets; switch preset"),
    ("/history", "[n]", "Show the last n messages of this session"),
    ("/new", "", "Stop the current task and start a new conversation"),
    ("/stop", "", "Stop the turn this TUI is running"),
    ("/memory", "", "Show what memory told the model this turn"),
    ("/last-compaction", "", "Show the latest context-compaction summary"),
    ("/goal", "[TEXT | status | pause | resume | edit TEXT | budget N|none | clear]", "Persistent goal"),
    ("/quit", "", "Exit the TUI"),
)
EXIT_WORDS = {"exit", "quit", "/exit", "/quit", ":q"}
GOAL_HELP = (
    "/goal TEXT or /goal create TEXT — set the persistent goal\n"
    "/goal / /goal status — show it      /goal pause · /goal resume · /goal clear\n"
    "/goal edit TEXT — change its text   /goal budget N|none — token budget (pauses the goal when spent)"
)


@dataclass
class CommandResult:
    """What to show and what to do."""

    text: str
    action: str | None = None  # new | stop | quit


def visible_commands(prefix: str, running: bool, limit: int = 8) -> list[tuple[str, str, str]]:
    """Menu entries matching ``prefix`` (``/stop`` only while a turn runs); the first ``limit``."""
    found = [c for c in COMMANDS if c[0].startswith(prefix) and (running or c[0] != "/stop")]
    return found[:limit]


def _help(running: bool) -> str:
    lines = [
        f"{name} {hint}".rstrip().ljust(30) + f" {purpose}"
        for name, hint, purpose in visible_commands("/", running, 99)
    ]
    lines.append("Enter sends (queues while a turn runs) · Tab appends to the running turn · Ctrl+C stops and exits")
    return "\n".join(lines)


def _model(agent: Agent, arg: str) -> str:
    if not arg:
        choice = agent.choice
        if choice is None:
            return "no model configured: run `memmy onboard`"
        return (
            f"model {choice.model} · provider {choice.provider} · preset {choice.name}\n"
            f"endpoint {choice.api_base or '(SDK default)'} · window {choice.context_window} tokens"
        )
    if arg == "list":
        presets = agent.config.presets
        if not presets:
            return "no presets (add them under agents.presets in config.yaml)"
        mark = agent.session.preset
        return "\n".join(
            f"{'*' if name == mark else ' '} {name:<12} {c.model} ({c.provider})" for name, c in sorted(presets.items())
        )
    try:
        choice = agent.use_preset(arg)
    except KeyError:
        return f"no preset {arg!r}; /model list shows them"
    return f"now using {choice.model} ({choice.provider}, preset {arg})"


def _history(session: Session, arg: str) -> str:
    try:
        count = int(arg) if arg else 20
    except ValueError:
        return "usage: /history [n]"
    shown = []
    for message in session.messages[-count:] if count > 0 else []:
        role = {"user": "you", "assistant": "memmy", "tool": "tool"}.get(str(message.get("role")), "?")
        text = str(message.get("content") or "").strip().replace("\n", " ")
        calls = ", ".join(c["function"]["name"] for c in message.get("tool_calls") or [])
        shown.append(f"{role}: {text[:160]}" + (f" [tools: {calls}]" if calls else ""))
    return "\n".join(shown) or "(no messages yet)"


def _goal(session: Session, arg: str) -> str:
    sub, _, rest = arg.partition(" ")
    goal = session.goal
    if sub in ("", "status"):
        if not goal:
            return "no goal (/goal TEXT sets one)"
        budget = goal.get("budget") or "none"
        return f"goal [{goal['status']}]: {goal['text']}\nbudget {budget} · used {goal.get('used', 0)} tokens"
    if sub == "help":
        return GOAL_HELP
    if sub in ("pause", "resume"):
        if not goal:
            return "no goal to " + sub
        goal["status"] = "paused" if sub == "pause" else "active"
        return f"goal {goal['status']}"
    if sub == "clear":
        session.goal = None
        return "goal cleared"
    if sub == "edit":
        if not goal or not rest.strip():
            return "usage: /goal edit TEXT (after /goal TEXT)"
        goal["text"] = rest.strip()
        return f"goal: {goal['text']}"
    if sub == "budget":
        if not goal:
            return "no goal yet"
        if rest.strip() == "none":
            goal["budget"] = None
            return "goal budget cleared"
        try:
            goal["budget"] = int(rest)
        except ValueError:
            return "usage: /goal budget N|none"
        return f"goal budget {goal['budget']} tokens"
    text = rest.strip() if sub == "create" else arg.strip()
    if not text:
        return "usage: /goal create TEXT"
    session.goal = {"text": text, "status": "active", "budget": None, "used": 0, "created": time.time()}
    return f"goal set: {text}"


def status_text(agent: Agent, problems: list[str]) -> str:
    """The ``/status`` report."""
    choice = agent.choice
    memory = agent.memory
    usage = agent.session.usage
    lines = [
        f"session {agent.session.name} · {agent.session.turns} turns · dir {agent.workspace}",
        f"model {choice.model} via {choice.provider}" if choice else "model: none (run `memmy onboard`)",
        "memory "
        + (
            "off"
            if memory is None or not memory.enabled
            else f"{memory.state} at {memory.settings.url}" + (f" ({memory.error})" if memory.error else "")
        ),
        f"tokens in {usage.get('prompt_tokens', 0)} · out {usage.get('completion_tokens', 0)}",
        f"tools {', '.join(sorted(agent.tools.tools)) or 'none'}",
    ]
    lines += [f"problem: {p}" for p in problems]
    return "\n".join(lines)


def run_command(agent: Agent, line: str, problems: list[str] | None = None) -> CommandResult:
    """Run one slash command."""
    name, _, arg = line.strip().partition(" ")
    arg = arg.strip()
    if name in ("/quit", "/exit"):
        return CommandResult("bye", "quit")
    if name == "/help":
        return CommandResult(_help(agent.running))
    if name == "/status":
        return CommandResult(status_text(agent, problems or []))
    if name == "/model":
        return CommandResult(_model(agent, arg))
    if name == "/history":
        return CommandResult(_history(agent.session, arg))
    if name == "/new":
        return CommandResult("new conversation", "new")
    if name == "/stop":
        return CommandResult("stopping the turn" if agent.running else "nothing is running", "stop")
    if name == "/memory":
        recall = agent.last_recall
        if recall is None:
            state = agent.memory.state if agent.memory else "off"
            return CommandResult(f"memory told the model nothing this turn (memory {state})")
        ids = ", ".join(recall.memory_ids) or "none"
        return CommandResult(f"memory ids: {ids}\n{recall.markdown.strip() or '(nothing recalled)'}")
    if name == "/last-compaction":
        if not agent.session.compactions:
            return CommandResult("no compaction yet in this session")
        last = agent.session.compactions[-1]
        return CommandResult(f"compacted {last['replaced']} messages:\n{last['summary']}")
    if name == "/goal":
        text = _goal(agent.session, arg)
        agent.store.save(agent.session)
        return CommandResult(text)
    if name == "/restart":
        return CommandResult("/restart is not accepted by the TUI; exit and start memmy again")
    return CommandResult(f"unknown command {name}; /help lists them")


def archive_and_reset(agent: Agent) -> None:
    """``/new``: keep the old conversation as ``NAME@time`` and start an empty one under the same name."""
    old = agent.session
    if old.messages:
        archived = Session(**{**old.__dict__, "name": f"{old.name}@{time.strftime('%Y%m%d-%H%M%S')}"})
        agent.store.save(archived)
    agent.session = Session(name=old.name, project=old.project, preset=old.preset)
    agent.last_recall = None
    agent.store.save(agent.session)
