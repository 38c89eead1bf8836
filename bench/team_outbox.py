"""A laptop's offline queue and a team server's per-person token, measured against real processes.

1. The server is down: N turns go through the real Claude Code hooks (UserPromptSubmit, then Stop, each a fresh
   ``python -m memmy.hook`` process); the Stop hook's wall time is recorded (it writes the turn to the outbox).
2. The server starts; ``memmy-memory sync`` delivers the queue (wall time, turns/s), and the store is checked:
   every turn stored once, in capture order (exit 1 otherwise).
3. The authenticated health route (the same answer for both), called with the owner's token and with a person's
   token (``users add``), interleaved from warm keep-alive clients: what resolving a person's token on every
   request costs (p50/p95, the difference). A search would compare different reads (a person sees less).

Run:  python bench/team_outbox.py --turns 50 --requests 300
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from service_bench import BENCH_TOKEN, Daemon, bench_env


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run(home: Path, url: str, args: list[str], stdin: str = "") -> tuple[float, subprocess.CompletedProcess[str]]:
    """One ``python -m <args>`` under ``home`` pointed at ``url``; (seconds, the result)."""
    env = {**bench_env(home), "MEMMY_MEMORY_URL": url, "MEMMY_HOOK_TIMEOUT_MS": "10000"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *args], env=env, input=stdin, capture_output=True, text=True)
    return time.perf_counter() - started, done


def capture(laptop: Path, url: str, turns: int, label: str = "offline") -> list[float]:
    """N turns through the hooks (``label`` names them in the prompt); the Stop hooks' wall times."""
    workspace = laptop / "project"
    workspace.mkdir(parents=True, exist_ok=True)
    session = {"session_id": f"bench-laptop-{label}", "cwd": str(workspace)}
    stops = []
    for n in range(turns):
        prompt = {**session, "prompt": f"{label} question number {n:04d} about the deploy script"}
        run(laptop, url, ["memmy.hook", "claude_code", "UserPromptSubmit"], json.dumps(prompt))
        answer = {**session, "last_assistant_message": f"{label} answer number {n:04d}"}
        seconds, _ = run(laptop, url, ["memmy.hook", "claude_code", "Stop"], json.dumps(answer))
        stops.append(seconds)
    return stops


def stored_order(db: Path) -> list[int]:
    """The turn numbers of the stored traces, in storage order."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT memory_value FROM memories WHERE memory_layer = 'L1' ORDER BY rowid").fetchall()
    return [int(str(r[0]).split("offline question number ")[1][:4]) for r in rows]


def token_cost(url: str, person_token: str, requests: int) -> dict[str, list[float]]:
    """Authenticated health latency (ms) with the owner's and a person's token, interleaved."""
    clients = {
        "owner": httpx.Client(base_url=url, headers={"authorization": f"Bearer {BENCH_TOKEN}"}, timeout=60),
        "person": httpx.Client(base_url=url, headers={"authorization": f"Bearer {person_token}"}, timeout=60),
    }
    times: dict[str, list[float]] = {name: [] for name in clients}
    for i in range(40):  # warm both connections and the daemon's caches first
        clients[("owner", "person")[i % 2]].get("/api/v1/health").raise_for_status()
    for i in range(requests * 2):
        name = ("owner", "person")[i % 2]
        started = time.perf_counter()
        clients[name].get("/api/v1/health").raise_for_status()
        times[name].append((time.perf_counter() - started) * 1000)
    for client in clients.values():
        client.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--requests", type=int, default=300)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memmy-team-bench-") as tmp:
        root = Path(tmp)
        laptop = root / "laptop"
        server = Daemon(root / "server")
        stops = capture(laptop, server.url, options.turns)
        queued = len(list((laptop / ".memmy" / "outbox").glob("*.json")))
        print(f"server down: {options.turns} turns captured, {queued} queued; Stop hook p50 "
              f"{percentile(stops, 0.5) * 1000:.0f} ms, p95 {percentile(stops, 0.95) * 1000:.0f} ms")
        server.start()
        try:
            seconds, done = run(laptop, server.url, ["memmy", "--json", "sync"])
            report = json.loads(done.stdout or "{}")
            print(f"sync: delivered {report.get('delivered')} in {seconds:.2f} s "
                  f"({(report.get('delivered') or 0) / seconds:.0f} turns/s, process start included), "
                  f"left {report.get('left')}")
            order = stored_order(server.home / ".memmy" / "memory-service" / "memory.sqlite")
            ok = order == list(range(options.turns))
            print(f"stored: {len(order)} traces, each once and in capture order: {ok}")
            online = capture(laptop, server.url, 10, label="online")
            print(f"server up (same load, for comparison): Stop hook p50 {percentile(online, 0.5) * 1000:.0f} ms, "
                  f"p95 {percentile(online, 0.95) * 1000:.0f} ms (10 turns)")
            _, added = run(root / "server", server.url, ["memmy", "--json", "users", "add", "bench-person"])
            person = json.loads(added.stdout)["token"]
            times = token_cost(server.url, person, options.requests)
            for name, values in times.items():
                print(f"GET /api/v1/health with the {name}'s token: p50 {percentile(values, 0.5):.2f} ms, "
                      f"p95 {percentile(values, 0.95):.2f} ms ({len(values)} requests)")
            diff = percentile(times["person"], 0.5) - percentile(times["owner"], 0.5)
            print(f"a person's token costs {diff:+.2f} ms at p50 (token lookup on every request)")
        finally:
            server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    raise SystemExit(main())
