"""``memmy``: the Textual app. Enter sends (queues while a turn runs), Tab appends to the running turn or
completes a slash command, ``/`` opens the filtered command menu, Ctrl+C stops the running turn and exits."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerCancelled, WorkerFailed

from memmy.agent.config import DEFAULT_SESSION, AgentConfig
from memmy.agent.loop import TurnEvent
from memmy.agent.runtime import Runtime, open_runtime
from memmy.agent.slash_commands import EXIT_WORDS, archive_and_reset, run_command, visible_commands


class PromptInput(Input):
    """The input line, with ``Ctrl+Backspace`` deleting the previous word as in the docs."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+backspace", "delete_left_word", "Delete previous word", show=False),
    ]


class ApproveScreen(ModalScreen[bool]):
    """Ask before the shell runs a command (``tools.exec.approval: ask``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Allow"),
        Binding("n,escape", "answer(False)", "Deny"),
    ]

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def compose(self) -> ComposeResult:
        with Vertical(id="approve"):
            yield Static(Text(f"memmy wants to run:\n\n  {self.command}\n\nAllow? (y/n)"))
            with Horizontal():
                yield Button("Allow (y)", id="yes", variant="warning")
                yield Button("Deny (n)", id="no")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class MemmyApp(App[int]):
    """The memmy TUI for one session."""

    CSS = """
    Screen { layout: vertical; }
    #log { height: 1fr; padding: 0 1; }
    #log > Static { margin: 0 0 1 0; }
    .user { color: $accent; }
    .tool { color: $text-muted; }
    .notice { color: $warning; }
    .error { color: $error; }
    .memory { color: $success; }
    #queue { height: auto; color: $text-muted; padding: 0 1; display: none; }
    #slash { height: auto; max-height: 10; display: none; border: round $accent; }
    #bar { height: 3; border: round $primary; }
    #mark { width: 2; color: $accent; }
    #prompt { border: none; height: 1; padding: 0; width: 1fr; }
    #status { height: 1; background: $panel; color: $text; padding: 0 1; }
    ApproveScreen { align: center middle; }
    #approve { width: 70; height: auto; border: thick $warning; background: $surface; padding: 1 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Stop and exit", priority=True, show=False),
        Binding("tab", "tab", "Append / complete", priority=True, show=False),
        Binding("up", "menu(-1)", show=False, priority=True),
        Binding("down", "menu(1)", show=False, priority=True),
        Binding("escape", "close_menu", show=False, priority=True),
    ]

    def __init__(
        self,
        config: AgentConfig,
        *,
        session_name: str = DEFAULT_SESSION,
        project: str | None = None,
        memory: bool = True,
        config_file: str | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.session_name = session_name
        self.project = project
        self.memory_wanted = memory
        self.config_file = config_file
        self.runtime: Runtime | None = None
        self.queue: list[str] = []
        self.turn: Worker[Any] | None = None
        self._answer: Static | None = None
        self._answer_text = ""

    # --- layout ----------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="log")
        yield Static(id="queue")
        yield OptionList(id="slash")
        with Horizontal(id="bar"):
            yield Static("❯", id="mark")
            yield PromptInput(placeholder="Ask memmy, / for commands", id="prompt")
        yield Static(id="status")

    async def on_mount(self) -> None:
        self.title = "memmy"
        self.runtime = await open_runtime(
            self.config,
            self.session_name,
            self.project,
            approve=self._approve,
            emit=self._on_event,
            memory=self.memory_wanted,
            config_file=self.config_file,
        )
        agent = self.runtime.agent
        self.write(f"memmy · session {agent.session.name} · {agent.session.turns} earlier turns · /help", "notice")
        for problem in self.config.problems + tuple(self.runtime.hub.problems):
            self.write(problem, "error")
        self.refresh_status()
        self.query_one("#prompt", Input).focus()

    async def on_unmount(self) -> None:
        if self.runtime is not None:
            await self.runtime.close()

    def write(self, text: str, kind: str = "") -> Static:
        """Append one block to the conversation."""
        widget = Static(Text(text), classes=kind)
        log = self.query_one("#log", VerticalScroll)
        log.mount(widget)
        log.scroll_end(animate=False)
        return widget

    def refresh_status(self) -> None:
        """model · memory · tokens · session · state."""
        if self.runtime is None:
            return
        agent = self.runtime.agent
        memory = agent.memory.state if agent.memory is not None else "off"
        usage = agent.session.usage
        model = agent.choice.model if agent.choice else "no model"
        parts = [
            model,
            f"memory {memory}",
            f"tokens {usage.get('prompt_tokens', 0)}↑ {usage.get('completion_tokens', 0)}↓",
            agent.session.name,
        ]
        goal = agent.session.goal
        if goal:
            parts.append(f"goal {goal['status']}")
        if self.running:
            parts.append("running")
        self.query_one("#status", Static).update(Text(" · ".join(parts)))
        queue = self.query_one("#queue", Static)
        if self.queue:
            preview = self.queue[0] if len(self.queue[0]) < 60 else self.queue[0][:57] + "…"
            queue.update(Text(f"queued {len(self.queue)} · next: {preview} (from this TUI)"))
            queue.display = True
        else:
            queue.display = False

    @property
    def running(self) -> bool:
        """Whether this TUI is running a turn."""
        return self.turn is not None and not self.turn.is_finished

    # --- events from the agent -------------------------------------------------------------------------------

    def _on_event(self, event: TurnEvent) -> None:
        if event.kind == "text":
            if self._answer is None:
                self._answer = self.write("", "answer")
                self._answer_text = ""
            self._answer_text += event.text
            self._answer.update(Text(self._answer_text))
            self.query_one("#log", VerticalScroll).scroll_end(animate=False)
            return
        self._answer = None
        if event.kind == "memory":
            count = len(event.data.get("ids") or [])
            note = f"memory: {count} memories injected (/memory shows them)" if count else "memory: nothing recalled"
            self.write(note, "memory")
        elif event.kind == "tool_call":
            self.write(f"⚙ {event.text} {_compact(event.data.get('arguments', ''))}", "tool")
        elif event.kind == "tool_result":
            first = event.text.strip().splitlines()[0] if event.text.strip() else "(no output)"
            lines = len(event.text.splitlines())
            self.write(f"  ↳ {first[:100]}" + (f"  (+{lines - 1} lines)" if lines > 1 else ""), "tool")
        elif event.kind in ("notice", "compaction"):
            self.write(event.text if event.kind == "notice" else "context compacted (/last-compaction)", "notice")
        elif event.kind == "error":
            self.write(f"✖ {event.text}", "error")
        self.refresh_status()

    async def _approve(self, command: str) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.push_screen(ApproveScreen(command), callback=lambda ok: future.set_result(bool(ok)))
        return await future

    # --- input -----------------------------------------------------------------------------------------------

    @on(Input.Changed, "#prompt")
    def changed(self, event: Input.Changed) -> None:
        self._update_menu(event.value)

    def _update_menu(self, value: str) -> None:
        menu = self.query_one("#slash", OptionList)
        if not value.startswith("/") or " " in value:
            menu.display = False
            return
        entries = visible_commands(value, self.running)
        if [name for name, _, _ in entries] == [value]:
            entries = []  # a complete command: Enter runs it
        menu.clear_options()
        menu.add_options([Option(Text(f"{name:<18}{hint}"), id=name) for name, hint, _ in entries])
        menu.display = bool(entries)
        if entries:
            menu.highlighted = 0

    def _selected(self) -> str | None:
        menu = self.query_one("#slash", OptionList)
        if not menu.display or menu.highlighted is None:
            return None
        return menu.get_option_at_index(menu.highlighted).id

    def _complete(self, name: str) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.value = name
        prompt.cursor_position = len(name)
        self.query_one("#slash", OptionList).display = False

    @on(Input.Submitted, "#prompt")
    async def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        selected = self._selected()
        if selected and text != selected and selected.startswith(text):
            self._complete(selected)  # Enter on a prefix completes first
            return
        event.input.value = ""
        self.query_one("#slash", OptionList).display = False
        if not text:
            return
        if text in EXIT_WORDS:
            await self.action_interrupt()
            return
        if text.startswith("/"):
            await self._command(text)
            return
        if self.running:
            self.queue.append(text)
            self.refresh_status()
            return
        self._start(text)

    async def _command(self, text: str) -> None:
        assert self.runtime is not None
        self.write(text, "user")
        result = run_command(self.runtime.agent, text, list(self.runtime.hub.problems))
        if result.action == "quit":
            await self.action_interrupt()
            return
        if result.action in ("stop", "new") and self.running and self.turn is not None:
            self.turn.cancel()
        if result.action == "new":
            self.queue.clear()
            archive_and_reset(self.runtime.agent)
            # The new conversation's memory session opens now, while the user types its first message.
            self.run_worker(self.runtime.agent.prepare(), group="memory", exit_on_error=False)
            await self.query_one("#log", VerticalScroll).remove_children()
        self.write(result.text, "notice")
        self.refresh_status()

    def _start(self, text: str) -> None:
        self.write(f"❯ {text}", "user")
        self._answer = None
        self.turn = self.run_worker(self._run(text), group="turn", exit_on_error=False)
        self.refresh_status()

    async def _run(self, text: str) -> None:
        assert self.runtime is not None
        try:
            await self.runtime.agent.run_turn(text)
        except asyncio.CancelledError:
            self.write("stopped; the session is kept", "notice")
            raise
        finally:
            self._answer = None
            self.call_later(self._after_turn)

    def _after_turn(self) -> None:
        if self.running:
            self.call_later(self._after_turn)
            return
        self.refresh_status()
        if self.queue and self.runtime is not None:
            self._start(self.queue.pop(0))

    # --- actions ---------------------------------------------------------------------------------------------

    async def action_interrupt(self) -> None:
        """Ctrl+C / exit words: stop this TUI's turn (it is recorded as cancelled) and exit."""
        if self.running and self.turn is not None:
            self.turn.cancel()
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await self.turn.wait()
        self.exit(0)

    def action_tab(self) -> None:
        """Complete the selected command; while a turn runs, append the input to it."""
        selected = self._selected()
        prompt = self.query_one("#prompt", Input)
        if selected:
            self._complete(selected)
            return
        text = prompt.value.strip()
        if text and self.running and self.runtime is not None:
            self.runtime.agent.appended.append(text)
            self.write(f"+ {text} (appended to the running turn)", "user")
            prompt.value = ""

    def action_menu(self, step: int) -> None:
        """Move the highlight in the slash menu."""
        menu = self.query_one("#slash", OptionList)
        if menu.display and menu.option_count:
            menu.highlighted = ((menu.highlighted or 0) + step) % menu.option_count

    def action_close_menu(self) -> None:
        """Esc closes the slash menu."""
        self.query_one("#slash", OptionList).display = False


def _compact(arguments: str) -> str:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments[:100]
    if isinstance(parsed, dict):
        text = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in parsed.items())
    else:
        text = json.dumps(parsed)
    return text if len(text) <= 100 else text[:99] + "…"
