"""The channel layer under load: 20 chats x 10 messages at once across two Telegram bots (two fake Bot API
servers speaking the documented wire format, python-telegram-bot's client on the path), answered by the real
agent runtime through a fake model provider, memory off (this measures the channel layer, not recall).

Checks: every message answered exactly once, in order per chat. Figures, p50/p95: the whole path —
  receive -> provider request: from the moment getUpdates handed the message to the bot (or, for a queued
      message, the moment the chat's previous answer reached Telegram: the chat's turn could start) to the
      moment the provider received the model request;
  reply -> platform send: from the moment the provider answered (the fake answers as soon as it is asked, or after
      the provider's time of ``--provider-ms``, counted from when it was asked) to the moment the answer's
      sendMessage reached Telegram.
and what the channel layer alone adds inside that path (the router's own timings): from the chat's queue handing
the message over to the agent turn starting, and from the turn's answer to the platform having taken it (splitting,
Markdown conversion and the SDK's sendMessage). The whole path also holds the agent runtime and, for the messages
that arrive together, waiting for the CPU: 20 turns start at once. The fake platforms and the provider run in a
process of their own (``--in-process``: in the bench's process, as before, where their HTTP handling competes with
the channel layer for the same interpreter lock); timestamps on both sides are CLOCK_MONOTONIC, one clock for the
machine. The floor measured in the same run: a bare sendMessage round trip with httpx. The load average is printed
before and after: on a shared machine it decides most of the figures, so compare runs made together.
Target (issue 33): p95 <= 50 ms for both.

``--provider-ms`` sets how long the fake provider takes to answer, one set of runs each: ``0`` answers at once, so
the 20 chats' next messages come back as fast as the machine turns them around and the loop is bound by the CPU
(every process of the test, fakes included, shares the machine's cores): a stress figure, the whole path mostly
queueing for a core. ``300-1500`` draws each answer's time from that range (seeded by the message, so each run
draws the same): a provider answers in a second or so, and the chats' messages then arrive as they would in use.
The whole path never includes the provider's own time.

The chat turns run in a pool of worker processes (memmy/agent/channels/turn_worker.py, each chat's session in one
of them): the layer's figures include the two hops over a worker's pipe ("request -> worker read it", "worker
answered -> read here"), and ``--profile`` profiles the channels' process (receiving, routing, sending; from the
first message sent to the last answered), which no longer runs a turn, and each turns' worker (from its first turn
to its close: the runtime, the provider's SDK and httpx). A reply that says the turn failed counts as
an answer for the wait and is reported apart ("told their turn failed"). One run per pool size (``--workers``; by
default 1, the baseline, 2, and ``channels.workers``' default on this machine when it is more), each with fresh
fakes and a fresh HOME, then a table of the runs side by side with the 1-minute load average. The CPU each part
spent a message is printed per run (the channels' process, the workers together, the fakes). The fake provider
keeps its connections alive, as a provider's API does (with a connection closed after each streamed answer, each
turn paid a TCP connect on both sides).

Run:  python bench/channels.py [--chats 20] [--messages 10] [--workers 1 2] [--provider-ms 0 300-1500]
                              [--in-process] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import multiprocessing
import os
import pstats
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import zlib
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, write_agent_config  # noqa: E402
from tests.fake_telegram import fake_telegram  # noqa: E402

PROFILE_ENV = "MEMMY_TURN_WORKER_PROFILE"  # memmy.agent.channels.turn_worker.PROFILE_ENV (imported late, as memmy is)


@dataclass
class Bot:
    """One fake Bot API server, as the bench's side sees it: where it is, and (after the run) what it recorded."""

    url: str
    token: str
    sent: list[tuple[str, str, float]] = field(default_factory=list)  # (chat id, text, when) of sendMessage
    update_of: dict[str, int] = field(default_factory=dict)
    delivered_at: dict[int, float] = field(default_factory=dict)


def provider_delay(spec: str, question: str) -> float:
    """The fake provider's time to answer ``question``, in seconds: ``spec`` is ``MS`` or ``LOW-HIGH`` (uniform,
    drawn from a generator seeded by the question, so every run draws the same)."""
    low, _, high = spec.partition("-")
    if not high:
        return float(low) / 1000
    draw = random.Random(zlib.crc32(question.encode())).random()
    return (float(low) + draw * (float(high) - float(low))) / 1000


def platform_side(conn: Connection, chats: int, messages: int, provider_ms: str) -> None:
    """The fake platforms and the model stub (in a process of their own unless --in-process): say where they are,
    send every message on "go", hand back what they recorded on "collect"."""
    asked: dict[str, float] = {}
    answered: dict[str, float] = {}  # when the provider's answer was due: asked + its time to answer

    def brain(body: dict[str, Any]) -> Reply:
        question = last_user_text(body).strip()
        delay = provider_delay(provider_ms, question)
        if question not in asked:
            asked[question] = time.monotonic()
            answered[question] = asked[question] + delay
        return Reply(text=f"answer: {question}", delay_s=delay)

    with ExitStack() as stack:
        stub = stack.enter_context(run_model_stub(brain, keep_alive=True))  # as a provider's API keeps them
        fakes = [stack.enter_context(fake_telegram(f"10{n}:bench-token-{n}")) for n in range(2)]
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)  # a long poll cut at the end is no error here
        conn.send((stub.openai_url, [(f.url, f.token) for f in fakes]))
        assert conn.recv() == "go"
        cpu_started = time.process_time()
        for chat in range(chats):
            fake = fakes[chat % len(fakes)]
            for n in range(messages):
                fake.say(1000 + chat, 1000 + chat, f"chat {chat} message {n}")
        while conn.recv() == "count":
            # every reply counts, a failed turn's too ("[failed] ..."): the bench stops when each message has one
            conn.send(sum(len([s for s in f.sent if not s.text.startswith("Queued")]) for f in fakes))
        records = [
            ([(s.chat_id, s.text, s.at) for s in f.sent if s.method == "sendMessage"], f.update_of, f.delivered_at)
            for f in fakes
        ]
        conn.send((records, asked, answered, time.process_time() - cpu_started))


def process_cpu(pool: Any) -> float:
    """CPU seconds (user + system) the turns' worker processes have used (Linux: /proc)."""
    total = 0.0
    for worker in pool.workers:
        fields = Path(f"/proc/{worker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def run(
    args: argparse.Namespace,
    bots: list[Bot],
    conn: Connection,
    home: Path,
    workers: int,
    profiler: cProfile.Profile | None = None,
) -> Row:
    """One run: the messages sent, every answer waited for; ``profiler`` profiles that window only."""
    from memmy.agent.channels.base import freeze_startup_heap
    from memmy.agent.channels.router import ChatRouter
    from memmy.agent.channels.settings import ChannelSettings
    from memmy.agent.channels.telegram import TelegramChannel
    from memmy.agent.channels.turn_worker import TurnPool
    from memmy.agent.config import load_agent_config

    config = load_agent_config()
    turns = TurnPool(config, size=workers)
    users = tuple(str(1000 + chat) for chat in range(args.chats))
    tasks = []
    routers = []
    for index, bot in enumerate(bots):
        settings = ChannelSettings("telegram", True, {"token": bot.token, "apiBase": bot.url}, users)
        bot_home = home / f"bot{index}"
        adapter = TelegramChannel(settings, bot_home, poll_timeout_s=5)
        router = ChatRouter(settings, adapter, turns, bot_home)
        routers.append(router)
        tasks.append(asyncio.create_task(adapter.run(router.deliver)))
    await turns.start()  # as the supervisor does when it starts the channels, and then
    freeze_startup_heap()
    await asyncio.sleep(1.0)
    started, cpu_started = time.monotonic(), time.process_time()
    worker_started = process_cpu(turns)
    if profiler is not None:
        profiler.enable()
    conn.send("go")
    expected = args.chats * args.messages
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        conn.send("count")
        if await asyncio.to_thread(conn.recv) >= expected:
            break
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    if profiler is not None:
        profiler.disable()
    cpu = time.process_time() - cpu_started
    worker_cpu = process_cpu(turns) - worker_started
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for router in routers:
        await router.close()
    await turns.close()
    floor = await asyncio.to_thread(bare_round_trip, bots[0])  # before "collect": the fakes stop after it
    conn.send("collect")
    records, asked, answered, platform_cpu = await asyncio.to_thread(conn.recv)
    for bot, (sent, update_of, delivered_at) in zip(bots, records, strict=True):
        bot.sent, bot.update_of, bot.delivered_at = sent, update_of, delivered_at
    per = 1000 / max(1, args.chats * args.messages)
    print(
        f"CPU a message: the channels' process {cpu * per:.1f} ms, the turns' {workers} worker(s) "
        f"{worker_cpu * per:.1f} ms, the fakes (platforms, provider) {platform_cpu * per:.1f} ms"
    )
    print(f"turns answered by each worker: {' '.join(str(worker.answered) for worker in turns.workers)}")
    layer = [t for router in routers for t in router.timings] + list(turns.timings)
    return report(args, bots, asked, answered, elapsed, layer, floor, workers)


def report(
    args: argparse.Namespace,
    fakes: list[Bot],
    asked: dict[str, float],
    answer_due: dict[str, float],
    elapsed: float,
    layer: list[tuple[str, float]],
    floor: list[float],
    workers: int,
) -> Row:
    inbound: list[float] = []
    later: list[float] = []  # receive -> provider request of each chat's messages after its first (runtime open)
    outbound: list[float] = []
    problems: list[str] = []
    for chat in range(args.chats):
        fake = fakes[chat % len(fakes)]
        answers = [s for s in fake.sent if s[0] == str(1000 + chat) and s[1].startswith("answer")]
        texts = [s[1] for s in answers]
        wanted = [f"answer: chat {chat} message {n}" for n in range(args.messages)]
        if texts != wanted:
            missing = [w.rsplit(" ", 1)[1] for w in wanted if w not in texts]
            order = [t.rsplit(" ", 1)[1] for t in texts]
            mine = [s[1] for s in fake.sent if s[0] == str(1000 + chat)]
            said = [text[:60] for text in mine if not text.startswith(("answer", "Queued"))]  # e.g. a failed turn
            problems.append(f"chat {chat}: {len(texts)} answers (messages {' '.join(order)}; missing {missing}) {said}")
            continue
        previous_sent = 0.0
        for n, (_, _, at) in enumerate(answers):
            question = f"chat {chat} message {n}"
            update_id = fake.update_of[question]
            ready = max(fake.delivered_at[update_id], previous_sent)
            inbound.append((asked[question] - ready) * 1000)
            if n:
                later.append(inbound[-1])
            outbound.append((at - answer_due[question]) * 1000)
            previous_sent = at
    load = os.getloadavg()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in load)}  (cores: {os.cpu_count()})")
    total = args.chats * args.messages
    answered = sum(len([s for s in f.sent if s[1].startswith("answer")]) for f in fakes)
    failed = sum(len([s for s in f.sent if s[0] != "1" and not s[1].startswith(("answer", "Queued"))]) for f in fakes)
    print(
        f"{args.chats} chats x {args.messages} messages over {len(fakes)} bots: {answered}/{total} answered "
        f"({failed} told their turn failed, {max(0, total - answered - failed)} never answered) in {elapsed:.1f} s; "
        f"every chat answered once, in order: {'yes' if not problems else 'NO'}"
    )
    for line in problems[:10]:
        print("  " + line)
    if inbound:
        for label, values in (
            ("receive -> provider request", inbound),
            ("  the same, after a chat's 1st", later),
            ("reply -> platform send", outbound),
        ):
            if values:
                print(f"{label:<30} p50 {percentile(values, 50):6.1f} ms   p95 {percentile(values, 95):6.1f} ms")
    for stage, label in (
        ("pick_to_turn", "queue hand-over -> turn start"),
        ("answer_to_sent", "answer -> platform took it"),
        ("to_worker", "request -> worker read it"),
        ("from_worker", "worker answered -> read here"),
        ("in_worker", "(the turn in the worker, provider's answer included: read it -> answered)"),
    ):
        values = [seconds * 1000 for name, seconds in layer if name == stage]
        if values:
            p50, p95 = percentile(values, 50), percentile(values, 95)
            print(f"  the layer alone: {label:<30} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms")
    print(
        f"floor: bare sendMessage round trip p50 {statistics.median(floor):6.1f} ms   "
        f"p95 {percentile(floor, 95):6.1f} ms   (target for the layer: p95 <= 50 ms)"
    )
    hops = {
        stage: percentile([seconds * 1000 for name, seconds in layer if name == stage] or [0.0], 95)
        for stage in ("pick_to_turn", "to_worker", "from_worker", "answer_to_sent")
    }
    return Row(args.provider, workers, load[0], not problems and answered == total, inbound, outbound, hops)


@dataclass
class Row:
    """One run's summary line: the whole path's figures beside the layer's hops and the load average."""

    provider: str
    workers: int
    load: float
    complete: bool
    inbound: list[float]
    outbound: list[float]
    hops: dict[str, float]

    def line(self) -> str:
        """The row of the summary table."""

        def pair(values: list[float]) -> str:
            return f"{percentile(values or [0.0], 50):5.1f} / {percentile(values or [0.0], 95):5.1f}"

        stages = ("pick_to_turn", "to_worker", "from_worker", "answer_to_sent")
        hops = " ".join(f"{self.hops[stage]:5.1f}" for stage in stages)
        done = "yes" if self.complete else "NO"
        paths = f"{pair(self.inbound)} | {pair(self.outbound)}"
        return f"{self.provider:>9} | {self.workers:>4} | {paths} | {hops} | {self.load:4.2f} | {done}"


SUMMARY = (
    "provider  | pool | receive -> provider p50 / p95 | reply -> send p50 / p95 "
    "| layer p95: hand-over, to worker, back, sent | load | all once, in order"
)


def bare_round_trip(fake: Bot, runs: int = 50) -> list[float]:
    """sendMessage straight to the fake server with httpx: what any client pays for the platform call itself."""
    times = []
    with httpx.Client(base_url=f"{fake.url}/bot{fake.token}") as client:
        for _ in range(runs):
            start = time.monotonic()
            client.post("/sendMessage", data={"chat_id": "1", "text": "floor"}).raise_for_status()  # chat 1: no user's
            times.append((time.monotonic() - start) * 1000)
    return times


PARTS = (  # (label, path fragment) in the order a frame is attributed: the first that matches
    ("channel layer (memmy/agent/channels)", "memmy/agent/channels/"),
    ("agent runtime (memmy/agent, sessions)", "memmy/agent/"),
    ("python-telegram-bot", "/telegram/"),
    ("openai SDK, pydantic", "/openai/"),
    ("openai SDK, pydantic", "/pydantic"),
    ("httpx, httpcore, anyio", "/httpx"),  # httpx and httpx2
    ("httpx, httpcore, anyio", "/httpcore"),
    ("httpx, httpcore, anyio", "/anyio/"),
    ("asyncio event loop", "/asyncio/"),
)


def shares(title: str, stats: pstats.Stats, messages: int) -> None:
    """One thread's CPU (own time of each function, waiting in select excluded) by part."""
    totals: dict[str, float] = {}
    for (path, _, name), row in stats.stats.items():  # type: ignore[attr-defined]
        own = float(row[2])
        if "poll" in name and "epoll" in name or name == "<method 'acquire' of '_thread.lock' objects>":
            continue  # waiting, not working
        label = next((label for label, fragment in PARTS if fragment in path), "other (json, ssl, files, builtins)")
        totals[label] = totals.get(label, 0.0) + own
    other = sorted(
        (
            (float(row[2]), name)
            for (path, _, name), row in stats.stats.items()  # type: ignore[attr-defined]
            if not any(fragment in path for _, fragment in PARTS) and "epoll" not in name and "_thread.lock" not in name
        ),
        reverse=True,
    )
    whole = sum(totals.values()) or 1.0
    print(f"where {title} spends its CPU (cProfile, own time):")
    for label, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        per = seconds * 1000 / messages
        print(f"  {label:<40} {seconds:6.2f} s  {100 * seconds / whole:4.0f} %  {per:5.2f} ms a message")
    print("  the most of other: " + ", ".join(f"{name} {seconds:.2f} s" for seconds, name in other[:6]))


def measure(args: argparse.Namespace, workers: int) -> Row:
    """One run with a pool of ``workers``: fresh fakes, a fresh HOME (each chat's first message opens its runtime)."""
    print(
        f"\n== provider answers in {args.provider} ms, pool of {workers} turns' worker(s); "
        f"load average before: {loadavg()}  (cores: {os.cpu_count()})"
    )
    ours, theirs = multiprocessing.Pipe()
    side_args = (theirs, args.chats, args.messages, args.provider)
    if args.in_process:
        side: Any = threading.Thread(target=platform_side, args=side_args, daemon=True)
    else:
        side = multiprocessing.get_context("fork").Process(target=platform_side, args=side_args)
    side.start()
    stub_url, servers = ours.recv()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
        write_agent_config(home, ModelStub(openai_url=stub_url), memory=False)
        bots = [Bot(url, token) for url, token in servers]
        channels = cProfile.Profile() if args.profile else None
        if args.profile:  # each worker profiles itself from its first turn to its close
            os.environ[PROFILE_ENV] = str(home / "worker.pstats")
        row = asyncio.run(run(args, bots, ours, home, workers, channels))
        os.environ.pop(PROFILE_ENV, None)
        if channels is not None:
            stats = pstats.Stats(channels)
            shares("the channels' loop (receiving, routing, sending)", stats, args.chats * args.messages)
            for path in sorted(home.glob("worker.pstats.*")):
                worker = pstats.Stats(str(path))
                shares(f"a turns' worker (pid {path.suffix[1:]}, its turns)", worker, args.chats * args.messages)
    side.join(30)
    return row


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    from memmy.agent.channels.settings import default_workers

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=None,
        help=f"Pool sizes, one run each (default: 1, 2 and channels.workers' default here, {default_workers()}).",
    )
    parser.add_argument(
        "--provider-ms",
        nargs="+",
        default=["0", "300-1500"],
        help="The fake provider's time to answer, one set of runs each: MS, or LOW-HIGH drawn per message "
        "(default: 0, the CPU-bound stress loop, and 300-1500, a provider's answer time).",
    )
    parser.add_argument("--in-process", action="store_true", help="Run the fakes in the bench's process.")
    parser.add_argument(
        "--profile", action="store_true", help="Where the channels' process and the turns' workers spend their CPU."
    )
    args = parser.parse_args()
    sizes = args.workers or sorted({1, 2, default_workers()})
    rows = []
    for spec in args.provider_ms:
        if not re.fullmatch(r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?", spec):
            parser.error(f"--provider-ms {spec!r}: give milliseconds, e.g. 0 or 300-1500")
        args.provider = spec
        rows += [measure(args, size) for size in sizes]
    print(f"\n{args.chats} chats x {args.messages} messages; whole path and layer in ms; load = 1-minute average")
    print(SUMMARY)
    for row in rows:
        print(row.line())


if __name__ == "__main__":
    main()
