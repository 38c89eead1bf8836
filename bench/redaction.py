"""Redaction cost on the import benchmark's synthetic history (Claude Code + Codex transcripts, real formats).

Reads the history with the real adapters, then times (CPU seconds, ``time.process_time``) memmy's redactor over
every text field of every message, next to a baseline measured in the same run: the same loop with no rules
(``str.lower`` only). With ``--detect-secrets DIR`` it also times detect-secrets' default plugins scanning the
same texts line by line (DIR holds the package, e.g. ``pip install --target DIR detect-secrets==1.5.0``).

With ``--structured`` it instead counts, per placement, the secrets of ``tests/secret_corpus.py``'s structured
generator (every kind at line start in a ``tool_use`` input, in ``function.arguments``, in a heredoc, and an AWS
secret next to its key id) that the in-process paths keep, and the benign texts they change; run it with
``PYTHONPATH=<another checkout>/src`` to measure that checkout's redactor with the same cases.

Run:  python bench/redaction.py --turns 20000 [--detect-secrets /tmp/ds]
      python bench/redaction.py --structured [--seed 3]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
build_home = importlib.import_module("import").build_home

from memmy.redact import RedactionReport, Redactor  # noqa: E402
from memmy.sources.adapters import ADAPTERS  # noqa: E402
from memmy.sources.model import ScanStats  # noqa: E402

FIELDS = ("content", "tool_input", "tool_output", "tool_error")


def texts(home: Path) -> list[str]:
    """Every non-empty text field of every message the adapters read."""
    env = {"HOME": str(home)}
    found: list[str] = []
    for name in ("claude_code", "codex"):
        for conversation in ADAPTERS[name].conversations(env, ScanStats()):
            for message in conversation.messages:
                found += [v for f in FIELDS if isinstance(v := getattr(message, f), str) and v]
    return found


def timed(fn: Any, items: list[str]) -> float:
    """CPU seconds for ``fn`` over ``items``."""
    started = time.process_time()
    for item in items:
        fn(item)
    return time.process_time() - started


def detect_secrets_scanner(path: str) -> Any:
    """A function that runs detect-secrets' default plugins over each line of a text."""
    sys.path.insert(0, path)
    from detect_secrets.core.scan import scan_line  # type: ignore[import-not-found]
    from detect_secrets.settings import default_settings  # type: ignore[import-not-found]

    context = default_settings()
    context.__enter__()

    def scan(text: str) -> None:
        for line in text.splitlines():
            list(scan_line(line))

    return scan


def structured(seed: int) -> None:
    """Print, per placement, how many generated secrets survive the in-process paths and how many benign texts
    are changed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.secret_corpus import benign_cases, leaks, stored_in_process, structured_cases

    redactor = Redactor()
    kept: dict[str, list[int]] = {}
    for case in structured_cases(seed):
        counts = kept.setdefault(case.context, [0, 0])
        counts[0] += any(leaks(case.needle, text) for text in stored_in_process(redactor, case))
        counts[1] += 1
    for context, (missed, total) in kept.items():
        print(f"{context:20s} {missed:4d} of {total:4d} secrets kept")
    changed = sum(
        redactor.redact(case.text) != case.text
        or (case.value is not None and redactor.redact_json(case.value) != case.value)
        for case in benign_cases()
    )
    print(f"{'benign':20s} {changed:4d} of {len(benign_cases()):4d} placements changed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--per-conversation", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--detect-secrets", default="")
    parser.add_argument("--structured", action="store_true")
    args = parser.parse_args()
    if args.structured:
        structured(args.seed)
        return
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        build_home(home, args.turns, args.per_conversation, args.seed)
        items = texts(home)
    chars = sum(len(t) for t in items)
    print(f"load average {os.getloadavg()[0]:.1f}; {len(items):,} texts, {chars / 1e6:.1f} M characters")
    baseline = timed(str.lower, items)
    print(f"baseline (lower only):      {baseline:6.2f} CPU s")
    redactor = Redactor()
    report = RedactionReport()
    spent = timed(lambda text: redactor.redact(text, report), items)
    rate = args.turns / spent if spent else float("inf")
    print(f"memmy redactor:             {spent:6.2f} CPU s = {rate:,.0f} turns per CPU second ({report.total} hits)")
    if args.detect_secrets:
        scan = detect_secrets_scanner(args.detect_secrets)
        sample = items[: max(1, len(items) // 10)]
        ds = timed(scan, sample) * len(items) / len(sample)
        print(f"detect-secrets 1.5.0 (est): {ds:6.2f} CPU s = {args.turns / ds:,.0f} turns per CPU second")


if __name__ == "__main__":
    main()
