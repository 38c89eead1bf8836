"""Paired turn-start variants: every prompt runs under every variant in one process, so load hits them alike.

    python bench/recall_latency.py --n 100000 --fast-build 100000 --home DIR --skip-http   # builds a store once
    python bench/turn_variants.py --db DIR/store-100000/memory.sqlite --turns 200

On a shared machine whole runs of ``recall_latency.py`` minutes apart differ by more than most code changes
(the same code gave p95 36 and 42 ms in consecutive runs). Here one process times ``MemoryService.start_turn``
for each prompt under each variant in turn, rotating which variant goes first, each variant in a session of
its own (a session's recent turns are excluded from its recall). A variant swaps one part at run time and
changes nothing else:

- ``default``: the code as it is;
- ``pattern-sum-of-pools``: the pattern channel reads as many hits as ``fts`` (the sum of the layers' pools, the
  behaviour before its limit became one layer's pool);
- ``no-token-channels``: neither ``pattern`` nor ``structural`` runs (what those two cost, an upper bound);
- ``embed-1-thread``: the query is embedded by an onnxruntime session with one intra-op thread, not two;
- ``structural-before``: the structural channel as it was before 2026-12-04 (error signatures over the whole
  prompt, one-word paths, every match ranked by BM25, not only the newest ``RANKED_TOKEN_POOL``);
- ``selective-before``: the large store's selective terms as before 2026-12-04's fourth session (a term no document
  holds took one of the 8 places as the "rarest", a CJK run counted its documents, not each bigram's);
- ``checkpoint-in-commit``: no checkpoint thread; the commit that takes the WAL past SQLite's default 1,000 pages
  copies it back, as before 2026-12-04 (compare the max, not the median).

Prints p50 / p95 / mean / max per variant, each variant's median paired difference to the first one, and the load
average. The store is copied first (a measurement never changes it); the vector index is loaded once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import memmy.recall.pipeline as pipeline_module
import memmy.recall.query as query_module
import memmy.store.memories as memories_module
from memmy.capture.trace import error_signatures
from memmy.commands.turn_requests import OpenSession, StartTurn
from memmy.embed import OnnxMiniLMEmbedder
from memmy.namespace import Namespace
from memmy.recall.channels import ChannelHit, pattern_channel
from memmy.store.checkpoints import SAFETY_NET_PAGES
from memmy.store.db import DEFAULT_CHECKPOINT_PAGES, Database

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recall_latency import BLAS_ENV, SOURCE, copy_db, realistic_prompts  # noqa: E402
from service_bench import open_service  # noqa: E402

VARIANTS = (
    "default",
    "pattern-sum-of-pools",
    "no-token-channels",
    "embed-1-thread",
    "structural-before",
    "checkpoint-in-commit",
    "selective-before",
)


def _pattern_sum_of_pools(
    repo: Any, terms: Sequence[str], flt: Any, limit: int, loaded: Any = None
) -> list[ChannelHit]:
    return pattern_channel(repo, terms, flt, limit * 4, loaded)  # turn_start's 4 layers' pools: what fts reads


def _structural_fragments_before(text: str, limit: int = 6) -> list[str]:
    found: dict[str, None] = dict.fromkeys(error_signatures(text, limit=4))
    for pattern in (query_module._ERROR_CODE, query_module._PATH):  # noqa: SLF001
        for match in pattern.finditer(text):
            found.setdefault(match.group(0), None)
    return list(found)[:limit]


def _selective_terms_before(repo: Any, terms: Sequence[str]) -> list[str]:
    total = repo._term_stats.total(repo.db)  # noqa: SLF001
    if total < repo.selective_min_docs or len(terms) <= 1:
        return list(terms)
    counts = {term: repo._term_stats.doc_count(repo.db, term) for term in terms}  # noqa: SLF001
    ranked = sorted(terms, key=lambda t: counts[t])
    share = memories_module.COMMON_TERM_SHARE * total
    chosen = [t for t in ranked[: memories_module.MAX_SELECTIVE_TERMS] if counts[t] <= share or t in ranked[:2]]
    keep: set[str] = set()
    scored = 0
    for term in chosen:
        if keep and scored + counts[term] > repo.max_scored_matches:
            break
        keep.add(term)
        scored += counts[term]
    return [t for t in terms if t in keep]


class Switch:
    """Puts one variant in place (and takes the previous one out)."""

    def __init__(self, embedder: OnnxMiniLMEmbedder, one_thread: OnnxMiniLMEmbedder, db: Database) -> None:
        self.embedder = embedder
        self.db = db
        self.checkpoints = db.checkpoint_in_background()
        self.sessions = {"two": embedder._model, "one": one_thread._model}  # noqa: SLF001
        self.token_work: Callable[..., bool] = pipeline_module.RecallEngine.__dict__["_token_work"]
        self.pattern = pipeline_module.pattern_channel
        self.fragments = query_module.structural_fragments
        self.pool = memories_module.RANKED_TOKEN_POOL
        self.selective: Callable[..., list[str]] = memories_module.MemoryRepository.__dict__["selective_terms"]

    def apply(self, variant: str) -> None:
        """Make ``variant`` the running code."""
        engine = pipeline_module.RecallEngine
        self.embedder._model = self.sessions["one" if variant == "embed-1-thread" else "two"]  # noqa: SLF001
        none: Callable[..., bool] = staticmethod(lambda request, layers: False)
        engine._token_work = none if variant == "no-token-channels" else self.token_work  # type: ignore[method-assign]  # noqa: SLF001
        pipeline_module.pattern_channel = self.pattern
        if variant == "pattern-sum-of-pools":
            pipeline_module.pattern_channel = _pattern_sum_of_pools
        before = variant == "structural-before"
        query_module.structural_fragments = _structural_fragments_before if before else self.fragments
        memories_module.RANKED_TOKEN_POOL = memories_module.MAX_FTS_WINDOW if before else self.pool
        repository = memories_module.MemoryRepository
        repository.selective_terms = _selective_terms_before if variant == "selective-before" else self.selective  # type: ignore[method-assign,assignment]
        if variant == "checkpoint-in-commit":
            self.checkpoints.stop()
            self.db.conn.execute(f"PRAGMA wal_autocheckpoint={DEFAULT_CHECKPOINT_PAGES}")
        elif not self.checkpoints.running:
            self.checkpoints.start()
            self.db.conn.execute(f"PRAGMA wal_autocheckpoint={SAFETY_NET_PAGES}")


def main(argv: Sequence[str] | None = None) -> None:
    """Time every prompt under every variant; print the paired figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="a built memory.sqlite (copied, never changed)")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--models", type=Path, help="built onnx graphs (default: DIR/models beside DIR/store-N)")
    args = parser.parse_args(argv)
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":  # numpy reads these when it loads BLAS: re-execute
        os.environ.update(dict.fromkeys(BLAS_ENV, "1"))
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]])
    if not args.db.is_file():
        raise SystemExit(f"{args.db}: no such store (build one with recall_latency.py --home DIR, see --help)")
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    work = Path(tempfile.mkdtemp(prefix="memmy-variants-"))
    try:
        db = work / "memory.sqlite"
        copy_db(args.db, db)
        cache = args.models or args.db.resolve().parent.parent / "models"
        embedder = OnnxMiniLMEmbedder(query_cache_size=0, cache_dir=cache)
        one_thread = OnnxMiniLMEmbedder(query_cache_size=0, cache_dir=cache, threads=1)
        embedder.load()
        one_thread.load()
        service = open_service(work / "env", db, embedder)
        switch = Switch(embedder, one_thread, service.db)
        ns = Namespace(source=SOURCE)
        sessions = {
            v: service.open_session(OpenSession.from_json({"source": SOURCE}), ns)["sessionId"] for v in variants
        }
        prompts = realistic_prompts(args.turns + args.warmup, args.seed, None)
        times: dict[str, list[float]] = {v: [] for v in variants}
        load_start = os.getloadavg()[0]
        try:
            for number, (_kind, prompt) in enumerate(prompts):
                shift = number % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    switch.apply(variant)
                    body = {"sessionId": sessions[variant], "turnId": f"t{number}-{variant}", "query": prompt}
                    clock = time.perf_counter()
                    service.start_turn(StartTurn.from_json(body), ns)
                    if number >= args.warmup:
                        times[variant].append((time.perf_counter() - clock) * 1000)
        finally:
            switch.apply("default")
            service.close()
        print(f"{len(times[variants[0]])} prompts x {len(variants)} variants, store {args.db}")
        print(f"{'variant':22s} {'p50 ms':>7s} {'p95 ms':>7s} {'mean ms':>8s} {'max ms':>7s}  paired vs {variants[0]}")
        base = np.array(times[variants[0]])
        for variant in variants:
            xs = np.array(times[variant])
            p95_gap = np.percentile(xs, 95) - np.percentile(base, 95)
            paired = "" if variant == variants[0] else f"median {np.median(xs - base):+.2f} ms, p95 {p95_gap:+.2f} ms"
            print(
                f"{variant:22s} {np.percentile(xs, 50):7.1f} {np.percentile(xs, 95):7.1f} {xs.mean():8.1f} "
                f"{xs.max():7.1f}  {paired}"
            )
        print(f"load average (1 min) at start {load_start:.2f}, at end {os.getloadavg()[0]:.2f}; 2 cores shared")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
