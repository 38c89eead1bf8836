"""LoCoMo retrieval benchmark: evidence recall@k for fts-only, vector-only and the full recall pipeline.

Every dialogue turn is ingested through MemoryService as one L1 memory (speaker and session date kept, the
conversation as the memory's project). Every question of categories 1-4 is asked with ``scope: project`` so
it only sees its own conversation, and we score:

- turn-level evidence recall@k: |evidence turns in the top k| / |evidence turns|, averaged over questions;
- session-level recall@k: the same over the sessions (``D<session>``) the evidence turns belong to.

Run:  python bench/locomo.py --data ../shared/bench/locomo-dev.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_check import require_local_model

from memmy.config import load_config
from memmy.service import MemoryService
from memmy.service.namespace import Namespace

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo-dev.json"
PIPELINES: dict[str, list[str] | None] = {"fts": ["fts"], "vector": ["vec"], "full": None}
TURN_KS = (1, 5, 10)
SESSION_KS = (5, 10)
_EVIDENCE = re.compile(r"D(\d+):(\d+)")


def normalise_evidence(raw: list[str]) -> list[str]:
    """Repair malformed evidence ids ("D8:6; D9:17", "D:11:26") and drop unusable ones ("D")."""
    found: list[str] = []
    for item in raw:
        for match in _EVIDENCE.finditer(item.replace("D:", "D")):
            found.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return list(dict.fromkeys(found))


def session_of(dia_id: str) -> str:
    """``D3:12`` -> ``D3``."""
    return dia_id.split(":")[0]


@dataclass
class Scores:
    """Accumulated recall values per pipeline and category."""

    turn: dict[tuple[str, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    session: dict[tuple[str, int], list[float]] = field(default_factory=lambda: defaultdict(list))


def ingest(service: MemoryService, sample: dict[str, Any]) -> dict[str, list[str]]:
    """Add every turn of one conversation; return memory id -> dialogue ids."""
    conversation = sample["conversation"]
    project = f"locomo/{sample['sample_id']}"
    ns = Namespace(source="locomo", project_id=project)
    by_memory: dict[str, list[str]] = defaultdict(list)
    sessions = sorted(int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k))
    for number in sessions:
        when = conversation.get(f"session_{number}_date_time", "")
        previous = ""
        for turn in conversation[f"session_{number}"]:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            # Like an agent trace (request + answer), a dialogue turn is stored with the turn it answers.
            content = (f"{previous}\n" if previous else "") + f"{turn['speaker']}: {text}"
            previous = f"{turn['speaker']}: {text}"
            title = f"{turn['speaker']} · session {number} · {when}"
            result = service.add_memory({"content": content, "title": title, "projectId": project}, ns)
            by_memory[result["id"]].append(turn["dia_id"])
    return by_memory


def evaluate(
    service: MemoryService,
    sample: dict[str, Any],
    by_memory: dict[str, list[str]],
    scores: Scores,
    latencies: dict[str, list[float]],
) -> int:
    """Ask every category 1-4 question through each pipeline and record recall; return questions asked."""
    project = f"locomo/{sample['sample_id']}"
    ns = Namespace(source="locomo", project_id=project)
    asked = 0
    for qa in sample["qa"]:
        category = int(qa.get("category", 0))
        evidence = normalise_evidence(qa.get("evidence", []))
        if category not in (1, 2, 3, 4) or not evidence:
            continue
        asked += 1
        for name, channels in PIPELINES.items():
            body: dict[str, Any] = {"query": qa["question"], "limit": max(TURN_KS), "scope": "project"}
            if channels is not None:
                body["channels"] = channels
            started = time.perf_counter()
            result = service.search(body, ns)
            latencies[name].append((time.perf_counter() - started) * 1000)
            retrieved = [dia for memory_id in result["sourceMemoryIds"] for dia in by_memory.get(memory_id, [])]
            for k in TURN_KS:
                top = set(retrieved[:k])
                value = len(top & set(evidence)) / len(evidence)
                for cat in (str(category), "all"):
                    scores.turn[(f"{name}:{cat}", k)].append(value)
            wanted = {session_of(e) for e in evidence}
            for k in SESSION_KS:
                got = {session_of(d) for d in retrieved[:k]}
                value = len(got & wanted) / len(wanted)
                for cat in (str(category), "all"):
                    scores.session[(f"{name}:{cat}", k)].append(value)
    return asked


def print_table(scores: Scores, counts: dict[str, int], latencies: dict[str, list[float]]) -> None:
    """One row per pipeline x category."""
    header = f"{'pipeline':<8} {'cat':>4} {'n':>5} " + " ".join(f"{'turn@' + str(k):>8}" for k in TURN_KS)
    header += " " + " ".join(f"{'sess@' + str(k):>8}" for k in SESSION_KS)
    print(header)
    print("-" * len(header))
    for cat in ("1", "2", "3", "4", "all"):
        for name in PIPELINES:
            key = f"{name}:{cat}"
            row = f"{name:<8} {cat:>4} {counts[cat]:>5} "
            row += " ".join(f"{statistics.fmean(scores.turn[(key, k)]):>8.3f}" for k in TURN_KS)
            row += " " + " ".join(f"{statistics.fmean(scores.session[(key, k)]):>8.3f}" for k in SESSION_KS)
            print(row)
        print()
    for name, values in latencies.items():
        ordered = sorted(values)
        p50 = ordered[len(ordered) // 2]
        p95 = ordered[int(len(ordered) * 0.95) - 1]
        print(f"search latency {name:<7} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms   (n={len(values)})")


def main(argv: list[str] | None = None) -> int:
    """Ingest, ask, print."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON (list of samples)")
    parser.add_argument("--samples", type=int, default=0, help="only the first N conversations (0 = all)")
    parser.add_argument("--home", type=Path, default=None, help="store directory (default: a temporary one)")
    parser.add_argument("--config", type=Path, default=None, help="a config.yaml to tune retrieval settings")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"error: {args.data} not found (pass --data PATH)", file=sys.stderr)
        return 2
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.samples:
        samples = samples[: args.samples]
    home = args.home or Path(tempfile.mkdtemp(prefix="memmy-locomo-"))
    config = load_config(args.config, env={"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
    require_local_model(config.embedding.provider)
    service = MemoryService.open(config)
    service.indexer.load_index()
    scores = Scores()
    latencies: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    started = time.perf_counter()
    mappings = []
    for sample in samples:
        mappings.append(ingest(service, sample))
    service.indexer.drain(timeout_s=3600)
    turns = sum(len(ids) for mapping in mappings for ids in mapping.values())
    print(
        f"ingested {turns} turns from {len(samples)} conversations in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    for sample, mapping in zip(samples, mappings, strict=True):
        evaluate(service, sample, mapping, scores, latencies)
    for (key, k), values in scores.turn.items():
        if k == 1 and key.startswith("full:"):
            counts[key.split(":")[1]] = len(values)
    print(f"LoCoMo evidence recall ({args.data.name}, {len(samples)} conversations, categories 1-4)\n")
    print_table(scores, counts, latencies)
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
