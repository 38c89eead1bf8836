"""Service benchmark: add throughput with embeddings, search latency at 10k/100k memories, daemon RSS.

    python bench/service_bench.py                     # 10k and 100k corpora, 200 queries (~22 min on 2 idle cores)
    python bench/service_bench.py --n 10000           # quick run (~3 min)
    python bench/service_bench.py --n 10000 --skip-http --queries 50
    python bench/service_bench.py --data memories.txt # one memory per line instead of synthetic text
    python bench/service_bench.py --home DIR          # keep the store; later: --home DIR --reuse (search only)

Nearly all of the time goes into embedding the corpus with the local MiniLM (about 90 memories/s on two idle
cores, much less when other processes compete for them), so a busy machine can take twice as long.

What it does, in order (everything lives in a temporary directory unless ``--home`` is given):

1. HTTP add (unless ``--skip-http``): starts a real daemon (``python -m memmy serve``) on an empty store,
   records its idle RSS, POSTs ``--http-adds`` memories to ``/api/v1/memory/add`` over one keep-alive
   connection, then drains the embedding queue (``/api/v1/worker/run`` until health shows nothing pending).
2. For each corpus size in ``--n`` (ascending, one growing database): adds the new memories through
   ``MemoryService.add_memory`` in-process and drains the queue with the indexer (timed separately and
   together), then times ``service.search`` for every query. Unless ``--skip-http``, it then closes the
   service, starts a daemon on the same file (so it loads the vector index at start), records its start-up
   time and RSS, times ``POST /api/v1/memory/search`` for every query, records the RSS again and stops it.
3. Prints Markdown tables and the total elapsed time. Progress goes to stderr.

Queries are unique, ~70% about the corpus and ~30% off-topic, ~20% Chinese; a few extra queries warm each
process up first. The in-process embedder has its query cache disabled so every timed search embeds its
query (the daemon's cache never hits since no query repeats within a daemon).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.config import load_config
from memmy.embed import LocalMiniLMEmbedder
from memmy.namespace import Namespace
from memmy.server.run import settle_heap
from memmy.service import MemoryService

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import make_queries, read_data_file, unique_memories  # noqa: E402
from model_check import require_local_model  # noqa: E402

PROGRESS_EVERY = 5000
ENV_PREFIXES = ("MEMMY_", "MEMORY_SERVICE_")
SEARCH_LIMIT = 10


# -- results ------------------------------------------------------------------------------------------------
@dataclass
class AddResult:
    """One add run: how many memories, seconds spent adding and seconds spent draining the queue."""

    label: str
    count: int
    add_s: float
    drain_s: float
    deduplicated: int = 0

    @property
    def total_s(self) -> float:
        """Add plus drain."""
        return self.add_s + self.drain_s


@dataclass
class LatencyResult:
    """Search latencies (ms) of one corpus size and path, with hit counts per query kind."""

    where: str
    size: int
    samples_ms: list[float]
    hits: dict[str, list[int]] = field(default_factory=dict)

    def percentile(self, q: float) -> float:
        """The q-th percentile in ms (linear interpolation)."""
        return float(np.percentile(np.asarray(self.samples_ms), q))


@dataclass
class RssResult:
    """Daemon memory at one moment: resident and peak resident set size in MiB, plus an optional note."""

    moment: str
    rss_mib: float
    peak_mib: float | None
    note: str = ""


@dataclass
class Report:
    """Everything measured in one run."""

    adds: list[AddResult] = field(default_factory=list)
    latencies: list[LatencyResult] = field(default_factory=list)
    rss: list[RssResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- helpers ------------------------------------------------------------------------------------------------
class LoadSampler:
    """Samples the 1-minute load average every 10 s in a daemon thread (the machine may be shared)."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> str:
        """Stop sampling; return a one-line summary."""
        self._stop.set()
        self.samples.append(os.getloadavg()[0])
        return f"load average (1 min) during the run: mean {np.mean(self.samples):.2f}, max {max(self.samples):.2f}"


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def memory_mib(pid: int) -> tuple[float, float | None]:
    """(RSS, peak RSS) of a process in MiB; the peak comes from /proc (Linux) and is None elsewhere."""
    rss = psutil.Process(pid).memory_info().rss / 2**20
    peak: float | None = None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, peak


#: The token bench daemons (and the hooks bench/hook.py runs) use: the daemon requires one by default.
BENCH_TOKEN = "bench-token"


#: The variables that put a bench's store on PostgreSQL while a ``--backend postgres`` phase runs (else empty).
BACKEND_ENV: dict[str, str] = {}


def bench_env(home: Path) -> dict[str, str]:
    """The environment of a bench daemon or config: the outer memmy variables removed, HOME redirected (and the
    store on PostgreSQL while :data:`BACKEND_ENV` says so)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    env.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "MEMMY_MEMORY_TOKEN": BENCH_TOKEN})
    env.update(BACKEND_ENV)
    return env


def open_service(home: Path, db_path: Path, embedder: LocalMiniLMEmbedder) -> MemoryService:
    """An in-process service over ``db_path`` with the given embedder and its vector index loaded, its WAL
    checkpointed in the background and its startup heap settled, as the daemon does before serving (the
    embedding and evolution workers are not started)."""
    config = load_config(env=bench_env(home), db_override=db_path)
    require_local_model(config.embedding.provider)
    service = MemoryService.open(config, embedder=embedder)
    service.indexer.load_index()
    service.db.checkpoint_in_background()
    settle_heap()
    return service


# -- the daemon ---------------------------------------------------------------------------------------------
class Daemon:
    """A real ``python -m memmy serve`` subprocess on a free loopback port."""

    def __init__(self, home: Path, db_path: Path | None = None) -> None:
        self.home = home
        self.db_path = db_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = home / f"daemon-{self.port}.log"

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 600.0) -> float:
        """Start the daemon and wait until health answers; return the seconds that took."""
        self.home.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "memmy", "serve", "--port", str(self.port), "--log-level", "warning"]
        if self.db_path is not None:
            command += ["--db", str(self.db_path)]
        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, env=bench_env(self.home), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200:
                    return time.perf_counter() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"daemon did not become healthy in {timeout_s:.0f}s:\n{self.log_path.read_text()}")

    def client(self) -> httpx.Client:
        """A keep-alive client for this daemon."""
        headers = {"x-memmy-source": "claude_code", "authorization": f"Bearer {BENCH_TOKEN}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=600)

    def drain(self, client: httpx.Client, timeout_s: float = 3600.0) -> None:
        """Embed everything queued and wait until the daemon's worker has nothing pending or in flight."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            client.post("/api/v1/worker/run", json={"limit": 10000}).raise_for_status()
            if client.get("/api/v1/health").json()["embeddingQueue"]["pending"] == 0:
                return
            time.sleep(0.05)
        raise TimeoutError("the daemon's embedding queue did not drain")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- adding -------------------------------------------------------------------------------------------------
def add_all(add: Callable[[dict[str, Any]], dict[str, Any]], bodies: Sequence[dict[str, Any]], label: str) -> int:
    """Call ``add`` for every body, printing progress; return how many were merged as duplicates."""
    deduplicated = 0
    started = time.perf_counter()
    for done, body in enumerate(bodies, 1):
        if add(body).get("deduplicated"):
            deduplicated += 1
        if done % PROGRESS_EVERY == 0 or done == len(bodies):
            progress(f"{label}: added {done:,}/{len(bodies):,} ({done / (time.perf_counter() - started):,.0f}/s)")
    return deduplicated


def drain_in_process(service: MemoryService, expected: int, label: str) -> None:
    """Run the indexer batch by batch until the queue is empty, printing progress every 5k embeddings."""
    started = time.perf_counter()
    done = next_report = 0
    while True:
        ok, failed = service.indexer.run_once()
        if ok == 0 and failed == 0:
            break
        if failed:
            raise RuntimeError(f"embedding failed: {service.indexer.last_error}")
        done += ok
        if done >= next_report + PROGRESS_EVERY:
            next_report = done - done % PROGRESS_EVERY
            rate = done / (time.perf_counter() - started)
            eta = (expected - done) / rate if rate else 0.0
            progress(f"{label}: embedded {done:,}/{expected:,} ({rate:,.0f}/s, ~{eta / 60:.0f} min left)")
    pending = service.queue.counts()
    if pending.get("pending") or pending.get("in_progress") or pending.get("failed"):
        raise RuntimeError(f"queue not empty after draining: {pending}")


def grow_in_process(service: MemoryService, bodies: Sequence[dict[str, Any]], label: str) -> AddResult:
    """Add ``bodies`` through the service, then drain the embedding queue; both phases timed."""
    ns = Namespace()
    started = time.perf_counter()
    deduplicated = add_all(lambda body: service.add_memory(AddMemory.from_json(body), ns), bodies, label)
    added = time.perf_counter()
    drain_in_process(service, len(bodies), label)
    result = AddResult(label, len(bodies), added - started, time.perf_counter() - added, deduplicated)
    progress(
        f"{label}: built in {result.total_s / 60:.1f} min (add {result.add_s:.0f} s, embed {result.drain_s:.0f} s)"
    )
    return result


def http_add_phase(home: Path, bodies: Sequence[dict[str, Any]], report: Report) -> None:
    """Idle RSS of a fresh daemon, then HTTP add + drain throughput, then RSS again."""
    daemon = Daemon(home)
    try:
        start_s = daemon.start()
        time.sleep(1.0)
        report.rss.append(RssResult("idle, empty store, right after start", *memory_mib(daemon.pid), f"{start_s:.1f}s"))
        with daemon.client() as client:

            def add(body: dict[str, Any]) -> dict[str, Any]:
                response = client.post("/api/v1/memory/add", json=body)
                response.raise_for_status()
                result: dict[str, Any] = response.json()
                return result

            started = time.perf_counter()
            deduplicated = add_all(add, bodies, "http add")
            added = time.perf_counter()
            progress(f"http add: draining the daemon's embedding queue ({len(bodies):,} memories)")
            daemon.drain(client)
            drained = time.perf_counter()
            progress(f"http add: drained in {drained - added:.0f} s")
        label = f"HTTP, {len(bodies):,} adds (embedding overlaps)"
        report.adds.append(AddResult(label, len(bodies), added - started, drained - added, deduplicated))
        report.rss.append(RssResult(f"after {len(bodies):,} HTTP adds + drain", *memory_mib(daemon.pid)))
    finally:
        daemon.stop()


# -- searching ----------------------------------------------------------------------------------------------
def time_queries(
    search: Callable[[str], int], queries: Sequence[tuple[str, str]]
) -> tuple[list[float], dict[str, list[int]]]:
    """Time ``search`` on every query; return latencies in ms and, per kind, [queries, queries with hits]."""
    samples: list[float] = []
    hits: dict[str, list[int]] = {}
    for kind, query in queries:
        started = time.perf_counter()
        found = search(query)
        samples.append((time.perf_counter() - started) * 1000)
        counts = hits.setdefault(kind, [0, 0])
        counts[0] += 1
        counts[1] += int(found > 0)
    return samples, hits


def search_in_process(
    service: MemoryService, size: int, warmup: Sequence[tuple[str, str]], queries: Sequence[tuple[str, str]]
) -> LatencyResult:
    """Latency of ``service.search`` over the current corpus."""
    ns = Namespace(source="claude_code")

    def search(query: str) -> int:
        return len(service.search(SearchMemory.from_json({"query": query, "limit": SEARCH_LIMIT}), ns)["hits"])

    time_queries(search, warmup)
    samples, hits = time_queries(search, queries)
    return LatencyResult("in-process", size, samples, hits)


def search_over_http(
    home: Path,
    db_path: Path,
    size: int,
    warmup: Sequence[tuple[str, str]],
    queries: Sequence[tuple[str, str]],
    report: Report,
) -> LatencyResult:
    """Start a daemon on ``db_path``, record start-up time and RSS, time HTTP searches, record RSS again."""
    daemon = Daemon(home, db_path)
    try:
        progress(f"http search {size:,}: starting the daemon (loads the vector index)")
        start_s = daemon.start()
        report.rss.append(
            RssResult(
                f"{size:,} memories, right after start (index loaded)", *memory_mib(daemon.pid), f"{start_s:.1f}s"
            )
        )
        with daemon.client() as client:

            def search(query: str) -> int:
                response = client.post("/api/v1/memory/search", json={"query": query, "limit": SEARCH_LIMIT})
                response.raise_for_status()
                return len(response.json()["hits"])

            time_queries(search, warmup)
            samples, hits = time_queries(search, queries)
        report.rss.append(
            RssResult(f"{size:,} memories, after {len(warmup) + len(queries)} searches", *memory_mib(daemon.pid))
        )
        return LatencyResult("HTTP", size, samples, hits)
    finally:
        daemon.stop()


# -- the run ------------------------------------------------------------------------------------------------
def corpus_bodies(args: argparse.Namespace) -> tuple[Iterator[dict[str, Any]], list[dict[str, Any]] | None]:
    """The memory stream (synthetic or ``--data``) and, for ``--data``, the list it came from."""
    if args.data is None:
        return unique_memories(args.seed), None
    data = read_data_file(Path(args.data))
    if not data:
        raise SystemExit(f"{args.data}: no memories (one per line expected)")
    return iter(data), data


def measure_size(
    args: argparse.Namespace,
    home: Path,
    service: MemoryService,
    size: int,
    queries: list[tuple[str, str]],
    report: Report,
) -> MemoryService:
    """Search latency at the store's current size, in-process and (unless skipped) over HTTP.

    Returns the service to keep using: the HTTP step closes it, runs a daemon on the file and reopens it.
    """
    warmup, measured = queries[: args.warmup], queries[args.warmup :]
    progress(f"search {size:,}: in-process")
    report.latencies.append(search_in_process(service, size, warmup, measured))
    if args.skip_http:
        return service
    db_path, embedder = service.config.storage.sqlite_path, service.indexer.embedder
    assert isinstance(embedder, LocalMiniLMEmbedder)
    service.close()
    report.latencies.append(search_over_http(home / "daemon", db_path, size, warmup, measured, report))
    return open_service(home, db_path, embedder)


def run_sizes(
    args: argparse.Namespace,
    home: Path,
    stream: Iterator[dict[str, Any]],
    queries: list[tuple[str, str]],
    report: Report,
) -> None:
    """Grow one database through every size, measuring add throughput and search latency at each."""
    embedder = LocalMiniLMEmbedder(query_cache_size=0)
    embedder.load()
    service = open_service(home, home / "inproc" / "memory.sqlite", embedder)
    current = 0
    try:
        for size in sorted(set(args.n)):
            new = list(itertools.islice(stream, size - current))
            if current + len(new) < size:
                report.notes.append(f"--data has only {current + len(new):,} distinct memories; stopped there")
                if not new:
                    break
            label = f"in-process, {current:,} -> {current + len(new):,}"
            report.adds.append(grow_in_process(service, new, label))
            current += len(new)
            service = measure_size(args, home, service, current, queries, report)
    finally:
        service.close()


def search_existing(args: argparse.Namespace, home: Path, queries: list[tuple[str, str]], report: Report) -> None:
    """``--reuse``: search latency on the store a previous run left in ``--home`` (nothing is added)."""
    embedder = LocalMiniLMEmbedder(query_cache_size=0)
    embedder.load()
    service = open_service(home, home / "inproc" / "memory.sqlite", embedder)
    try:
        pending = service.queue.counts()
        if pending.get("pending") or pending.get("in_progress"):
            raise SystemExit(f"the store in {home} still has queued embeddings ({pending}); rebuild it")
        size = sum(service.memories.count_by_layer().values())
        report.notes.append(f"--reuse: searched the existing {size:,}-memory store in {home}; no adds measured")
        service = measure_size(args, home, service, size, queries, report)
    finally:
        service.close()


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table with right-aligned numeric columns."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|")
    for row in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_report(report: Report, args: argparse.Namespace, elapsed_s: float, load: str) -> None:
    """Print the three tables and the run facts."""
    if report.adds:
        print("\n## Add throughput (with embeddings)\n")
        rows = [add_row(a) for a in report.adds]
        headers = ["run", "memories", "add only /s", "embed (drain) /s", "add+embed /s", "total s", "dedup"]
        print(markdown_table(headers, rows))
    timed = len(report.latencies[0].samples_ms) if report.latencies else 0
    print(f"\n## Search latency, limit {SEARCH_LIMIT} ({timed} queries after warm-up)\n")
    rows = [latency_row(lat) for lat in report.latencies]
    print(markdown_table(["path", "memories", "p50 ms", "p95 ms", "p99 ms", "max ms", "queries with hits"], rows))
    if report.rss:
        print("\n## Daemon memory (RSS)\n")
        rows = [
            [r.moment, f"{r.rss_mib:,.0f}", f"{r.peak_mib:,.0f}" if r.peak_mib else "-", r.note] for r in report.rss
        ]
        print(markdown_table(["moment", "RSS MiB", "peak MiB", "start-up"], rows))
    for note in report.notes:
        print(f"\nNote: {note}")
    print(
        f"\npython {platform.python_version()}, sqlite {sqlite3.sqlite_version}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs; {load}; seed {args.seed}; total elapsed {elapsed_s / 60:.1f} min ({elapsed_s:.0f} s)"
    )


def add_row(a: AddResult) -> list[str]:
    """One row of the add-throughput table."""
    rates = (a.count / a.add_s, a.count / a.drain_s, a.count / a.total_s)
    return [a.label, f"{a.count:,}", *(f"{r:,.0f}" for r in rates), f"{a.total_s:,.1f}", str(a.deduplicated)]


def latency_row(lat: LatencyResult) -> list[str]:
    """One row of the search-latency table."""
    cuts = (lat.percentile(50), lat.percentile(95), lat.percentile(99), max(lat.samples_ms))
    return [lat.where, f"{lat.size:,}", *(f"{c:.1f}" for c in cuts), hit_summary(lat.hits)]


def hit_summary(hits: dict[str, list[int]]) -> str:
    """``match-en 95/100, off-en 3/40`` style summary."""
    return ", ".join(f"{kind} {h}/{n}" for kind, (n, h) in sorted(hits.items()))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--n", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes (default 10000 100000)"
    )
    parser.add_argument("--queries", type=int, default=200, help="timed search queries per size and path (default 200)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up queries per process (default 5)")
    parser.add_argument("--http-adds", type=int, default=2000, help="memories added over HTTP (default 2000)")
    parser.add_argument("--home", help="working directory (default: a temporary one, removed at the end)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary working directory")
    parser.add_argument(
        "--reuse", action="store_true", help="with --home: only search the store a previous run left there"
    )
    parser.add_argument("--skip-http", action="store_true", help="no daemon: in-process figures only")
    parser.add_argument("--data", help="text file with one memory per line, used instead of synthetic memories")
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic corpus and queries (default 7)")
    args = parser.parse_args(argv)
    if args.reuse and not args.home:
        parser.error("--reuse needs --home (the directory of a previous run)")
    if any(n <= 0 for n in args.n) or args.queries <= 0 or args.warmup < 0 or args.http_adds <= 0:
        parser.error("sizes, --queries and --http-adds must be positive, --warmup not negative")
    return args


def prepare_home(args: argparse.Namespace) -> tuple[Path, bool]:
    """The working directory and whether to delete it at the end; refuses a directory with a bench store."""
    if args.home is None:
        return Path(tempfile.mkdtemp(prefix="memmy-bench-")), not args.keep
    home = Path(args.home).expanduser().resolve()
    built = (home / "inproc" / "memory.sqlite").exists()
    if args.reuse and not built:
        raise SystemExit(f"--reuse: {home} holds no store from a previous run (inproc/memory.sqlite)")
    if not args.reuse and (built or (home / "http-add").exists()):
        raise SystemExit(f"{home} already holds a bench store; pass an empty or new directory, or --reuse")
    home.mkdir(parents=True, exist_ok=True)
    return home, False


def main(argv: Sequence[str] | None = None) -> None:
    """Run every phase and print the report."""
    args = parse_args(argv)
    started = time.perf_counter()
    sampler = LoadSampler()
    home, remove = prepare_home(args)
    progress(f"working directory {home}")
    report = Report()
    try:
        stream, data = corpus_bodies(args)
        queries = make_queries(args.queries + args.warmup, args.seed + 1, data)
        if args.reuse:
            search_existing(args, home, queries, report)
        elif not args.skip_http:
            http_bodies = (
                data[: args.http_adds]
                if data
                else list(itertools.islice(unique_memories(args.seed + 2), args.http_adds))
            )
            http_add_phase(home / "http-add", http_bodies, report)
        if not args.reuse:
            run_sizes(args, home, stream, queries, report)
    finally:
        if remove:
            shutil.rmtree(home, ignore_errors=True)
    print_report(report, args, time.perf_counter() - started, sampler.stop())


if __name__ == "__main__":
    main()
