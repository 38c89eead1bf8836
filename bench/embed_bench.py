"""Embedding benchmark: load time, batch throughput and single-query latency.

    PYTHONPATH=src python bench/embed_bench.py                      # local MiniLM: onnxruntime vs numpy
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python bench/embed_bench.py --threads 1   # both engines on one thread
    PYTHONPATH=src python bench/embed_bench.py --n 1024 --batch-size 32
    PYTHONPATH=src python bench/embed_bench.py --provider openai_compatible \
        --endpoint http://localhost:11434/v1 --model nomic-embed-text   # key from $MEMMY_EMBED_API_KEY

The texts are synthetic, short (8-20 words), memory-like sentences; the queries are different texts from
the documents and the query cache is bypassed, so latency is a real forward pass. For the local model both
engines (onnxruntime, numpy) run on the same texts, one after the other, and are printed side by side with
texts per CPU-second (process CPU time) and the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memmy.embed import LocalMiniLMEmbedder, OnnxMiniLMEmbedder, build_embedder
from memmy.embed.base import Embedder
from memmy.embed.onnx_minilm import onnxruntime_available

SUBJECTS = ["The user", "Caroline", "The team", "We", "The CI job", "The agent", "Melanie", "The daemon"]
VERBS = [
    "prefers",
    "decided to use",
    "fixed",
    "reported",
    "switched to",
    "asked about",
    "deployed",
    "dropped",
]
OBJECTS = [
    "tabs over spaces in Python files",
    "sqlite-vec for the vector table",
    "the flaky integration test in the store module",
    "a port conflict on 5432 when running docker compose",
    "pytest -q from the project root",
    "the LGBTQ support group meeting on Saturday",
    "a Rust borrow checker error E0502",
    "dark mode in the web panel",
    "the migration that creates the memories table",
    "a weekly backup of the database to the NAS",
]
TAILS = ["", " yesterday", " after the review", " because it was faster", " last week", " for the release"]


def make_texts(n: int, seed: int) -> list[str]:
    """Deterministic short memory-like sentences."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(TAILS)} (#{i})." for i in range(n)
    ]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of values."""
    return float(np.percentile(np.asarray(values), q))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--provider", default="local", help="local (default) or openai_compatible")
    parser.add_argument("--model", default=None)
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--n", type=int, default=512, help="texts for the throughput run (default 512)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--queries", type=int, default=200, help="single queries for latency (default 200)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs; the best is reported")

    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (default 2)")
    args = parser.parse_args(argv)

    api_key = os.environ.get("MEMMY_EMBED_API_KEY")
    engines: list[tuple[str, Embedder]] = []
    if args.provider == "local":
        if onnxruntime_available():
            cache = Path(tempfile.mkdtemp(prefix="memmy-embed-bench-"))
            onnx = OnnxMiniLMEmbedder(
                batch_size=args.batch_size, query_cache_size=0, cache_dir=cache, threads=args.threads
            )
            engines.append((f"onnxruntime ({onnx.threads} threads)", onnx))
        blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
        engines.append(
            (f"numpy (BLAS threads: {blas})", LocalMiniLMEmbedder(batch_size=args.batch_size, query_cache_size=0))
        )
    else:
        remote = build_embedder(
            args.provider, model=args.model, endpoint=args.endpoint, api_key=api_key, batch_size=args.batch_size
        )
        engines.append((args.provider, remote))

    texts = make_texts(args.n, seed=1)
    queries = make_texts(args.queries, seed=2)
    rows = []
    for name, embedder in engines:
        t0 = time.perf_counter()
        if isinstance(embedder, LocalMiniLMEmbedder):
            embedder.load()  # the onnx engine builds and caches its graph here on first use
        fingerprint = embedder.fingerprint  # probes a remote endpoint once
        load_ms = (time.perf_counter() - t0) * 1000
        embedder.embed(texts[: min(64, len(texts))])  # warm up caches and thread pools
        best, per_cpu = 0.0, 0.0
        for _ in range(max(1, args.repeat)):
            t0, c0 = time.perf_counter(), time.process_time()
            vectors = embedder.embed(texts)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            best = max(best, len(texts) / elapsed)
            per_cpu = max(per_cpu, len(texts) / max(cpu, 1e-9))
        assert vectors.shape == (len(texts), fingerprint.dim)
        latencies: list[float] = []
        for query in queries:
            t0 = time.perf_counter()
            embedder.embed([query], role="query")
            latencies.append((time.perf_counter() - t0) * 1000)
        rows.append((name, fingerprint.key(), load_ms, best, per_cpu, latencies))

    print(
        f"{len(texts)} short texts in batches of {args.batch_size} (best of {args.repeat}); "
        f"{len(queries)} single queries"
    )
    print(f"{'engine':<32} {'load ms':>8} {'texts/s':>8} {'texts/cpu-s':>11} {'query p50':>9} {'p95':>7} {'mean':>7}")
    for name, _key, load_ms, best, per_cpu, latencies in rows:
        print(
            f"{name:<32} {load_ms:>8.0f} {best:>8.0f} {per_cpu:>11.0f} {percentile(latencies, 50):>9.2f} "
            f"{percentile(latencies, 95):>7.2f} {statistics.fmean(latencies):>7.2f}"
        )
    if len(rows) == 2:
        (_, _, _, b0, _, l0), (_, _, _, b1, _, l1) = rows
        print(
            f"onnxruntime / numpy: {b0 / b1:.2f}x texts/s, "
            f"{percentile(l1, 50) / percentile(l0, 50):.2f}x faster per query (p50)"
        )
    print(
        f"embedder {rows[0][1]}   cpus {os.cpu_count()}   load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
