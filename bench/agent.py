"""What memory adds to an agent turn: the same turn with memory on (turn start recall + turn complete capture
against a live daemon) and off, on the local fake provider (an OpenAI-compatible stub server in-process).
The turn is timed until its answer is complete; the capture runs after it (off the critical path) and is awaited
before the next turn starts, so it never overlaps a timed turn.

A daemon is loaded with N synthetic memories (real embeddings), then R prompts are run through the real agent
loop twice each, memory on and off, interleaved so both see the same machine load. Each turn has one fresh
session (the prompt only, no history). Target (issue 18): p50 added <= 25 ms.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpus import make_queries, unique_memories  # noqa: E402
from service_bench import Daemon, bench_env  # noqa: E402
from tests.agent_stubs import run_model_stub  # noqa: E402

from memmy.agent.config import load_agent_config  # noqa: E402
from memmy.agent.loop import Agent  # noqa: E402
from memmy.agent.memory import MemoryBridge, resolve_settings  # noqa: E402
from memmy.agent.sessions import Session, SessionStore  # noqa: E402
from memmy.agent.tools import ToolBox  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def run_turns(home: Path, queries: list[str]) -> tuple[list[float], list[float], int]:
    """Time each query with memory on and off (alternating order); return (on_ms, off_ms, turns with memory)."""
    config = load_agent_config()
    store = SessionStore(home / "bench-sessions")
    bridge = MemoryBridge(resolve_settings())
    on: list[float] = []
    off: list[float] = []
    injected = 0
    try:
        for number, query in enumerate(queries):
            order = (True, False) if number % 2 == 0 else (False, True)
            for memory_on in order:
                session = Session(name=f"bench-{number}-{memory_on}")
                tools = ToolBox(config.tools, config.workspace, memory=bridge if memory_on else None)
                agent = Agent(config, session, store, tools, bridge if memory_on else None)
                began = time.perf_counter()
                result = await agent.run_turn(query)
                elapsed = (time.perf_counter() - began) * 1000  # the answer is complete here
                await agent.flush()  # capture (off the critical path) finishes before the next turn starts
                assert result.status == "succeeded", result.error
                (on if memory_on else off).append(elapsed)
                if memory_on:
                    assert bridge.error is None, bridge.error
                    injected += bool(result.recall and result.recall.markdown)
    finally:
        await bridge.aclose()
    return on, off, injected


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
            asyncio.run(run_turns(home, queries[:4]))  # warm-up: connections, first recall
            on, off, injected = asyncio.run(run_turns(home, queries[4:]))
    finally:
        daemon.stop()
    added = [a - b for a, b in zip(on, off, strict=True)]
    print(f"agent turn on the local fake provider, {len(on)} prompts, {args.n} memories in the daemon:")
    print(f"  memory off (baseline): p50 {percentile(off, 0.5):6.1f} ms   p95 {percentile(off, 0.95):6.1f} ms")
    print(f"  memory on:             p50 {percentile(on, 0.5):6.1f} ms   p95 {percentile(on, 0.95):6.1f} ms")
    print(
        f"  added by memory:       p50 {percentile(on, 0.5) - percentile(off, 0.5):6.1f} ms "
        f"(paired p50 {statistics.median(added):.1f} ms, p95 {percentile(added, 0.95):.1f} ms)"
    )
    print(f"  turns with injected memory: {injected}/{len(on)}")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (cpus: {os.cpu_count()})")
    verdict = "met" if percentile(on, 0.5) - percentile(off, 0.5) <= 25 else "NOT met"
    print(f"  target p50 added <= 25 ms: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
