"""Hook round trip: process start -> output, for the real ``python -m memmy.hook`` against a live daemon.

A daemon is loaded with N synthetic memories (default 10,000, real embeddings); then the Claude Code
UserPromptSubmit hook is run as a fresh process for each prompt, exactly as the agent runs it (through the
``memmy-hook`` launcher that ``init`` writes, which starts ``python -S -m memmy.hook``), and the wall time
from spawn to exit is recorded. The same hook started the old way (``python -m memmy.hook``, with ``site``) is
timed interleaved too. The issue's target on this 2-core machine: p50 <= 45 ms, p95 <= 80 ms
(idle machine); ``python -c pass`` and ``python -c 'import memmy.hook.runtime'`` are timed interleaved with the
hook runs, so the ratio hook / bare interpreter is comparable under any load.

Run:  python bench/hook.py --n 10000 --runs 100
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from corpus import make_queries, read_data_file, unique_memories
from service_bench import Daemon, bench_env

from memmy.integrations.launcher import HOOK_SHIM, package_dir, shim_text


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    """Load the daemon, run the hook, print percentiles."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="memories in the daemon")
    parser.add_argument("--runs", type=int, default=100, help="hook invocations to time")
    parser.add_argument("--data", type=Path, default=None, help="optional text file, one memory per line")
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="memmy-hook-bench-"))
    daemon = Daemon(home)
    daemon.start()
    try:
        bodies = read_data_file(args.data) if args.data else list(itertools.islice(unique_memories(7), args.n))
        started = time.perf_counter()
        with daemon.client() as client:
            for body in bodies[: args.n]:
                client.post("/api/v1/memory/add", json=body).raise_for_status()
            daemon.drain(client)
        print(
            f"loaded {min(args.n, len(bodies))} memories (embedded) in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        (home / ".memmy").mkdir(parents=True, exist_ok=True)
        (home / ".memmy" / "hook.json").write_text(json.dumps({"endpoint": daemon.url, "timeoutMs": 1500}))
        env = {**bench_env(home), "PYTHONDONTWRITEBYTECODE": "0"}
        shim = home / ".memmy" / "bin" / HOOK_SHIM
        shim.parent.mkdir(parents=True, exist_ok=True)
        shim.write_text(shim_text(sys.executable, "memmy.hook", True, package_dir()))
        shim.chmod(0o755)
        argv_hook = [str(shim), "claude_code", "UserPromptSubmit"]
        argv_site = [sys.executable, "-m", "memmy.hook", "claude_code", "UserPromptSubmit"]
        argv_no_site = [sys.executable, "-S", "-m", "memmy.hook", "claude_code", "UserPromptSubmit"]
        queries = [q for _, q in make_queries(args.runs, 11)]
        times, injected, baseline, imports, with_site, no_site = [], 0, [], [], [], []
        fast_env = {**env, "PYTHONPATH": package_dir()}
        import_argv = [sys.executable, "-S", "-c", "import memmy.hook.runtime"]
        load_before = os.getloadavg()
        for number, query in enumerate(queries):
            payload = {
                "session_id": f"bench-{number}",
                "cwd": str(home),
                "hook_event_name": "UserPromptSubmit",
                "transcript_path": None,
                "permission_mode": "default",
                "prompt": query,
            }
            began = time.perf_counter()
            done = subprocess.run(
                argv_hook, input=json.dumps(payload), capture_output=True, text=True, env=env, timeout=30
            )
            times.append((time.perf_counter() - began) * 1000)
            injected += bool(done.stdout.strip())
            payload["session_id"] = f"bench-site-{number}"
            began = time.perf_counter()
            subprocess.run(argv_site, input=json.dumps(payload), capture_output=True, text=True, env=env, timeout=30)
            with_site.append((time.perf_counter() - began) * 1000)
            payload["session_id"] = f"bench-nosite-{number}"
            began = time.perf_counter()
            subprocess.run(
                argv_no_site, input=json.dumps(payload), capture_output=True, text=True, env=fast_env, timeout=30
            )
            no_site.append((time.perf_counter() - began) * 1000)
            # Interleaved, so the baselines see the same machine load as the hook runs.
            began = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            baseline.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            subprocess.run(import_argv, env=fast_env, check=True)
            imports.append((time.perf_counter() - began) * 1000)
        load_after = os.getloadavg()
    finally:
        daemon.stop()
    hook_p50, hook_p95 = percentile(times, 0.5), percentile(times, 0.95)
    bare_p50 = percentile(baseline, 0.5)
    print(f"hook round trip (process start -> output), {len(times)} prompts, {min(args.n, len(bodies))} memories:")
    print(
        f"  hook (memmy-hook launcher, -S) p50 {hook_p50:6.1f} ms   p95 {hook_p95:6.1f} ms   "
        f"max {max(times):6.1f} ms   mean {statistics.fmean(times):6.1f} ms"
    )
    print(
        f"  python -S -m memmy.hook (no launcher)  p50 {percentile(no_site, 0.5):6.1f} ms   "
        f"p95 {percentile(no_site, 0.95):6.1f} ms"
    )
    print(
        f"  python -m memmy.hook (with site)  p50 {percentile(with_site, 0.5):6.1f} ms   "
        f"p95 {percentile(with_site, 0.95):6.1f} ms"
    )
    print(
        f"  python -S -c 'import memmy.hook.runtime'  p50 {percentile(imports, 0.5):6.1f} ms   "
        f"p95 {percentile(imports, 0.95):6.1f} ms"
    )
    print(f"  python -c pass                p50 {bare_p50:6.1f} ms   p95 {percentile(baseline, 0.95):6.1f} ms")
    print(f"  ratio hook / python -c pass (p50): {hook_p50 / bare_p50:.2f}")
    print(f"  prompts with injected context: {injected}/{len(times)}")
    print(
        f"  target p50 <= 45 ms: {'met' if hook_p50 <= 45 else 'NOT met'}; "
        f"p95 <= 80 ms: {'met' if hook_p95 <= 80 else 'NOT met'}  (cpus: {os.cpu_count()}, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
