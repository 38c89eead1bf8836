"""Embedding benchmark: load time, batch throughput and single-query latency.

    PYTHONPATH=src python bench/embed_bench.py                      # local numpy MiniLM
    PYTHONPATH=src python bench/embed_bench.py --n 1024 --batch-size 32
    PYTHONPATH=src python bench/embed_bench.py --provider openai_compatible \
        --endpoint http://localhost:11434/v1 --model nomic-embed-text   # key from $MEMMY_EMBED_API_KEY

The texts are synthetic, short (8-20 words), memory-like sentences; the queries are different texts from
the documents and the query cache is bypassed, so latency is a real forward pass.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np

from memmy.embed import LocalMiniLMEmbedder, build_embedder
from memmy.embed.base import Embedder

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
    args = parser.parse_args(argv)

    api_key = os.environ.get("MEMMY_EMBED_API_KEY")
    embedder: Embedder
    if args.provider == "local":
        embedder = LocalMiniLMEmbedder(batch_size=args.batch_size, query_cache_size=0)
    else:
        embedder = build_embedder(
            args.provider,
            model=args.model,
            endpoint=args.endpoint,
            api_key=api_key,
            batch_size=args.batch_size,
        )

    t0 = time.perf_counter()
    if isinstance(embedder, LocalMiniLMEmbedder):
        embedder.load()
    fingerprint = embedder.fingerprint  # probes a remote endpoint once
    load_s = time.perf_counter() - t0
    print(f"embedder      {fingerprint.key()}")
    print(f"load          {load_s * 1000:.0f} ms")

    texts = make_texts(args.n, seed=1)
    embedder.embed(texts[: min(64, len(texts))])  # warm up caches and thread pools
    best = 0.0
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        vectors = embedder.embed(texts)
        elapsed = time.perf_counter() - t0
        best = max(best, len(texts) / elapsed)
    assert vectors.shape == (len(texts), fingerprint.dim)
    print(
        f"throughput    {best:.0f} texts/s  ({len(texts)} short texts, batch {args.batch_size}, best of {args.repeat})"
    )

    queries = make_texts(args.queries, seed=2)
    latencies: list[float] = []
    for query in queries:
        t0 = time.perf_counter()
        embedder.embed([query], role="query")
        latencies.append((time.perf_counter() - t0) * 1000)
    print(
        f"query         p50 {percentile(latencies, 50):.2f} ms  p95 {percentile(latencies, 95):.2f} ms  "
        f"mean {statistics.fmean(latencies):.2f} ms  ({len(queries)} single queries, cache off)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
