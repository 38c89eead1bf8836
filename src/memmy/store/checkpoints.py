"""WAL checkpoints on a thread of their own, so that no request's commit pays for copying the WAL back.

By default SQLite checkpoints inside the commit that takes the write-ahead log past ``wal_autocheckpoint`` pages:
that commit copies every logged page back into the database file and syncs it before it returns. On the daemon that
commit is whichever request happened to cross the threshold: on the 100k bench store, the turn start whose commit
crossed it first after the store file was copied took 140-180 ms instead of 25 (the sync wrote the copy's pages
out), and any such commit waits for that sync, however long the disk takes. SQLite runs a checkpoint beside readers and
writers, on any connection, so the daemon hands the work to :class:`BackgroundCheckpoints`: a thread with its own
connection that runs a ``PASSIVE`` checkpoint after the store has committed, at most once every ``interval_s``
seconds, while the shared connection's automatic checkpoint is raised to a safety net (:data:`SAFETY_NET_PAGES`)
that only a stalled thread would let the log reach. During a bulk run (a history import, ``Database.bulk_writes``)
the thread stands aside: the import's own commits checkpoint every 10,000 pages, as they do without it, so the index
pages it rewrites batch after batch are copied back once per run of batches, not every few seconds. Processes
without the thread (the CLI, tests, benches that do not start it) keep SQLite's default.

SQLite 3.40 has no way to ask how many pages the log holds without checkpointing it, so the thread goes by the
store's commit count instead: nothing committed, nothing to do.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("memmy.store")

#: The shared connection's automatic checkpoint while the thread runs (~80 MiB of log): reached only if it stalls.
SAFETY_NET_PAGES = 20_000
#: How often the thread looks for new commits (seconds): the log then holds at most this long's writes.
CHECKPOINT_INTERVAL_S = 2.0


class BackgroundCheckpoints:
    """Checkpoint the WAL of the store at ``path`` on a thread of its own whenever ``commits()`` has grown since
    the last look, at most every ``interval_s`` seconds, and not while ``bulk()`` says a bulk run writes.
    :meth:`stop` ends the thread and closes its connection."""

    def __init__(
        self,
        path: Path,
        commits: Callable[[], int],
        bulk: Callable[[], bool] = lambda: False,
        interval_s: float = CHECKPOINT_INTERVAL_S,
    ) -> None:
        self.path = path
        self.commits = commits
        self.bulk = bulk
        self.interval_s = interval_s
        #: Checkpoints run so far (for tests and diagnostics).
        self.runs = 0
        self._seen = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None

    def start(self) -> None:
        """Open the thread's connection and start the thread (once)."""
        if self._thread is not None:
            return
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=5.0)
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="memmy-checkpoints", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (a checkpoint in progress finishes first) and close its connection."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except sqlite3.Error as exc:  # a full disk, a lock held too long: retried after the next commit
                log.warning("background checkpoint of %s failed: %s", self.path, exc)

    def run_once(self) -> bool:
        """Checkpoint (``PASSIVE``: it never waits for readers or writers) if anything was committed since the
        last look and no bulk run is writing; True when one ran."""
        assert self._conn is not None
        commits = self.commits()
        if commits == self._seen or self.bulk():
            return False
        self._seen = commits  # a checkpoint that fails is tried again after the next commit, not every look
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.runs += 1
        return True
