"""Store start-up checks: what the daemon's open costs on an existing store of N memories (file checks, bounded
``PRAGMA quick_check``, the FTS5 ``integrity-check``), next to a baseline measured in the same run (opening the
same file with plain ``sqlite3`` and counting rows), plus the full-text rebuild ``doctor --repair`` does.

Run:  python bench/store_check.py --n 20000
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import unique_memories  # noqa: E402

from memmy.domain import Memory, content_hash, new_id  # noqa: E402
from memmy.store.db import Database, utc_now  # noqa: E402
from memmy.store.integrity import fts_problem, quick_check, rebuild_fts  # noqa: E402
from memmy.store.memories import MemoryRepository  # noqa: E402


def build(path: Path, n: int, seed: int) -> None:
    """A store with ``n`` L1 memories (text and FTS only: no vectors are needed for these checks)."""
    db = Database(path)
    repo = MemoryRepository(db)
    stream = unique_memories(seed)
    with db.transaction():
        for _ in range(n):
            body = next(stream)
            now = utc_now()
            repo.insert(
                Memory(
                    id=new_id("trace"),
                    layer="L1",
                    content=body["content"],
                    tags=body["tags"],
                    user_id="bench",
                    content_hash=content_hash(body["content"]),
                    properties={},
                    created_at=now,
                    updated_at=now,
                    valid_from=now,
                ),
                source="bench",
            )
    db.close()


def timed(label: str, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    elapsed = (time.perf_counter() - start) * 1000
    print(f"{label:<44} {elapsed:9.1f} ms")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000, help="memories in the store (default 20000)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory.sqlite"
        build(path, args.n, args.seed)
        size = path.stat().st_size
        print(f"store: {args.n} memories, {size / 1e6:.1f} MB; load average {os.getloadavg()}")

        def baseline() -> None:
            conn = sqlite3.connect(path)
            conn.execute("SELECT count(*) FROM memories").fetchone()
            conn.close()

        def open_store() -> None:
            Database(path).close()

        def only_quick_check() -> None:
            conn = sqlite3.connect(path, isolation_level=None)
            assert quick_check(conn, None) == []
            conn.close()

        def only_fts_check() -> None:
            conn = sqlite3.connect(path, isolation_level=None)
            assert fts_problem(conn, None) is None
            conn.close()

        def rebuild() -> None:
            conn = sqlite3.connect(path, isolation_level=None)
            rebuild_fts(conn)
            conn.close()

        timed("baseline: sqlite3 open + count(*)", baseline)
        timed("Database open (checks + migrations)", open_store)
        timed("PRAGMA quick_check alone", only_quick_check)
        timed("FTS5 integrity-check alone", only_fts_check)
        timed("rebuild_fts (doctor --repair)", rebuild)
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
