"""Where a hook's ``turns/start`` spends its time in the daemon, stage by stage, with the recall's own share.

    python bench/recall_latency.py --n 10000 --fast-build 3000 --home /tmp/r10k --skip-http   # builds a store once
    python bench/turn_stages.py --db /tmp/r10k/store-10000/memory.sqlite --turns 100
    python bench/turn_stages.py --db ... --skip-http --llm-base-url http://127.0.0.1:8765/v1 --llm-local --rewrite
        # the LLM query rewrite at turn start (llmInHookPath: true), its call timed as its own stage

The store is copied twice (a measurement never changes it). One copy is opened in-process and each prompt is
sent through the very calls the HTTP route makes for the hook's request (``adapterId`` + ``requestId`` set, so
the idempotency transaction wraps the turn): body parsing, the ``StartTurn`` command, the namespace, the
idempotency lookup and transaction, ``MemoryService.start_turn`` (redaction, session lookup, recent-turn
exclusion, the recall, episode routing, the raw-turn row, the session touch, the stored answer) and the JSON
encoding of the answer. Every stage is timed with ``perf_counter`` around the real function (a wrapper, no
change to the code measured). The other copy is served by a real daemon (``python -m memmy serve``) and the
same kind of request is sent over a fresh connection per turn (as the hook does): the difference between its
p50 and the in-process p50 is the HTTP stack's share (uvicorn/h11, Starlette, the guard middleware, the thread
pool hop). Prompts are ``bench/corpus.py``'s, interleaved between the two paths so both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memmy.commands.turn_requests import OpenSession, StartTurn
from memmy.namespace import Namespace
from memmy.server.app import Api
from memmy.server.bodies import parse_body
from memmy.server.middleware import json_dumps
from memmy.service import MemoryService
from memmy.service import recall as recall_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import make_queries  # noqa: E402
from hook import percentile  # noqa: E402
from service_bench import BENCH_TOKEN, Daemon, open_service  # noqa: E402

SOURCE = "claude_code"
#: Stage rows in print order: (label, key); keys are filled by the probes below.
ROWS = (
    ("parse body (JSON, depth, surrogates)", "parse"),
    ("StartTurn command + namespace", "command"),
    ("idempotency lookup", "idem_lookup"),
    ("command redaction", "redact"),
    ("session lookup + recent-turn exclusion", "session"),
    ("recall: pipeline (embed, channels, load, fuse, select)", "pipeline"),
    ("recall: LLM query rewrite (the model call)", "rewrite"),
    ("recall: scope, query prep, fallback cap, render", "render"),
    ("recall: log rows (api_logs, recall_events)", "recall_log"),
    ("episode routing", "route"),
    ("raw-turn row + session touch", "record"),
    ("stored answers (idempotency rows, 2x)", "idem_store"),
    ("BEGIN/COMMIT and the rest of start_turn", "txn"),
    ("JSON encoding of the answer", "encode"),
)


class Probes:
    """Wraps the measured functions; ``take()`` returns one turn's stage times (ms) and resets."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, key: str) -> None:
        """Time every call of ``owner.name`` into ``key`` (an instance attribute shadows a method)."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.current[key] = self.current.get(key, 0.0) + (time.perf_counter() - started) * 1000

        setattr(owner, name, timed)
        if isinstance(owner, type) or name not in vars(owner):
            self._undo.append(lambda: setattr(owner, name, original))
        else:
            self._undo.append(lambda: delattr(owner, name))

    def take(self) -> dict[str, float]:
        """This turn's stages."""
        stages, self.current = self.current, {}
        return stages

    def close(self) -> None:
        """Put every wrapped function back."""
        for undo in reversed(self._undo):
            undo()


def probe_service(service: MemoryService, probes: Probes) -> None:
    """Wrap the stages of one turn start (the functions ``start_turn`` and the route call)."""
    ops = service.turn_ops
    probes.wrap(StartTurn, "redacted", "redact")
    probes.wrap(ops, "_open_session_row", "session")
    probes.wrap(ops.sessions, "recent_raw_turn_ids", "session")
    probes.wrap(ops.writer.memories, "trace_ids_of_raw_turns", "session")
    probes.wrap(service.recall_ops.engine, "recall", "pipeline")
    probes.wrap(recall_module, "rewrite_queries", "rewrite")
    probes.wrap(service.recall_ops, "run", "recall_run")
    probes.wrap(service.logs, "api_call", "recall_log")
    probes.wrap(service.logs, "recall_event", "recall_log")
    probes.wrap(ops.episode_ops, "route_turn", "route")
    probes.wrap(ops, "_record_start", "record")
    probes.wrap(ops.sessions, "touch", "record")
    probes.wrap(service.logs, "store_idempotent_response", "idem_store")
    probes.wrap(service.logs, "idempotent_response", "idem_lookup")
    probes.wrap(service.turn_ops, "start_turn", "start_turn")


def in_process_turn(api: Api, service: MemoryService, probes: Probes, body: dict[str, Any]) -> dict[str, float]:
    """One hook-shaped turn start through the route's calls; returns its stages (ms) and ``total``."""
    raw = json.dumps(body).encode()
    started = time.perf_counter()
    clock = started
    parsed = parse_body(raw)
    parse_ms = (time.perf_counter() - clock) * 1000
    clock = time.perf_counter()
    command = StartTurn.from_request(parsed, {}, {})
    ns = Namespace.from_headers({"x-memmy-source": SOURCE}, service.config.user_id)
    command_ms = (time.perf_counter() - clock) * 1000
    clock = time.perf_counter()
    answer = api._idempotent("turn.start", parsed, service.start_turn, (command, ns))  # noqa: SLF001 - the route's call
    idempotent_ms = (time.perf_counter() - clock) * 1000
    clock = time.perf_counter()
    json_dumps(answer)
    encode_ms = (time.perf_counter() - clock) * 1000
    total = (time.perf_counter() - started) * 1000
    stages = probes.take()
    run = stages.pop("recall_run", 0.0)
    stages["render"] = run - stages.get("pipeline", 0.0) - stages.get("recall_log", 0.0) - stages.get("rewrite", 0.0)
    stages.pop("start_turn", None)
    inner = ("redact", "session", "pipeline", "rewrite", "render", "recall_log", "route")
    known = sum(stages.get(k, 0.0) for k in inner)
    known += stages.get("record", 0.0)
    stages["txn"] = idempotent_ms - stages.get("idem_lookup", 0.0) - stages.get("idem_store", 0.0) - known
    stages.update(parse=parse_ms, command=command_ms, encode=encode_ms, total=total)
    return stages


def http_turn(port: int, body: dict[str, Any]) -> float:
    """The hook's request over a fresh connection (``Connection: close``); returns the round trip (ms)."""
    data = json.dumps(body).encode()
    head = (
        f"POST /api/v1/turns/start HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: */*\r\n"
        f"content-type: application/json\r\nx-memmy-source: {SOURCE}\r\nauthorization: Bearer {BENCH_TOKEN}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + data)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    elapsed = (time.perf_counter() - started) * 1000
    if not reply.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"turns/start failed: {reply[:300]!r}")
    return elapsed


def write_llm_config(home: Path, args: argparse.Namespace) -> None:
    """The in-process service's config: the evolution slot on ``--llm-base-url``, the rewrite on the hook path."""
    slot = f"    provider: openai_compatible\n    endpoint: {args.llm_base_url}\n    model: local\n    maxRetries: 0\n"
    if args.llm_local:
        slot += "    jsonMode: false\n    repeatPenalty: 1.3\n    maxTokens: 96\n"
    retrieval = f"      llmInHookPath: true\n      llmTimeoutMs: {args.llm_timeout_ms}\n      llmFilterEnabled: false\n"
    (home / ".memmy").mkdir(parents=True, exist_ok=True)
    (home / ".memmy" / "config.yaml").write_text(
        f"memmyMemory:\n  evolution:\n{slot}  algorithm:\n    enableQueryRewrite: {str(args.rewrite).lower()}\n"
        f"    retrieval:\n{retrieval}",
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> int:
    """Copy the store, time hook-shaped turn starts in-process (per stage) and over HTTP, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True, help="a built memory.sqlite (copied, never changed)")
    parser.add_argument("--turns", type=int, default=100, help="timed turn starts per path (default 100)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--skip-http", action="store_true", help="in-process stages only")
    parser.add_argument("--llm-base-url", help="an OpenAI-compatible endpoint as the evolution model (in-process)")
    parser.add_argument("--llm-local", action="store_true", help="a small local model: no JSON mode, repeat penalty")
    parser.add_argument("--rewrite", action="store_true", help="with --llm-base-url: the query rewrite at turn start")
    parser.add_argument("--llm-timeout-ms", type=int, default=2000, help="retrieval.llmTimeoutMs (default 2000)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="memmy-turn-stages-"))
    service: MemoryService | None = None
    daemon: Daemon | None = None
    try:
        for name in ("inproc", "daemon"):
            (work / name).mkdir()
            shutil.copyfile(args.db, work / name / "memory.sqlite")
        home = work / "home"
        if args.llm_base_url:
            write_llm_config(home, args)
        from memmy.embed import OnnxMiniLMEmbedder

        embedder = OnnxMiniLMEmbedder(query_cache_size=0, cache_dir=work / "models")
        service = open_service(home, work / "inproc" / "memory.sqlite", embedder)
        api = Api(service, None)
        ns = Namespace.from_headers({"x-memmy-source": SOURCE}, service.config.user_id)
        service.open_session(OpenSession.from_json({"sessionId": "stages", "source": SOURCE}), ns)
        if not args.skip_http:
            daemon = Daemon(work / "daemon-home", work / "daemon" / "memory.sqlite")
            daemon.start()
            with daemon.client() as client:
                client.post("/api/v1/sessions/open", json={"sessionId": "stages", "source": SOURCE}).raise_for_status()
        prompts = [q for _, q in make_queries(args.turns + args.warmup, 13)]
        probes = Probes()
        probe_service(service, probes)
        rows: list[dict[str, float]] = []
        http: list[float] = []
        load_before = os.getloadavg()
        for number, prompt in enumerate(prompts):
            turn = f"t{number}"
            body = {
                "sessionId": "stages",
                "turnId": turn,
                "query": prompt,
                "source": SOURCE,
                "adapterId": f"memmy-{SOURCE}-hook",
                "requestId": f"{SOURCE}-start:{turn}",
            }
            stages = in_process_turn(api, service, probes, body)
            elapsed = http_turn(daemon.port, body) if daemon is not None else None
            if number >= args.warmup:
                rows.append(stages)
                if elapsed is not None:
                    http.append(elapsed)
        load_after = os.getloadavg()
        probes.close()
    finally:
        if service is not None:
            service.close()
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    totals = [r["total"] for r in rows]
    print(f"turns/start stages, {len(rows)} hook-shaped turns on a copy of {args.db} (ms; p50/p95 of each stage alone)")
    print("| stage | p50 | p95 | share of the p50 total |\n|---|---:|---:|---:|")
    p50_total = percentile(totals, 0.5)
    for label, key in ROWS:
        values = [r.get(key, 0.0) for r in rows]
        print(f"| {label} | {percentile(values, 0.5):.2f} | {percentile(values, 0.95):.2f} | "
              f"{100 * percentile(values, 0.5) / p50_total:.0f} % |")
    recall = [sum(r.get(k, 0.0) for k in ("pipeline", "rewrite", "render", "recall_log")) for r in rows]
    rest = [t - c for t, c in zip(totals, recall, strict=True)]
    print(f"| **in-process total** | {p50_total:.2f} | {percentile(totals, 0.95):.2f} | 100 % |")
    print(f"| recall (RecallOps.run) | {percentile(recall, 0.5):.2f} | {percentile(recall, 0.95):.2f} | "
          f"{100 * percentile(recall, 0.5) / p50_total:.0f} % |")
    print(f"| everything but the recall | {percentile(rest, 0.5):.2f} | {percentile(rest, 0.95):.2f} | "
          f"{100 * percentile(rest, 0.5) / p50_total:.0f} % |")
    if http:
        fresh = f"{percentile(http, 0.5):.2f} | {percentile(http, 0.95):.2f}"
        print(f"| over HTTP, fresh connection per turn | {fresh} | |")
        print(f"| HTTP stack share (HTTP p50 - in-process p50) | {percentile(http, 0.5) - p50_total:.2f} | | |")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; cpus {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
