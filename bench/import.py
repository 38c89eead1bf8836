"""History import benchmark: a synthetic multi-agent home (Claude Code + Codex transcripts, real formats).

Prints turns/s and CPU seconds per 1,000 turns for the text import (redaction, turn grouping, SQLite + FTS writes;
the CPU of the history reader processes included, and shown apart),
next to a baseline measured in the same run (CPU seconds to read the same files and ``json.loads`` every line, the
floor of any reader), turns/s for embedding the imported turns afterwards, and peak RSS. The CPU figures judge a run
on a busy machine. Issue 13's target: >= 2,000 turns/s before embeddings on an idle machine.

Run:  python bench/import.py --turns 20000 [--skip-embeddings]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memmy.commands.imports import StartScan
from memmy.config import load_config
from memmy.server.run import settle_heap
from memmy.service import MemoryService
from memmy.service.imports import ImportOps
from memmy.sources.adapters import ADAPTERS
from memmy.sources.reading import choose_mode, idle_cores

TOPICS = (
    "flaky test",
    "docker build",
    "database migration",
    "CI pipeline",
    "type error",
    "memory leak",
    "数据库连接池",
    "部署脚本",
    "单元测试超时",
    "API rate limit",
)


def _ts(base: datetime, seconds: float) -> str:
    return (base + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_claude(home: Path, conversation: int, turns: int, rng: random.Random, base: datetime) -> None:
    """One Claude Code transcript with ``turns`` turns (user, tool call + result, answer)."""
    cwd = f"/work/project{conversation % 7}"
    session = str(uuid.UUID(int=rng.getrandbits(128)))
    path = home / ".claude" / "projects" / cwd.replace("/", "-") / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    clock, parent, lines = 0.0, None, []
    for i in range(turns):
        topic = rng.choice(TOPICS)
        for kind, message in (
            ("user", {"role": "user", "content": f"[{conversation}.{i}] fix the {topic} in module m{i % 50}"}),
            (
                "assistant",
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"toolu_{conversation}_{i}",
                            "name": "Bash",
                            "input": {"command": f"pytest -k m{i}"},
                        }
                    ],
                },
            ),
            (
                "user",
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{conversation}_{i}",
                            "content": f"1 failed: AssertionError in m{i}",
                            "is_error": False,
                        }
                    ],
                },
            ),
            ("assistant", {"role": "assistant", "content": [{"type": "text", "text": f"Fixed the {topic} in m{i}."}]}),
        ):
            clock += 1.5
            line_id = str(uuid.UUID(int=rng.getrandbits(128)))
            lines.append(
                json.dumps(
                    {
                        "parentUuid": parent,
                        "isSidechain": False,
                        "type": kind,
                        "message": message,
                        "uuid": line_id,
                        "timestamp": _ts(base, clock),
                        "cwd": cwd,
                        "sessionId": session,
                    },
                    ensure_ascii=False,
                )
            )
            parent = line_id
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_codex(home: Path, conversation: int, turns: int, rng: random.Random, base: datetime) -> None:
    """One Codex rollout (envelope era) with ``turns`` turns."""
    thread = str(uuid.UUID(int=rng.getrandbits(128)))
    path = home / ".codex" / "sessions" / "2026" / "11" / "01" / f"rollout-2026-11-01T10-00-00-{thread}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    cwd = f"/work/service{conversation % 5}"
    clock = 0.0
    lines = [
        json.dumps(
            {
                "timestamp": _ts(base, 0),
                "type": "session_meta",
                "payload": {"id": thread, "timestamp": _ts(base, 0), "cwd": cwd, "originator": "codex-tui"},
            }
        )
    ]
    for i in range(turns):
        topic = rng.choice(TOPICS)
        items = (
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"<{conversation}.{i}> investigate the {topic}"}],
            },
            {
                "type": "function_call",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": f"rg {topic}"}),
                "call_id": f"call_{conversation}_{i}",
            },
            {"type": "function_call_output", "call_id": f"call_{conversation}_{i}", "output": f"{i} matches"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"The {topic} comes from m{i}."}],
            },
        )
        for item in items:
            clock += 1.5
            lines.append(
                json.dumps(
                    {"timestamp": _ts(base, clock), "type": "response_item", "payload": item}, ensure_ascii=False
                )
            )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_home(home: Path, turns: int, per_conversation: int, seed: int) -> int:
    """Write half the turns as Claude Code transcripts, half as Codex rollouts; return turns written."""
    rng = random.Random(seed)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    written = 0
    conversation = 0
    while written < turns:
        count = min(per_conversation, turns - written)
        writer = write_claude if conversation % 2 == 0 else write_codex
        writer(home, conversation, count, rng, base + timedelta(hours=conversation))
        written += count
        conversation += 1
    return written


def parse_baseline(home: Path) -> tuple[float, int]:
    """CPU seconds to read every transcript under ``home`` and ``json.loads`` each line; the number of lines."""
    started, lines = time.process_time(), 0
    for path in sorted(home.rglob("*.jsonl")):
        with path.open("rb") as handle:
            for raw in handle:
                json.loads(raw)
                lines += 1
    return time.process_time() - started, lines


def children_cpu() -> float:
    """CPU seconds of the finished child processes (the importer's history readers)."""
    times = os.times()
    return times.children_user + times.children_system


def peak_rss_mb() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    """Build the home, import it, embed it, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--per-conversation", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-embeddings", action="store_true")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="memmy-import-bench-"))
    home = root / "home"
    started = time.perf_counter()
    written = build_home(home, args.turns, args.per_conversation, args.seed)
    print(f"wrote {written} turns of synthetic history in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    env = {"HOME": str(home), "MEMMY_HOME": str(root / ".memmy")}
    service = MemoryService.open(load_config(env=env))
    service.imports = ImportOps(
        service.settings,
        service.store,
        service.trace_writer,
        adapters={k: ADAPTERS[k] for k in ("claude_code", "codex")},
        env=env,
    )
    settle_heap()  # as the daemon does once it has started (imports run inside it)
    modes = {name: choose_mode(adapter, env) for name, adapter in service.imports.adapters.items()}
    print(
        f"history read by: {', '.join(f'{name} {mode}' for name, mode in modes.items())} "
        f"(idle cores {idle_cores():.1f}; a reader process needs one)",
        file=sys.stderr,
    )
    started, cpu_started, children_started = time.perf_counter(), time.process_time(), children_cpu()
    result = service.imports.run_sync(StartScan.from_json({"mode": "full", "confirm": True}))
    text_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    reader_cpu_s = children_cpu() - children_started
    totals = result["totals"]
    added = max(1, totals["turnsAdded"])
    parse_s, lines = parse_baseline(home)
    print(
        f"\nimport (text: redaction, grouping, SQLite + FTS, queueing): {totals['turnsAdded']} turns "
        f"from {totals['messagesScanned']} messages in {text_s:.1f} s = {totals['turnsAdded'] / text_s:,.0f} turns/s"
    )
    total_cpu_s = cpu_s + reader_cpu_s
    print(
        f"CPU: {total_cpu_s:.1f} s = {total_cpu_s / added * 1000:.2f} CPU-s per 1,000 turns "
        f"(= {added / total_cpu_s:,.0f} turns per CPU-second; load average {os.getloadavg()[0]:.2f}); "
        f"of it the importer {cpu_s:.1f} s ({cpu_s / added * 1000:.2f} per 1,000 turns), "
        f"the reader processes {reader_cpu_s:.1f} s"
    )
    print(
        f"baseline, same run: json.loads of the same {lines:,} lines: {parse_s:.1f} CPU-s = "
        f"{parse_s / added * 1000:.2f} CPU-s per 1,000 turns; import / baseline = {cpu_s / max(parse_s, 1e-9):.1f}x"
    )
    print(f"skipped: {totals['skipped'] or 'none'}   failed: {totals['failed']}")
    if not args.skip_embeddings:
        started = time.perf_counter()
        service.indexer.load_index()
        service.indexer.drain(timeout_s=7200)
        embed_s = time.perf_counter() - started
        print(
            f"embedding: {totals['turnsAdded']} turns in {embed_s:.1f} s = "
            f"{totals['turnsAdded'] / embed_s:,.0f} turns/s"
        )
    again = time.perf_counter()
    repeat = service.imports.run_sync(StartScan.from_json({}))
    print(f"repeat sync: {repeat['totals']['turnsAdded']} added in {time.perf_counter() - again:.1f} s")
    print(f"peak RSS: {peak_rss_mb():,.0f} MiB")
    service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
