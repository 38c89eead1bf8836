"""How fast the command lines start: ``memmy --help``, ``memmy-memory --help`` and ``memmy status`` against a bare
``python -c pass`` of the same interpreter, 20 interleaved runs each (so every command sees the same machine
load), p50 and p95 in ms and the ratio of each p50 to the bare start's. Issue 30's targets: ``--help`` <= 12x,
``memmy status`` <= 20x. ``memmy status`` runs in an empty temporary HOME (no model configured: it reports that
and exits 1 at once; with a provider configured it also makes a live call, which is the network's time, not the
start's). Bytecode is written and used as in an install.

Run:  python bench/cli_start.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "memmy-memory --help": [sys.executable, "-c", "from memmy.cli.main import main; main()", "--help"],
    "memmy --help": [sys.executable, "-c", "from memmy.agent.cli import main; main()", "--help"],
    "memmy status": [sys.executable, "-c", "from memmy.agent.cli import main; main()", "status"],
}
TARGETS = {"memmy-memory --help": 12.0, "memmy --help": 12.0, "memmy status": 20.0}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMY") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update({"HOME": home, "MEMMY_HOME": os.path.join(home, ".memmy")})
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for command in COMMANDS.values():  # once untimed: bytecode written, files in the page cache
            subprocess.run(command, env=env, capture_output=True, check=False)
        for _ in range(args.runs):
            for name, command in COMMANDS.items():
                start = time.perf_counter()
                subprocess.run(command, env=env, capture_output=True, check=False)
                times[name].append((time.perf_counter() - start) * 1000)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (cores: {os.cpu_count()}, {args.runs} runs)")
    bare = statistics.median(times["python -c pass"])
    for name, values in times.items():
        p50 = statistics.median(values)
        target = (
            f"   target <= {TARGETS[name]:.0f}x: {'met' if p50 / bare <= TARGETS[name] else 'NOT met'}"
            if name in TARGETS
            else ""
        )
        print(f"{name:<22} p50 {p50:7.1f} ms   p95 {percentile(values, 95):7.1f} ms   {p50 / bare:5.1f}x{target}")


if __name__ == "__main__":
    main()
