"""The channel layer under load: 20 chats x 10 messages at once across two Telegram bots (two fake Bot API
servers speaking the documented wire format, python-telegram-bot's client on the path), answered by the real
agent runtime through a fake model provider, memory off (this measures the channel layer, not recall).

Checks: every message answered exactly once, in order per chat. Figures, p50/p95: the whole path —
  receive -> provider request: from the moment getUpdates handed the message to the bot (or, for a queued
      message, the moment the chat's previous answer reached Telegram: the chat's turn could start) to the
      moment the provider received the model request;
  reply -> platform send: from the moment the provider was asked (the fake answers at once, in a few ms) to the
      moment the answer's sendMessage reached Telegram.
and what the channel layer alone adds inside that path (the router's own timings): from the chat's queue handing
the message over to the agent turn starting, and from the turn's answer to the platform having taken it (splitting,
Markdown conversion and the SDK's sendMessage). The whole path also holds the agent runtime and, for the messages
that arrive together, waiting for the CPU: 20 turns start at once on 2 cores in one process (the fake platforms and
the provider run in it too). The floor measured in the same run: a bare sendMessage round trip with httpx.
Target (issue 33): p95 <= 50 ms for both.

Run:  python bench/channels.py [--chats 20] [--messages 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agent_stubs import Reply, last_user_text, run_model_stub, write_agent_config  # noqa: E402
from tests.fake_telegram import FakeTelegram, fake_telegram  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def run(args: argparse.Namespace, fakes: list[FakeTelegram], asked: dict[str, float], home: Path) -> None:
    from memmy.agent.channels.agent_turns import AgentTurns
    from memmy.agent.channels.router import ChatRouter
    from memmy.agent.channels.settings import ChannelSettings
    from memmy.agent.channels.telegram import TelegramChannel
    from memmy.agent.config import load_agent_config

    config = load_agent_config()
    turns = AgentTurns(config)
    users = tuple(str(1000 + chat) for chat in range(args.chats))
    tasks = []
    routers = []
    for index, fake in enumerate(fakes):
        settings = ChannelSettings("telegram", True, {"token": fake.token, "apiBase": fake.url}, users)
        bot_home = home / f"bot{index}"
        adapter = TelegramChannel(settings, bot_home, poll_timeout_s=5)
        router = ChatRouter(settings, adapter, turns, bot_home)
        routers.append(router)
        tasks.append(asyncio.create_task(adapter.run(router.deliver)))
    await asyncio.to_thread(turns.warm)  # as the supervisor does when it starts the channels
    await asyncio.sleep(1.0)
    started = time.monotonic()
    for chat in range(args.chats):
        fake = fakes[chat % len(fakes)]
        for n in range(args.messages):
            fake.say(1000 + chat, 1000 + chat, f"chat {chat} message {n}")
    expected = args.chats * args.messages
    deadline = time.monotonic() + args.timeout
    while sum(len([s for s in f.sent if s.text.startswith("answer")]) for f in fakes) < expected:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    for task in tasks:
        task.cancel()
    for router in routers:
        await router.close()
    await turns.close()
    layer = [t for router in routers for t in router.timings]
    report(args, fakes, asked, elapsed, layer)


def report(
    args: argparse.Namespace,
    fakes: list[FakeTelegram],
    asked: dict[str, float],
    elapsed: float,
    layer: list[tuple[str, float]],
) -> None:
    inbound: list[float] = []
    outbound: list[float] = []
    problems: list[str] = []
    for chat in range(args.chats):
        fake = fakes[chat % len(fakes)]
        answers = [s for s in fake.sent if s.chat_id == str(1000 + chat) and s.text.startswith("answer")]
        texts = [s.text for s in answers]
        wanted = [f"answer: chat {chat} message {n}" for n in range(args.messages)]
        if texts != wanted:
            problems.append(f"chat {chat}: {len(texts)} answers, in order: {texts == wanted[: len(texts)]}")
            continue
        previous_sent = 0.0
        for n, sent in enumerate(answers):
            question = f"chat {chat} message {n}"
            update_id = fake.update_of[question]
            ready = max(fake.delivered_at[update_id], previous_sent)
            inbound.append((asked[question] - ready) * 1000)
            outbound.append((sent.at - asked[question]) * 1000)
            previous_sent = sent.at
    floor = bare_round_trip(fakes[0])
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (cores: {os.cpu_count()})")
    total = args.chats * args.messages
    answered = sum(len([s for s in f.sent if s.text.startswith("answer")]) for f in fakes)
    print(
        f"{args.chats} chats x {args.messages} messages over {len(fakes)} bots: {answered}/{total} answered "
        f"in {elapsed:.1f} s; every chat answered once, in order: {'yes' if not problems else 'NO'}"
    )
    for line in problems[:10]:
        print("  " + line)
    if inbound:
        for label, values in (("receive -> provider request", inbound), ("reply -> platform send", outbound)):
            print(f"{label:<28} p50 {percentile(values, 50):6.1f} ms   p95 {percentile(values, 95):6.1f} ms")
    for stage, label in (
        ("pick_to_turn", "queue hand-over -> turn start"),
        ("answer_to_sent", "answer -> platform took it"),
    ):
        values = [seconds * 1000 for name, seconds in layer if name == stage]
        if values:
            p50, p95 = percentile(values, 50), percentile(values, 95)
            print(f"  the layer alone: {label:<30} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms")
    print(
        f"floor: bare sendMessage round trip p50 {statistics.median(floor):6.1f} ms   "
        f"p95 {percentile(floor, 95):6.1f} ms   (target for the layer: p95 <= 50 ms)"
    )


def bare_round_trip(fake: FakeTelegram, runs: int = 50) -> list[float]:
    """sendMessage straight to the fake server with httpx: what any client pays for the platform call itself."""
    times = []
    with httpx.Client(base_url=f"{fake.url}/bot{fake.token}") as client:
        for _ in range(runs):
            start = time.monotonic()
            client.post("/sendMessage", data={"chat_id": "1", "text": "floor"}).raise_for_status()
            times.append((time.monotonic() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    asked: dict[str, float] = {}

    def brain(body: dict[str, Any]) -> Reply:
        question = last_user_text(body).strip()
        asked.setdefault(question, time.monotonic())
        return Reply(text=f"answer: {question}")

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        home = Path(tmp)
        os.environ.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
        stub = stack.enter_context(run_model_stub(brain))
        write_agent_config(home, stub, memory=False)
        fakes = [stack.enter_context(fake_telegram(f"10{n}:bench-token-{n}")) for n in range(2)]
        asyncio.run(run(args, fakes, asked, home))


if __name__ == "__main__":
    main()
