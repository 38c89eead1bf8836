"""The TUI through Textual's pilot: typing and sending, queueing while a turn runs, the slash menu and its
filtering, /new, /stop, /quit, exit words; against the local OpenAI-compatible stub (memory off)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.widgets import Input, OptionList, Static

from memmy.agent.config import load_agent_config
from memmy.agent.sessions import SessionStore
from memmy.agent.tui.app import MemmyApp
from tests.agent_stubs import Reply, last_user_text, run_model_stub, write_agent_config


def slow_brain(body: dict[str, Any]) -> Reply:
    text = last_user_text(body)
    return Reply(text="echo: " + text, delay_s=3.0 if "slow" in text else 0.0)


def log_text(app: MemmyApp) -> str:
    return "\n".join(str(w.render()) for w in app.query("#log Static").results(Static))


async def until(condition: Callable[[], bool], pilot: Any, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")


def run(body: Callable[[MemmyApp, Any], Any], home: Path) -> MemmyApp:
    async def main() -> MemmyApp:
        app = MemmyApp(load_agent_config(), memory=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(lambda: app.runtime is not None, pilot)
            await body(app, pilot)
        return app

    return asyncio.run(main())


def test_typing_sends_and_streams_the_answer(isolated_home: Path) -> None:
    with run_model_stub(slow_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            await pilot.press(*"hello there", "enter")
            await until(lambda: "echo: hello there" in log_text(app) and not app.running, pilot)
            assert "❯ hello there" in log_text(app)
            assert "tokens 11↑ 7↓" in str(app.query_one("#status", Static).render())

        run(body, isolated_home)
    session = SessionStore(isolated_home / ".memmy").load("cli:direct")
    assert [m["role"] for m in session.messages] == ["user", "assistant"]


def test_enter_queues_while_a_turn_runs(isolated_home: Path) -> None:
    with run_model_stub(slow_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            await pilot.press(*"slow one", "enter")
            await until(lambda: app.running, pilot)
            await pilot.press(*"second", "enter")
            queue = app.query_one("#queue", Static)
            assert queue.display and "queued 1 · next: second" in str(queue.render())
            await until(lambda: "echo: second" in log_text(app) and not app.running and not app.queue, pilot)
            assert not queue.display

        run(body, isolated_home)
    users = [m["content"] for m in SessionStore(isolated_home / ".memmy").load().messages if m["role"] == "user"]
    assert users == ["slow one", "second"]


def test_slash_menu_filters_completes_and_runs(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            menu = app.query_one("#slash", OptionList)
            await pilot.press("/")
            names = [menu.get_option_at_index(i).id for i in range(menu.option_count)]
            assert menu.display and len(names) == 8 and "/stop" not in names  # /stop only while running
            await pilot.press("m", "o")
            assert [menu.get_option_at_index(i).id for i in range(menu.option_count)] == ["/model"]
            await pilot.press("backspace", "backspace", "h", "i")
            assert [menu.get_option_at_index(i).id for i in range(menu.option_count)] == ["/history"]
            await pilot.press("backspace", "backspace", "g", "enter")  # Enter on a prefix completes
            assert app.query_one("#prompt", Input).value == "/goal" and not menu.display
            await pilot.press(*" ship the parser", "enter")
            assert "goal set: ship the parser" in log_text(app)
            await pilot.press("/", "m", "tab")  # Tab completes the selected entry
            assert app.query_one("#prompt", Input).value == "/model"
            await pilot.press(*" fast", "enter")
            assert "now using stub-fast" in log_text(app)
            await pilot.press("/", "escape")
            assert not menu.display

        run(body, isolated_home)


def test_stop_cancels_the_turn_and_keeps_the_session(isolated_home: Path) -> None:
    with run_model_stub(slow_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            await pilot.press(*"slow task", "enter")
            await until(lambda: app.running, pilot)
            await pilot.press(*"/stop", "enter")
            await until(lambda: not app.running, pilot)
            assert "stopped; the session is kept" in log_text(app)
            await pilot.press(*"after stop", "enter")
            await until(lambda: "echo: after stop" in log_text(app), pilot)

        run(body, isolated_home)
    users = [m["content"] for m in SessionStore(isolated_home / ".memmy").load().messages if m["role"] == "user"]
    assert users == ["slow task", "after stop"]


def test_new_starts_an_empty_conversation_and_archives_the_old(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            await pilot.press(*"remember the walrus", "enter")
            await until(lambda: "echo: remember the walrus" in log_text(app) and not app.running, pilot)
            await pilot.press(*"/new", "enter")
            await pilot.pause()
            assert "walrus" not in log_text(app) and "new conversation" in log_text(app)
            assert app.runtime is not None and app.runtime.agent.session.messages == []

        run(body, isolated_home)
    names = [s.name for s in SessionStore(isolated_home / ".memmy").list()]
    assert "cli:direct" in names and any(n.startswith("cli:direct@") for n in names)


def test_quit_and_exit_words_leave_the_app(isolated_home: Path) -> None:
    with run_model_stub() as stub:
        write_agent_config(isolated_home, stub, memory=False)
        for word in ("/quit", ":q", "exit"):

            async def body(app: MemmyApp, pilot: Any, word: str = word) -> None:
                await pilot.press(*word, "enter")
                await pilot.pause()
                assert app.return_code == 0 and not app.is_running

            run(body, isolated_home)


def test_tab_appends_to_the_running_turn(isolated_home: Path) -> None:
    with run_model_stub(slow_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            await pilot.press(*"slow start", "enter")
            await until(lambda: app.running, pilot)
            await pilot.press(*"and mind the tests", "tab")
            assert "appended to the running turn" in log_text(app)
            await until(lambda: "echo: and mind the tests" in log_text(app) and not app.running, pilot)

        run(body, isolated_home)
        assert "and mind the tests" in str(stub.requests[-1]["body"]["messages"])
    roles = [m["role"] for m in SessionStore(isolated_home / ".memmy").load().messages]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_ctrl_c_stops_the_turn_and_exits(isolated_home: Path) -> None:
    with run_model_stub(slow_brain) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            await pilot.press(*"slow and long", "enter")
            await until(lambda: app.running, pilot)
            await pilot.press("ctrl+c")
            await pilot.pause()
            assert app.return_code == 0 and not app.running

        run(body, isolated_home)
    assert SessionStore(isolated_home / ".memmy").load().messages[0]["content"] == "slow and long"


def test_shell_asks_for_approval_in_the_tui(isolated_home: Path, tmp_path: Path) -> None:
    import json

    from memmy.agent.tui.app import ApproveScreen
    from tests.agent_stubs import tool_results

    def brain(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if results:
            return Reply(text="result: " + results[-1])
        name = "allowed" if "allow" in last_user_text(body) else "denied"
        return Reply(tool_calls=[("exec", json.dumps({"command": f"touch {tmp_path / name}"}))])

    with run_model_stub(brain) as stub:
        write_agent_config(isolated_home, stub, approval="ask", memory=False)

        async def body(app: MemmyApp, pilot: Any) -> None:
            for text, key in (("please allow", "y"), ("please deny", "n")):
                await pilot.press(*text, "enter")
                await until(lambda: isinstance(app.screen, ApproveScreen), pilot)
                await pilot.press(key)
                await until(lambda: not app.running, pilot)
            assert "did not approve" in log_text(app)

        run(body, isolated_home)
    assert (tmp_path / "allowed").exists() and not (tmp_path / "denied").exists()
