"""The chat turns in the worker (memmy/agent/channels/agent_turns.py), on the real agent runtime against the fake
model provider: the turns that start together pass the gate one at a time, in arrival order, each going on to its
first wait before the next begins; many chats' turns at once keep each chat's order and history; the user's message
is on disk while the model answers; the worker's warm-up leaves nothing for the first turn to import."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from memmy.agent.channels.agent_turns import AgentTurns, Gate
from memmy.agent.config import load_agent_config
from memmy.agent.loop import TurnEvent
from memmy.agent.runtime import open_runtime
from tests.agent_stubs import Reply, last_user_text, run_model_stub, write_agent_config


def test_turns_that_start_together_pass_the_gate_one_at_a_time_in_arrival_order() -> None:
    """Each turn runs its stretch and comes back from its first wait before the next turn's stretch starts (without
    the gate every stretch ran first, then every turn came back: ``0a 0b 1a 1b ... 0c 1c ...``)."""
    log: list[str] = []

    async def turn(gate: Gate, name: str) -> None:
        await gate.enter()
        log.append(f"{name}a")
        log.append(f"{name}b")  # the stretch: no wait between a and b
        await asyncio.sleep(0)  # its first wait (the network, in a turn): the gate passes to the next
        log.append(f"{name}c")

    async def main() -> None:
        gate = Gate()
        await asyncio.gather(*(turn(gate, str(n)) for n in range(5)))
        await gate.enter()  # free again once every turn is through

    asyncio.run(main())
    assert log == [f"{n}{step}" for n in range(5) for step in "abc"]


def test_a_turn_cancelled_at_the_gate_lets_the_others_through() -> None:
    passed: list[int] = []

    async def turn(gate: Gate, n: int) -> None:
        await gate.enter()
        await asyncio.sleep(0)
        passed.append(n)

    async def main() -> None:
        gate = Gate()
        turns = [asyncio.create_task(turn(gate, n)) for n in range(4)]
        await asyncio.sleep(0)  # every turn at the gate, the first through it
        turns[2].cancel()
        await asyncio.gather(*turns, return_exceptions=True)

    asyncio.run(main())
    assert passed == [0, 1, 3]


def test_many_chats_at_once_keep_their_order_and_history(isolated_home: Path) -> None:
    """Twelve chats, three messages each, every chat's messages sent at once: each answer belongs to its message,
    and each request carries the chat's own earlier messages in order (turns of different chats interleave; a chat's
    own never do)."""
    chats = [f"channel:telegram:{n}" for n in range(12)]

    def brain(body: dict[str, Any]) -> Reply:
        asked = last_user_text(body).strip()
        return Reply(text="echo: " + asked, delay_s=0.05 if asked.endswith("message 0") else 0.0)

    async def chat(turns: AgentTurns, session: str) -> list[str]:
        answers = []
        for n in range(3):
            answer = await turns.run(session, f"{session} message {n}", source="telegram", tools=False)
            answers.append(answer.text)
        return answers

    with run_model_stub(brain, keep_alive=True) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def main() -> list[list[str]]:
            turns = AgentTurns(load_agent_config())
            await turns.warm()
            try:
                return await asyncio.gather(*(chat(turns, session) for session in chats))
            finally:
                await turns.close()

        answered = asyncio.run(main())
    for session, answers in zip(chats, answered, strict=True):
        assert answers == [f"echo: {session} message {n}" for n in range(3)]
        asked = [
            [m["content"] for m in r["body"]["messages"] if m["role"] == "user"]
            for r in stub.requests
            if last_user_text(r["body"]).startswith(f"{session} ")
        ]
        assert asked == [[f"{session} message {k}" for k in range(n + 1)] for n in range(3)]


def test_the_users_message_is_on_disk_while_the_model_answers(isolated_home: Path) -> None:
    """The turn's first write comes once the model has the request (its answer has begun), not after the answer."""
    reply = Reply(text=" ".join(["word"] * 30), chunk_delay_s=0.05)  # an answer that takes over a second
    seen: dict[str, bool] = {}

    with run_model_stub(lambda body: reply, keep_alive=True) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def main() -> None:
            config = load_agent_config()
            began, done = asyncio.Event(), asyncio.Event()

            def emit(event: TurnEvent) -> None:
                if event.kind == "text":
                    began.set()
                if event.kind == "done":
                    done.set()

            runtime = await open_runtime(config, "chat", memory=False, emit=emit)
            path = runtime.store.path("chat")

            def on_disk() -> bool:
                try:
                    messages = json.loads(path.read_text(encoding="utf-8")).get("messages") or []
                except (OSError, ValueError):
                    return False
                return any(m.get("content") == "remember this" for m in messages)

            turn = asyncio.create_task(runtime.agent.run_turn("remember this"))
            await began.wait()
            while not on_disk() and not done.is_set():
                await asyncio.sleep(0.01)
            seen["before the answer ended"] = on_disk() and not done.is_set()
            await turn
            await runtime.close()

        asyncio.run(main())
    assert seen == {"before the answer ended": True}


def test_the_users_message_is_on_disk_before_a_tool_runs(isolated_home: Path) -> None:
    """An answer of tool calls only streams no text: the user's message is written once that answer is in, before
    the tool runs and the model is asked again (a turn killed during a long tool keeps the message)."""
    (isolated_home / "notes.txt").write_text("the notes", encoding="utf-8")
    found: list[bool] = []
    where: list[Path] = []

    def on_disk() -> bool:
        try:
            messages = json.loads(where[0].read_text(encoding="utf-8")).get("messages") or []
        except (OSError, ValueError, IndexError):
            return False
        return any(m.get("content") == "read my notes" for m in messages)

    def brain(body: dict[str, Any]) -> Reply:
        if not any(m.get("role") == "tool" for m in body["messages"]):
            return Reply(tool_calls=[("read_file", json.dumps({"path": str(isolated_home / "notes.txt")}))])
        deadline = time.monotonic() + 5
        while not on_disk() and time.monotonic() < deadline:  # the turn cannot end (and save) while this waits
            time.sleep(0.02)
        found.append(on_disk())
        return Reply(text="done")

    with run_model_stub(brain, keep_alive=True) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def main() -> None:
            runtime = await open_runtime(load_agent_config(), "chat", memory=False, emit=lambda event: None)
            where.append(runtime.store.path("chat"))
            await runtime.agent.run_turn("read my notes")
            await runtime.close()

        asyncio.run(main())
    assert found == [True]


def test_the_warm_worker_imports_nothing_and_starts_no_thread_for_a_first_turn(isolated_home: Path) -> None:
    """What a chat's first turn loaded or started (the network backend, the image tool, the executor's threads) in
    front of its request is loaded and started by the warm-up instead."""
    with run_model_stub(keep_alive=True) as stub:
        write_agent_config(isolated_home, stub, memory=False)

        async def main() -> tuple[set[str], int, int]:
            turns = AgentTurns(load_agent_config())
            await turns.warm()
            modules, threads = set(sys.modules), executor_threads()
            try:
                await turns.run("channel:telegram:1", "hello", source="telegram", tools=False)
                return set(sys.modules) - modules, threads, executor_threads()
            finally:
                await turns.close()

        loaded, before, after = asyncio.run(main())
    assert loaded == set()
    assert before > 0 and after == before


def executor_threads() -> int:
    """The event loop's default executor's threads (``asyncio.to_thread``; named ``asyncio_N``)."""
    return sum(thread.name.startswith("asyncio_") for thread in threading.enumerate())
