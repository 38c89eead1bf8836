"""Evolution throughput: turns/s through ``turn.complete`` and episodes/s through the whole offline pipeline.

    python bench/evolution.py                      # 200 episodes over 20 task families, no LLM
    python bench/evolution.py --episodes 1000 --families 50
    python bench/evolution.py --data tasks.txt     # one task sentence per line instead of the built-in families
    python bench/evolution.py --baseline-src /tmp/main/src   # this tree and another checkout's src/, back to back
    python bench/evolution.py --model multilingual-e5-small  # another local embedding model (memmy[multilingual])

With ``--baseline-src`` the bench runs twice in fresh processes under the same load, first the other tree (e.g.
``git archive main src | tar -x -C /tmp/main``), then this one, and prints turns/s, episodes/s and RSS of both
with the change in per cent.

Each episode is one session with two turns, the shape the evolution loop learns from: the agent first fails
(a tool error with the family's error), then the follow-up fixes it. The session is closed, which closes the
episode. Everything runs in-process on a fresh store in a temporary HOME with the local MiniLM and no LLM
(``reward.feedbackWindowSec`` is 0 so the reward does not wait for feedback).

Printed:

- capture: ``turn.complete`` latency p50/p95/p99 and turns/s (sequential, one caller), plus ``turn.start``;
- pipeline: the time to drain every embedding and evolution job (reflection → reward → L2 association and
  induction → failure avoidance → decision repair → L3 → Skill), and episodes/s over capture + drain;
- what was learned: policies (active success / failure_avoidance), world models, skills, jobs by status;
- RSS of the process at the end.

Other processes on the machine (the load average is printed) make every figure pessimistic.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memmy.commands.evolution import RunWorker
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn

FAMILIES = [
    ("python", "run the unit tests of the {x} package", "ModuleNotFoundError: No module named '{x}_core'"),
    ("node", "build the {x} web frontend with npm", "npm ERR! code ERESOLVE unable to resolve dependency tree"),
    ("docker", "start the {x} stack with docker compose", "Error response from daemon: port is already allocated"),
    ("git", "rebase the {x} feature branch onto main", "CONFLICT (content): Merge conflict in src/{x}.py"),
    ("db", "migrate the {x} database schema", 'psycopg2.OperationalError: FATAL: database "{x}" does not exist'),
    ("rust", "compile the {x} crate in release mode", "error[E0432]: unresolved import `{x}::config`"),
    ("http", "call the {x} API from the sync job", "HTTP 401 Unauthorized: invalid API token for {x}"),
    ("中文", "运行{x}模块的测试并修复失败", "ImportError: 无法导入模块 {x}_utils"),
]
NAMES = ["billing", "search", "auth", "catalog", "orders", "reports", "gateway", "profile", "ledger", "notify"]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def tasks_from(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(task text, error text) per family."""
    if args.data:
        lines = [line.strip() for line in Path(args.data).read_text(encoding="utf-8").splitlines() if line.strip()]
        return [(line, f"RuntimeError: step failed while doing: {line[:40]}") for line in lines[: args.families]]
    out = []
    for i in range(args.families):
        _domain, task, error = FAMILIES[i % len(FAMILIES)]
        name = NAMES[(i // len(FAMILIES)) % len(NAMES)] + ("" if i < len(FAMILIES) * len(NAMES) else str(i))
        out.append((task.format(x=name), error.format(x=name)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--families", type=int, default=20, help="distinct tasks the episodes cycle through")
    parser.add_argument("--data", help="a text file with one task per line (used as the task families)")
    parser.add_argument("--baseline-src", help="another tree's src/ to measure back to back with this one")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="the local embedding model (default MiniLM)")
    args = parser.parse_args()
    if args.baseline_src:
        return compare(args)

    home = Path(tempfile.mkdtemp(prefix="memmy-evolution-bench-"))
    config = home / "config.yaml"
    config.write_text(
        "memmyMemory:\n  algorithm:\n    reward:\n      feedbackWindowSec: 0\n"
        f"  embedding:\n    provider: local\n    model: {args.model}\n",
        encoding="utf-8",
    )
    os.environ.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "MEMMY_CONFIG": str(config)})
    from memmy.config import load_config
    from memmy.namespace import Namespace
    from memmy.service import MemoryService

    service = MemoryService.open(load_config())
    service.indexer.load_index()
    ns = Namespace(source="bench")
    families = tasks_from(args)
    start_ms: list[float] = []
    complete_ms: list[float] = []
    print(
        f"# evolution bench: {args.episodes} episodes over {len(families)} task families, no LLM, {args.model}",
        file=sys.stderr,
    )
    capture_started = time.perf_counter()
    for n in range(args.episodes):
        task, error = families[n % len(families)]
        session_id = service.open_session(OpenSession.from_json({"workspacePath": "/work/bench"}), ns)["sessionId"]
        turns = [
            (
                task,
                "The run failed; see the error above.",
                [
                    {
                        "name": "bash",
                        "input": {"command": task},
                        "output": error,
                        "error": "exit code 1",
                        "success": False,
                    }
                ],
            ),
            (
                "It still fails, please fix it",
                "Fixed it; the run passes now.",
                [
                    {
                        "name": "bash",
                        "input": {"command": f"fix: {task}"},
                        "output": "ok: all checks passed",
                        "success": True,
                    }
                ],
            ),
        ]
        for query, answer, calls in turns:
            t0 = time.perf_counter()
            started = service.start_turn(StartTurn.from_json({"sessionId": session_id, "query": query}), ns)
            t1 = time.perf_counter()
            service.complete_turn(
                CompleteTurn.from_json(
                    {"sessionId": session_id, "query": query, "answer": answer, "toolCalls": calls}, started["turnId"]
                ),
                ns,
            )
            t2 = time.perf_counter()
            start_ms.append((t1 - t0) * 1000)
            complete_ms.append((t2 - t1) * 1000)
        service.close_session(CloseSession.from_json({}, session_id))
        if (n + 1) % 50 == 0:
            print(f"  captured {n + 1} episodes", file=sys.stderr)
    capture_s = time.perf_counter() - capture_started
    drain_started = time.perf_counter()
    while True:
        report = service.run_worker(RunWorker.from_json({"limit": 1000}))
        if report["leased"] == 0 and report["embeddingRetries"]["leased"] == 0:
            break
    drain_s = time.perf_counter() - drain_started

    layers = {
        layer: service.memories.by_layer(layer, ("activated", "resolving", "archived"), limit=100_000)
        for layer in ("L2", "L3", "Skill")
    }
    policies = [m.properties.get("policy") or {} for m in layers["L2"]]
    active_success = sum(1 for p in policies if p.get("type") == "success_pattern" and p.get("status") == "active")
    avoidance = sum(1 for p in policies if p.get("type") == "failure_avoidance")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    turns = len(complete_ms)
    print(f"\nload average: {os.getloadavg()[0]:.2f} (1 min)")
    print("\n| stage | figure |\n|---|---|")
    p50, p95, p99 = (percentile(complete_ms, q) for q in (50, 95, 99))
    print(f"| turn.complete p50 / p95 / p99 | {p50:.1f} / {p95:.1f} / {p99:.1f} ms |")
    print(f"| turn.complete throughput | {turns / (sum(complete_ms) / 1000):.0f} turns/s (sequential) |")
    print(f"| turn.start p50 / p95 | {percentile(start_ms, 50):.1f} / {percentile(start_ms, 95):.1f} ms |")
    print(f"| capture wall time | {capture_s:.1f} s for {turns} turns ({turns / capture_s:.0f} turns/s with starts) |")
    print(f"| pipeline drain | {drain_s:.1f} s ({args.episodes / drain_s:.1f} episodes/s) |")
    print(f"| whole offline pipeline | {args.episodes / (capture_s + drain_s):.1f} episodes/s |")
    print(f"| mean turn.complete | {statistics.mean(complete_ms):.1f} ms |")
    print(f"| policies | {active_success} active success, {avoidance} failure_avoidance, {len(policies)} total |")
    print(f"| world models / skills | {len(layers['L3'])} / {len(layers['Skill'])} |")
    print(f"| jobs | {service.jobs.counts()} |")
    print(f"| peak RSS | {rss_mb:.0f} MiB |")
    service.close()
    return 0


FIGURES = (
    ("turn.complete throughput", r"turn\.complete throughput \| (\d+) turns/s", "turns/s"),
    ("capture with starts", r"\((\d+) turns/s with starts\)", "turns/s"),
    ("pipeline drain", r"pipeline drain \| [\d.]+ s \(([\d.]+) episodes/s\)", "episodes/s"),
    ("whole offline pipeline", r"whole offline pipeline \| ([\d.]+) episodes/s", "episodes/s"),
    ("peak RSS", r"peak RSS \| (\d+) MiB", "MiB"),
)


def compare(args: argparse.Namespace) -> int:
    """Run the bench for ``--baseline-src`` and for this tree, back to back, and print both."""
    here = str(Path(__file__).resolve().parents[1] / "src")
    argv = [
        sys.executable,
        __file__,
        "--episodes",
        str(args.episodes),
        "--families",
        str(args.families),
        "--model",
        args.model,
    ]
    if args.data:
        argv += ["--data", args.data]
    found: dict[str, dict[str, float]] = {}
    for name, src in (("baseline", args.baseline_src), ("this tree", here)):
        env = {**os.environ, "PYTHONPATH": src, "PYTHONDONTWRITEBYTECODE": "1"}
        load = os.getloadavg()[0]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        print(f"\n## {name} ({src}), load average before: {load:.2f}\n{out}")
        found[name] = {label: float(m.group(1)) for label, rx, _ in FIGURES if (m := re.search(rx, out))}
    print("\n| figure | baseline | this tree | change |\n|---|---|---|---|")
    for label, _rx, unit in FIGURES:
        base, mine = found["baseline"].get(label), found["this tree"].get(label)
        if base is None or mine is None:
            continue
        print(f"| {label} | {base:g} {unit} | {mine:g} {unit} | {100 * (mine - base) / base:+.0f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
