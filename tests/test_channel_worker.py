"""The chat turns' worker processes (memmy/agent/channels/turn_worker.py): a turn answered through a worker with the
session continued; a pool of two, each chat's session in one of them: two chats' turns answered by different
worker processes, each chat in order with its whole history; a worker killed mid-turn started again with its message
answered with an error (the next one answered, the other worker untouched); and many chats at once answered once
each, in order per chat, while their answers come back from the workers out of order across chats. The real worker
processes, agent runtime and python-telegram-bot against the fake Bot API server; the fake model provider answers."""

from __future__ import annotations

import asyncio
import os
import pstats
import select
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from memmy.agent.channels.router import Answer
from memmy.agent.channels.settings import default_workers, load_channels, turn_workers
from memmy.agent.channels.supervisor import ChannelSupervisor
from memmy.agent.channels.turn_worker import PROFILE_ENV, TurnPool, TurnWorker, worker_index
from memmy.agent.config import load_agent_config
from memmy.agent.usage import UsageBook
from memmy.errors import ConfigError
from tests.agent_stubs import ModelStub, Reply, StubServer, last_user_text, run_model_stub, write_agent_config
from tests.fake_telegram import FakeTelegram, fake_telegram
from tests.test_channels import OWNER, supervising, write_config


def question(body: dict[str, Any]) -> str:
    """The user's message in a model request (memory is off in these tests: no recalled context around it)."""
    return last_user_text(body).strip()


def test_a_turn_is_answered_through_the_worker_and_the_session_continues(isolated_home: Path) -> None:
    with run_model_stub(lambda body: Reply(text="echo: " + question(body))) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        config = load_agent_config()

        async def talk() -> tuple[Answer, Answer, int]:
            worker = TurnWorker(config)
            try:
                first = await worker.run("channel:telegram:7", "first question", source="telegram", tools=False)
                second = await worker.run("channel:telegram:7", "second question", source="telegram", tools=False)
                assert worker.process is not None
                return first, second, worker.process.pid
            finally:
                await worker.close()

        first, second, pid = asyncio.run(talk())
    assert (first.text, first.status) == ("echo: first question", "succeeded")
    assert second.text == "echo: second question"
    assert pid != os.getpid()  # the turn ran in another process
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # close() stopped it (and reaped it)
    said = [m["content"] for m in stub.requests[-1]["body"]["messages"] if m["role"] == "user"]
    assert said == ["first question", "second question"]  # one session across the two messages
    assert UsageBook(config.home).day()["primary"]["calls"] == 2  # the worker's kept-open meter wrote both turns


def test_the_worker_ends_when_the_channels_process_is_gone(isolated_home: Path) -> None:
    """Its stdin closing (the channels' process killed, nothing said) ends the worker, its runtimes closed."""
    with run_model_stub(lambda body: Reply(text="echo: " + question(body))) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        config = load_agent_config()

        async def orphan() -> int:
            worker = TurnWorker(config)
            await worker.start()
            assert worker.process is not None and worker.process.stdin is not None
            worker.closing = True  # this test plays the dead parent: no restart
            worker.process.stdin.close()
            return await asyncio.wait_for(worker.process.wait(), 60)

        assert asyncio.run(orphan()) == 0


def test_the_worker_profiles_its_turns_when_asked(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``MEMMY_TURN_WORKER_PROFILE=PREFIX``: the worker writes cProfile statistics of its turns to ``PREFIX.PID`` when
    it closes (bench/channels.py --profile); without it, nothing is written."""
    prefix = isolated_home / "worker.pstats"
    with run_model_stub(lambda body: Reply(text="echo: " + question(body))) as stub:
        write_agent_config(isolated_home, stub, memory=False)
        config = load_agent_config()

        async def turn(profiled: bool) -> int:
            if profiled:
                monkeypatch.setenv(PROFILE_ENV, str(prefix))
            else:
                monkeypatch.delenv(PROFILE_ENV, raising=False)
            worker = TurnWorker(config)
            try:
                await worker.run("channel:telegram:7", "profile me", source="telegram", tools=False)
                assert worker.process is not None
                return worker.process.pid
            finally:
                await worker.close()

        assert asyncio.run(turn(False)) and not list(isolated_home.glob("worker.pstats*"))
        pid = asyncio.run(turn(True))
    stats = pstats.Stats(str(prefix.with_name(f"worker.pstats.{pid}")))
    ran = {(Path(path).name, name) for path, _, name in stats.stats}  # type: ignore[attr-defined]
    assert ("agent_turns.py", "run") in ran and ("loop.py", "run_turn") in ran


def pool_config(home: Path, stub: ModelStub, fake: FakeTelegram, chats: list[int], workers: int = 2) -> None:
    """config.yaml: the Telegram fake with ``chats`` allowed, and a pool of ``workers`` chat turns' workers."""
    allowed = ", ".join(f"'{chat}'" for chat in chats)
    channels = f"channels:\n  workers: {workers}\n  telegram:\n    token: {fake.token}\n    apiBase: '{fake.url}'\n"
    write_config(home, stub, None, channels + f"    allowFrom: [{allowed}]\n")


def pool_of(supervisor: ChannelSupervisor) -> TurnPool:
    pool = supervisor.runner
    assert isinstance(pool, TurnPool)
    return pool


def chat_in_another_worker(chat: int, workers: int = 2) -> int:
    """A chat id whose session a pool of ``workers`` keeps in another worker than ``chat``'s."""
    mine = worker_index(f"channel:telegram:{chat}", workers)
    return next(n for n in range(chat + 1, chat + 100) if worker_index(f"channel:telegram:{n}", workers) != mine)


def sessions_of(pool: TurnPool, *chats: int) -> list[TurnWorker]:
    """The worker holding each chat's session."""
    return [pool.worker_for(f"channel:telegram:{chat}") for chat in chats]


def test_two_chats_run_in_different_workers_and_each_stays_in_order(isolated_home: Path) -> None:
    """Two chats whose sessions hash to different workers: each worker answers only its chat's turns, in another
    process, and each chat's requests carry its whole history in order (its runtime lives in one process: were its
    turns spread over both, a worker's runtime would miss the turns the other ran)."""
    with run_model_stub(lambda body: Reply(text="echo: " + question(body))) as stub, fake_telegram() as fake:
        other = chat_in_another_worker(OWNER)
        pool_config(isolated_home, stub, fake, [OWNER, other])
        with supervising() as supervisor:
            pool = pool_of(supervisor)
            assert len(pool.workers) == 2
            for n in range(4):
                for chat in (OWNER, other):
                    fake.say(chat, chat, f"chat {chat} message {n}")
            fake.wait_for(lambda: sum(t.startswith("echo") for c in (OWNER, other) for t in fake.texts(c)) >= 8, 120)
            for chat in (OWNER, other):
                answers = [t for t in fake.texts(chat) if t.startswith("echo")]
                assert answers == [f"echo: chat {chat} message {n}" for n in range(4)]
                asked = [
                    [m["content"] for m in r["body"]["messages"] if m["role"] == "user"]
                    for r in stub.requests
                    if question(r["body"]).startswith(f"chat {chat} ")
                ]
                assert asked == [[f"chat {chat} message {k}" for k in range(n + 1)] for n in range(4)]
            mine, theirs = sessions_of(pool, OWNER, other)
            assert mine is not theirs and (mine.answered, theirs.answered) == (4, 4)
            assert mine.process is not None and theirs.process is not None
            assert len({mine.process.pid, theirs.process.pid, os.getpid()}) == 3


def test_a_killed_worker_is_started_again_and_its_message_is_answered_with_an_error(isolated_home: Path) -> None:
    """The worker holding the owner's chat is killed mid-turn: that turn is answered with the error, the chat's next
    message is answered by the restarted worker, and the other worker (another chat) never notices."""
    release = threading.Event()

    def holding(body: dict[str, Any]) -> Reply:
        asked = question(body)
        if asked.startswith("hold"):
            release.wait(60)  # until the test has killed the worker that asked
        return Reply(text="echo: " + asked)

    with run_model_stub(holding) as stub, fake_telegram() as fake:
        other = chat_in_another_worker(OWNER)
        pool_config(isolated_home, stub, fake, [OWNER, other])
        with supervising() as supervisor:
            pool = pool_of(supervisor)
            worker, bystander = (
                pool.worker_for(f"channel:telegram:{OWNER}"),
                pool.worker_for(f"channel:telegram:{other}"),
            )
            fake.say(other, other, "before")
            fake.wait_for(lambda: "echo: before" in fake.texts(other), 60)
            assert bystander.process is not None
            untouched = bystander.process.pid
            fake.say(OWNER, OWNER, "hold this one")
            fake.say(OWNER, OWNER, "then this one")
            fake.wait_for(lambda: any(question(r["body"]) == "hold this one" for r in stub.requests))
            assert worker.process is not None
            killed = worker.process.pid
            os.kill(killed, signal.SIGKILL)
            fake.wait_for(lambda: "echo: then this one" in fake.texts(OWNER), 60)
            fake.say(other, other, "after")
            fake.wait_for(lambda: "echo: after" in fake.texts(other), 60)
            release.set()
            texts = [t for t in fake.texts(OWNER) if not t.startswith("Queued")]
            assert len(texts) == 2 and texts[1] == "echo: then this one"
            assert texts[0].startswith("The agent's worker process stopped while it worked on this message")
            assert "killed by signal 9" in texts[0]
            assert worker.restarts == 1 and worker.process is not None and worker.process.pid != killed
            assert bystander.restarts == 0 and bystander.process is not None and bystander.process.pid == untouched
            assert fake.texts(other) == ["echo: before", "echo: after"]
            mine = [question(r["body"]) for r in stub.requests if question(r["body"]) not in ("before", "after")]
            assert mine == ["hold this one", "then this one"]


def test_many_chats_through_the_worker_are_answered_once_each_in_order(isolated_home: Path) -> None:
    chats = [OWNER, 43, 44, 45, 46]

    def staggered(body: dict[str, Any]) -> Reply:
        asked = question(body)
        # a chat's first answer is the slowest: the worker answers the chats' turns out of order across chats
        return Reply(text="echo: " + asked, delay_s=0.4 if asked.endswith("message 0") else 0.0)

    with run_model_stub(staggered) as stub, fake_telegram() as fake:
        allowed = ", ".join(f"'{chat}'" for chat in chats)
        channels = f"channels:\n  telegram:\n    token: {fake.token}\n    apiBase: '{fake.url}'\n"
        write_config(isolated_home, stub, None, channels + f"    allowFrom: [{allowed}]\n")
        with supervising():
            for n in range(4):
                for chat in chats:
                    fake.say(chat, chat, f"chat {chat} message {n}")
            fake.wait_for(lambda: sum(t.startswith("echo") for c in chats for t in fake.texts(c)) >= 20, 120)
            for chat in chats:
                answers = [t for t in fake.texts(chat) if t.startswith("echo")]
                assert answers == [f"echo: chat {chat} message {n}" for n in range(4)]


def test_the_fake_provider_takes_twenty_chats_connecting_at_once() -> None:
    """The bench's rare lost answer: 20 chats' turns connect to the fake provider at once (each streamed answer
    closes its connection), and a listen backlog of socketserver's 5 dropped the SYNs beyond it — a second's wait,
    or with ``maxRetries: 0`` a turn failed with "cannot reach openai". Here the server accepts nothing while 40
    clients connect: each must still be connected (queued by the kernel), none left retrying its SYN."""
    server = StubServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    clients = [socket.socket() for _ in range(40)]
    try:
        for client in clients:
            client.setblocking(False)
            client.connect_ex(server.server_address)
        waiting = list(clients)
        deadline = time.monotonic() + 10  # loopback handshakes take microseconds; a dropped SYN is retried after 1 s
        while waiting and time.monotonic() < deadline:
            _, ready, _ = select.select([], waiting, [], max(0.0, deadline - time.monotonic()))
            waiting = [client for client in waiting if client not in ready]
        assert not waiting, f"{len(waiting)} of 40 connections not accepted by the kernel"
        assert all(client.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for client in clients)
    finally:
        for client in clients:
            client.close()
        server.server_close()


def test_the_pool_size_is_channels_workers(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    assert turn_workers({"channels": {"workers": 3, "telegram": {"token": "t"}}}, path) == 3
    assert turn_workers({"channels": {"telegram": {"token": "t"}}}, path) == default_workers()
    assert 1 <= default_workers() <= 4
    assert [c.name for c in load_channels({"channels": {"workers": 3, "telegram": {"token": "t"}}}, path)] == [
        "telegram"
    ]
    for wrong in (0, True, "2", 65):
        with pytest.raises(ConfigError, match="channels.workers: expected a whole number from 1 to 64"):
            turn_workers({"channels": {"workers": wrong}}, path)
