"""Resident memory of the daemon's two big parts at N memories: the vector index, then the embedding model.

    python bench/index_rss.py                      # 100,000 vectors in 20 projects, then the ONNX MiniLM
    python bench/index_rss.py --n 10000 --projects 5

One process, like the daemon: imports the service stack, fills a ``VectorIndex`` through ``bulk_load`` with N
random unit vectors (float32 in, as read from the store; spread over projects like a real store), loads the
local MiniLM (onnxruntime when installed), embeds one query and then batches of memory-sized texts the way the
embedding worker does. After each step it prints the resident set (VmRSS) and the kernel's high-water mark
(VmHWM, the peak so far). It does not read SQLite, so the page cache of a real store and the rows of a
running daemon come on top; ``service_bench.py`` and ``recall_latency.py`` measure a real daemon.
Run it with another checkout's ``src`` on ``PYTHONPATH`` to compare layouts in the same minute.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import memmy.service  # noqa: F401  (the daemon's imports are part of its resident set)
from memmy.embed import OnnxMiniLMEmbedder
from memmy.store.vectors import Vector, VectorIndex, VectorMeta, meta_of


def status_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB (Linux)."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values["VmRSS"], values["VmHWM"]


def report(step: str, started: float) -> None:
    """One line: the step, RSS, peak and seconds since the start."""
    rss, peak = status_mib()
    print(f"| {step:<44} | {rss:>8.0f} | {peak:>8.0f} | {time.perf_counter() - started:>6.1f} |", flush=True)


def main() -> None:
    """Fill the index, load the model, embed; print RSS and peak after each step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=100_000, help="vectors in the index (default 100000)")
    parser.add_argument("--projects", type=int, default=20, help="projects the vectors are spread over")
    parser.add_argument("--texts", type=int, default=320, help="memory-sized texts embedded at the end")
    parser.add_argument("--cache-dir", help="where the built ONNX graph is kept (default: a temporary directory)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    print(f"| {'step':<44} | {'RSS MiB':>8} | {'peak MiB':>8} | {'s':>6} |")
    print(f"|{'-' * 46}|{'-' * 10}:|{'-' * 10}:|{'-' * 8}:|")
    report("imports (service stack)", started)
    rng = np.random.default_rng(0)
    index = VectorIndex(384)

    def rows() -> Iterator[tuple[str, str, Vector, VectorMeta]]:
        for first in range(0, args.n, 5000):  # the store is read in batches of 5,000 rows
            batch = rng.standard_normal((min(5000, args.n - first), 384)).astype(np.float32)
            batch /= np.linalg.norm(batch, axis=1, keepdims=True)
            for offset, vector in enumerate(batch):
                number = first + offset
                project = None if number % 10 == 0 else f"project-{number % args.projects}"
                meta: VectorMeta = meta_of("L1", project, None, "claude_code")
                yield f"mem_{number:012d}", "vec_summary", vector, meta

    index.bulk_load(rows())
    arrays = [a for b in index._blocks.values() for a in vars(b).values() if isinstance(a, np.ndarray)]  # noqa: SLF001
    capacity = sum(a.nbytes for a in arrays) / 2**20
    report(f"index loaded ({len(index):,} rows, {capacity:.1f} MiB of row arrays allocated)", started)
    with tempfile.TemporaryDirectory() as temporary:
        embedder = OnnxMiniLMEmbedder(query_cache_size=0, cache_dir=Path(args.cache_dir or temporary))
        embedder.load()
        report("model loaded (onnxruntime)", started)
        embedder.embed(["how do I restart the deploy worker after it crashed in production?"], role="query")
        report("one query embedded", started)
        text = "The deploy worker crashed after the queue drained; restarting it with the new config fixed it. "
        texts = [f"{number}: {text * (1 + number % 4)}" for number in range(args.texts)]
        for first in range(0, len(texts), 32):  # the embedding worker's batches
            embedder.embed(texts[first : first + 32])
        report(f"{len(texts)} memory texts embedded (batches of 32)", started)
    print(f"\nload average (1 min) {load:.2f} at start, {os.getloadavg()[0]:.2f} at end; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
