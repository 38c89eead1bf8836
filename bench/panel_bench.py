"""Panel benchmark: how long each /panel page takes to answer over a store of N memories (target: ≤ 150 ms at 100k).

    python bench/panel_bench.py --n 10000                 # build a 10k store in a temporary HOME, then time pages
    python bench/panel_bench.py --db /path/memory.sqlite  # time pages over a copy of an existing store (e.g. 100k)
    python bench/panel_bench.py --db FILE --repeat 20
    python bench/panel_bench.py --synthetic 100000        # 100k rows written directly, random unit vectors

``--synthetic`` skips the embedding model while building (writing 100k memories through the service and embedding
them takes over an hour on two shared cores): rows go straight into the store in one transaction (2% L2 policies,
creation times spread over a year, full-text rows included) with random unit vectors stamped with the local
model's fingerprint, so the vector index holds N vectors and exact search costs what it costs with real ones; the
search page's query is still embedded by the real model. Recall *quality* is meaningless in that mode, timing is not.

Every page is requested ``--repeat`` times through the real ASGI app (Starlette TestClient: routing, the session
check, the service reads and the Jinja2 rendering, no network), after a first request whose time is printed
separately ("first ms": the panel keeps counts for 10 s and analytics for 60 s, so a first request may pay
them). As baselines from the same run and machine it also times ``GET /api/v1/health`` and the search API with the
search page's query. The search page answers with its shell at once and panel.js fetches the results
(``/panel/memories/results``, the same engine): those rows are timed too and cost what the search API costs.
It prints a Markdown table (first, median, p95, max per page) and the 1-minute load average, since other
processes on the machine slow every figure down.

An existing store is copied to a temporary directory first: the search page writes recall events, and the panel's
actions must never touch the original.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from starlette.testclient import TestClient

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.commands.panel import PanelItems
from memmy.config import load_config
from memmy.domain import ID_PREFIX_BY_LAYER, Memory, new_id
from memmy.indexing import FIELD_BY_LAYER
from memmy.namespace import Namespace
from memmy.server.app import create_app
from memmy.service import MemoryService

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import unique_memories  # noqa: E402

BASE = "http://127.0.0.1:18960"
PAGES = (
    "/panel",
    "/panel/memories",
    "/panel/memories?q=deploy+database+migration",
    "/panel/memories/results?q=deploy+database+migration",
    "/panel/memories/results?q=deploy+database+migration&evidence=1",
    "/panel/memories?layer=L1&status=activated&page=3",
    "/panel/memories/{memory_id}",
    "/panel/tasks",
    "/panel/experiences",
    "/panel/world-models",
    "/panel/skills",
    "/panel/review",
    "/panel/recalls",
    "/panel/analytics",
    "/panel/logs",
    "/panel/logs?kind=api",
    "/panel/logs?kind=changes",
    "/panel/logs?kind=dreams",
    "/panel/agents",
    "/panel/settings",
)


def build(service: MemoryService, n: int) -> None:
    """Add ``n`` synthetic memories and embed them (progress on stderr)."""
    started = time.perf_counter()
    ns = Namespace(source="bench")
    for i, body in enumerate(itertools.islice(unique_memories(7), n)):
        service.add_memory(AddMemory.from_json(body), ns)
        if (i + 1) % 1000 == 0:
            print(f"added {i + 1}/{n}", file=sys.stderr)
    while True:
        ok, bad = service.indexer.run_once(256)
        if ok == 0 and bad == 0:
            break
    print(f"built {n} memories in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def build_synthetic(service: MemoryService, n: int) -> None:
    """Write ``n`` memories and random unit vectors directly (see the module docstring)."""
    started = time.perf_counter()
    fingerprint = service.indexer.embedder.fingerprint
    rng = np.random.default_rng(7)
    now = datetime.now(UTC)
    with service.db.transaction():
        for i, body in enumerate(itertools.islice(unique_memories(7), n)):
            layer = "L2" if i % 50 == 0 else "L1"
            stamp = (now - timedelta(minutes=int(rng.integers(0, 525_600)))).isoformat(timespec="milliseconds")
            stamp = stamp.replace("+00:00", "Z")
            memory = Memory(
                id=new_id(ID_PREFIX_BY_LAYER[layer]),
                layer=layer,  # type: ignore[arg-type]
                content=body["content"],
                title=body["content"][:80] if layer == "L2" else "",
                tags=list(body.get("tags") or []),
                source_agent=str(body.get("source") or "bench"),
                project_id=f"/home/u/proj{i % 40}",
                created_at=stamp,
                updated_at=stamp,
                valid_from=stamp,
            )
            service.memories.insert(memory, source="bench")
            vector = rng.standard_normal(fingerprint.dim).astype(np.float32)
            vector /= np.linalg.norm(vector)
            service.vectors.upsert(memory.id, FIELD_BY_LAYER[layer], fingerprint.provider, fingerprint.model, vector)
            if (i + 1) % 10_000 == 0:
                print(f"wrote {i + 1}/{n}", file=sys.stderr)
    service.indexer.load_index()
    ns = Namespace(source="bench")
    for query in ("deploy the web app", "数据库迁移", "fix the flaky test", "which package manager"):
        service.search(SearchMemory.from_json({"query": query}), ns)
    print(f"wrote {n} memories in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="memories to build when no --db is given")
    parser.add_argument("--db", type=Path, help="an existing memory store to copy and measure")
    parser.add_argument("--synthetic", type=int, help="write this many memories directly, with random vectors")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="with --synthetic: build into this file, or reuse it if it exists")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    with tempfile.TemporaryDirectory(prefix="memmy-panel-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        os.environ["HOME"] = str(home)
        os.environ["MEMMY_HOME"] = str(home / ".memmy")
        db_override = None
        reuse = bool(args.keep and args.keep.exists())
        if args.keep and not reuse:
            db_override = args.keep
        if args.db or reuse:
            args.db = args.db or args.keep
            db_override = Path(tmp) / "memory.sqlite"
            with sqlite3.connect(f"file:{args.db}?mode=ro", uri=True) as source:
                target = sqlite3.connect(db_override)
                source.backup(target)
                target.close()
        service = MemoryService.open(load_config(db_override=db_override))
        try:
            service.indexer.load_index()
            if args.synthetic and not reuse:
                build_synthetic(service, args.synthetic)
            elif not args.db:
                build(service, args.n)
            total = service.panel.items(PanelItems.from_json({"pageSize": "1"}))["total"]
            memory_id = service.panel.items(PanelItems.from_json({"pageSize": "1", "page": "2"}))["items"][0]["id"]
            app = create_app(service)
            with TestClient(app, base_url=BASE, follow_redirects=False) as client:
                link = client.post("/api/v1/panel/sign-in").json()["url"].removeprefix(BASE)
                client.get(link)
                rows = []
                search = {"query": "deploy database migration", "scope": "pooled", "limit": 20, "verbose": True}
                for path in ("/api/v1/health", "POST /api/v1/memory/search", *PAGES):
                    url = path.format(memory_id=memory_id)

                    def request(url: str = url) -> Any:
                        if url.startswith("POST "):
                            return client.post(url.removeprefix("POST "), json=search)
                        return client.get(url)

                    started = time.perf_counter()
                    request()  # the first request: "cold" (panel caches of counts/analytics may be empty)
                    cold = (time.perf_counter() - started) * 1000
                    times = []
                    for _ in range(args.repeat):
                        started = time.perf_counter()
                        answer = request()
                        times.append((time.perf_counter() - started) * 1000)
                        assert answer.status_code == 200, (url, answer.status_code)
                    times.sort()
                    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
                    rows.append((path, cold, statistics.median(times), p95, times[-1]))
        finally:
            service.close()
        origin = f"copy of {args.db}" if args.db else "synthetic, random vectors" if args.synthetic else "built here"
        print(
            f"\nPanel pages over {total} memories ({origin}), "
            f"{args.repeat} requests each after a warm-up; load average {os.getloadavg()[0]:.2f}\n"
        )
        print("| page | first ms | median ms | p95 ms | max ms |")
        print("|---|---:|---:|---:|---:|")
        for path, cold, median, p95, worst in rows:
            label = f"{path} (baseline)" if "/api/" in path else path
            print(f"| `{label}` | {cold:.1f} | {median:.1f} | {p95:.1f} | {worst:.1f} |")
        slow = [r for r in rows if "/api/" not in r[0] and "/results?" not in r[0] and r[3] > 150]
        print(f"\npages over 150 ms at p95: {', '.join(r[0] for r in slow) if slow else 'none'}")
        late = [r for r in rows if "/results?" in r[0] and r[3] > 150]
        print(f"search results fragments over 150 ms at p95: {', '.join(r[0] for r in late) if late else 'none'}")
        print("(the /panel/memories/results rows are the search results panel.js loads after the page: the engine)")
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
