"""What memory adds to an agent turn: the same turn with memory on (turn start recall + turn complete capture
against a live daemon) and off, on the local fake provider (an OpenAI-compatible stub server in-process).
The turn is timed until its answer is complete; the capture runs after it (off the critical path, in the capture
thread) and is flushed before the next turn starts, and the daemon's embedding of it is let finish, so neither
overlaps a timed turn.

A daemon is loaded with N synthetic memories (real embeddings), then R prompts are run through the real agent
loop twice each, memory on and off, interleaved so both see the same machine load. Each turn has one fresh
session (the prompt only, no history) whose memory session is opened the way the runtime opens it, before the
first turn (``Agent.prepare``, which ``open_runtime`` runs while the MCP servers start); that open's round trip
is printed on its own. Target (issue 18): p50 added <= 25 ms.

Run:  python bench/agent.py --n 2000 --runs 60
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpus import make_queries, unique_memories  # noqa: E402
from service_bench import Daemon, bench_env  # noqa: E402
from tests.agent_stubs import run_model_stub  # noqa: E402

from memmy.agent.config import load_agent_config  # noqa: E402
from memmy.agent.daemon_link import DaemonLink  # noqa: E402
from memmy.agent.loop import Agent  # noqa: E402
from memmy.agent.memory import MemoryBridge, resolve_settings  # noqa: E402
from memmy.agent.sessions import Session, SessionStore  # noqa: E402
from memmy.agent.tools import ToolBox  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class Figures:
    """Per-turn wall times and CPU times (ms) with memory on and off."""

    on: list[float] = field(default_factory=list)
    off: list[float] = field(default_factory=list)
    cpu_on: list[float] = field(default_factory=list)  # this process + the daemon, turn and its capture
    cpu_off: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)  # turns/start round trip seen by the agent
    opened: list[float] = field(default_factory=list)  # sessions/open round trip (before the turn, not in it)
    injected: int = 0


def cpu_ms(daemon: psutil.Process) -> float:
    """CPU seconds (user + system) of this process and the daemon so far, in ms."""
    mine = time.process_time()
    theirs = daemon.cpu_times()
    return (mine + theirs.user + theirs.system) * 1000


async def client_round_trips(url: str, count: int = 100) -> tuple[list[float], list[float]]:
    """The same cheap daemon request (anonymous ``GET /api/v1/health``) through ``httpx.AsyncClient`` and through
    the agent's kept-alive ``DaemonLink``, interleaved: what the HTTP client itself costs on the turn path."""
    via_httpx: list[float] = []
    via_link: list[float] = []
    link = DaemonLink(url, {})
    async with httpx.AsyncClient(base_url=url) as client:
        for number in range(count + 5):
            began = time.perf_counter()
            (await client.get("/api/v1/health")).raise_for_status()
            middle = time.perf_counter()
            status, _ = await link.request("GET", "/api/v1/health")
            assert status == 200
            if number >= 5:  # the first few open connections and warm up
                via_httpx.append((middle - began) * 1000)
                via_link.append((time.perf_counter() - middle) * 1000)
    await link.aclose()
    return via_httpx, via_link


async def settle(bridge: MemoryBridge, limit_s: float = 5.0) -> None:
    """Wait until the daemon's embedding queue is empty (the captured turn is embedded in the background)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        health = await bridge.health()
        if not health or not (health.get("embeddingQueue") or {}).get("pending"):
            return
        await asyncio.sleep(0.02)


async def run_turns(home: Path, queries: list[str], daemon_pid: int) -> Figures:
    """Time each query with memory on and off (alternating order)."""
    figures = Figures()
    daemon = psutil.Process(daemon_pid)
    config = load_agent_config()
    store = SessionStore(home / "bench-sessions")
    bridge = MemoryBridge(resolve_settings())
    try:
        for number, query in enumerate(queries):
            order = (True, False) if number % 2 == 0 else (False, True)
            for memory_on in order:
                session = Session(name=f"bench-{number}-{memory_on}")
                tools = ToolBox(config.tools, config.workspace, memory=bridge if memory_on else None)
                agent = Agent(config, session, store, tools, bridge if memory_on else None)
                opening = time.perf_counter()
                await agent.prepare()  # as open_runtime does, before the user's first message
                if memory_on:
                    figures.opened.append((time.perf_counter() - opening) * 1000)
                cpu_before = cpu_ms(daemon)
                began = time.perf_counter()
                result = await agent.run_turn(query)
                elapsed = (time.perf_counter() - began) * 1000  # the answer is complete here
                await agent.flush()  # capture (off the critical path) finishes before the next turn starts
                await settle(bridge)  # and the daemon has embedded it
                cpu = cpu_ms(daemon) - cpu_before
                assert result.status == "succeeded", result.error
                (figures.on if memory_on else figures.off).append(elapsed)
                (figures.cpu_on if memory_on else figures.cpu_off).append(cpu)
                if memory_on:
                    assert bridge.error is None, bridge.error
                    assert result.recall is not None
                    figures.recall.append(result.recall.elapsed_ms)
                    figures.injected += bool(result.recall.markdown)
    finally:
        await bridge.aclose()
    return figures


def main(argv: list[str] | None = None) -> int:
    """Load the daemon, run the turns, print percentiles next to the memory-off baseline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="memories in the daemon")
    parser.add_argument("--runs", type=int, default=60, help="prompts (each run with memory on and off)")
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="memmy-agent-bench-"))
    daemon = Daemon(home)
    daemon.start()
    try:
        with daemon.client() as client:
            for body in itertools.islice(unique_memories(7), args.n):
                try:
                    client.post("/api/v1/memory/add", json=body).raise_for_status()
                except httpx.RemoteProtocolError:  # a keep-alive connection closed under us: send it again
                    client.post("/api/v1/memory/add", json=body).raise_for_status()
            daemon.drain(client)
        os.environ.update(bench_env(home))
        os.environ["MEMMY_MEMORY_URL"] = daemon.url
        with run_model_stub() as stub:
            (home / ".memmy" / "workspace").mkdir(parents=True, exist_ok=True)
            (home / ".memmy" / "config.yaml").write_text(
                "agents:\n  defaults: {provider: openai, model: stub-model, maxRetries: 0}\n"
                f"providers:\n  openai: {{apiBase: '{stub.openai_url}', apiKey: sk-bench}}\n",
                encoding="utf-8",
            )
            queries = [q for _, q in make_queries(args.runs + 4, 11)]
            asyncio.run(run_turns(home, queries[:4], daemon.pid))  # warm-up: connections, first recall
            figures = asyncio.run(run_turns(home, queries[4:], daemon.pid))
            via_httpx, via_link = asyncio.run(client_round_trips(daemon.url))
    finally:
        daemon.stop()
    on, off, injected = figures.on, figures.off, figures.injected
    added = [a - b for a, b in zip(on, off, strict=True)]
    cpu_added = [a - b for a, b in zip(figures.cpu_on, figures.cpu_off, strict=True)]
    print(f"agent turn on the local fake provider, {len(on)} prompts, {args.n} memories in the daemon:")
    print(f"  memory off (baseline): p50 {percentile(off, 0.5):6.1f} ms   p95 {percentile(off, 0.95):6.1f} ms")
    print(f"  memory on:             p50 {percentile(on, 0.5):6.1f} ms   p95 {percentile(on, 0.95):6.1f} ms")
    print(
        f"  added by memory:       p50 {percentile(on, 0.5) - percentile(off, 0.5):6.1f} ms "
        f"(paired p50 {statistics.median(added):.1f} ms, p95 {percentile(added, 0.95):.1f} ms)"
    )
    print(f"  turns/start round trip seen by the agent: p50 {percentile(figures.recall, 0.5):.1f} ms")
    print(
        f"  sessions/open round trip (once per session, before its first turn): p50 "
        f"{percentile(figures.opened, 0.5):.1f} ms"
    )
    print(
        f"  CPU per turn (agent + daemon, incl. capture and its embedding): off p50 "
        f"{percentile(figures.cpu_off, 0.5):.1f} ms, on p50 {percentile(figures.cpu_on, 0.5):.1f} ms, "
        f"added on average {statistics.fmean(cpu_added):.1f} ms (background embedding may land in the next turn)"
    )
    print(
        f"  HTTP client alone (anonymous GET /api/v1/health, interleaved): httpx.AsyncClient p50 "
        f"{percentile(via_httpx, 0.5):.1f} ms, kept-alive h11 link p50 {percentile(via_link, 0.5):.1f} ms"
    )
    print(f"  turns with injected memory: {injected}/{len(on)}")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (cpus: {os.cpu_count()})")
    verdict = "met" if percentile(on, 0.5) - percentile(off, 0.5) <= 25 else "NOT met"
    print(f"  target p50 added <= 25 ms: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
