"""Where a local model's cosines of unrelated text pairs lie: the anchors of ``memmy/embed/scale.py``.

    python bench/similarity_scale.py                                  # both local models, sentences of docs/
    python bench/similarity_scale.py --data DIR_OR_FILE --sentences 400

Takes sentences (40-200 characters, no tables or code) from the Markdown files under ``--data`` (default: this
checkout's ``docs/``), shuffles them with a fixed seed, keeps ``--sentences`` of them, embeds each as a query and as
a passage, and prints, at the shares of ``ANCHOR_SHARES``, the cosine of query i against passage j (i != j:
different sentences; the ``query-passage`` anchors) and of passage i against passage j (the ``texts`` anchors),
for all-MiniLM-L6-v2 and for multilingual-e5-small (when ``memmy[multilingual]`` is installed), next to the
anchors memmy ships. The turn-start gates compare a model's query-against-memory cosine with MiniLM's
thresholds after mapping it through the first anchors (quantile matching), and evolution and dream compare two
stored texts through the second, so that each lets through the same share of unrelated pairs whatever the model.
No recall set is read: the sentences are the docs, which no figure is measured on.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

from memmy.embed import build_embedder
from memmy.embed.scale import ANCHOR_SHARES, E5_SCALE, E5_TEXTS_SCALE, MINILM_ANCHORS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = {
    "all-MiniLM-L6-v2": (MINILM_ANCHORS, MINILM_ANCHORS),
    "multilingual-e5-small": (E5_SCALE.anchors, E5_TEXTS_SCALE.anchors),
}


def sentences(data: Path, count: int, seed: int) -> list[str]:
    """``count`` prose sentences of the Markdown under ``data`` (a file or a directory), shuffled with ``seed``."""
    files = [data] if data.is_file() else sorted(data.rglob("*.md"))
    found: list[str] = []
    for path in files:
        for piece in re.split(r"(?<=[.!?])\s+", path.read_text(encoding="utf-8")):
            text = " ".join(piece.split())
            if 40 < len(text) < 200 and "|" not in text and "`" not in text:
                found.append(text)
    random.Random(seed).shuffle(found)
    return found[:count]


def anchors(model: str, texts: list[str]) -> tuple[list[float], list[float]]:
    """The model's cosines at ``ANCHOR_SHARES`` of query i against passage j and of passage i against passage j
    (i != j)."""
    embedder = build_embedder("local", model)
    queries = np.asarray(embedder.embed(texts, role="query"), dtype=np.float32)
    passages = np.asarray(embedder.embed(texts, role="document"), dtype=np.float32)
    different = ~np.eye(len(texts), dtype=bool)
    found = []
    for left in (queries, passages):
        pairs = (left @ passages.T)[different]
        found.append([round(float(np.quantile(pairs, share)), 3) for share in ANCHOR_SHARES])
    return found[0], found[1]


def main(argv: list[str] | None = None) -> int:
    """Print each local model's anchors next to the shipped ones."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "docs", help="a Markdown file or a directory of them")
    parser.add_argument("--sentences", type=int, default=400, help="sentences kept (default 400)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"error: {args.data} not found (pass --data PATH)", file=sys.stderr)
        return 2
    texts = sentences(args.data, args.sentences, args.seed)
    if len(texts) < 20:
        print(f"error: only {len(texts)} sentences under {args.data}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    print(f"{len(texts)} sentences of {args.data}, {len(texts) * (len(texts) - 1):,} pairs of each kind")
    print(f"shares   {' '.join(f'{s:>6}' for s in ANCHOR_SHARES)}")
    for model, shipped in SHIPPED.items():
        try:
            measured = anchors(model, texts)
        except Exception as error:  # noqa: BLE001 - the optional model may be missing
            print(f"{model}: skipped ({error})")
            continue
        print(model)
        for kind, now, ships in zip(("query-passage", "texts"), measured, shipped, strict=True):
            print(f"  {kind:<14} now    {' '.join(f'{x:6.3f}' for x in now)}")
            print(f"  {'':<14} memmy  {' '.join(f'{x:6.3f}' for x in ships or ())}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{time.perf_counter() - started:.1f} s   load average {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
