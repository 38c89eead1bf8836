"""The laptop's write-behind queue: turns captured while the memory server is unreachable wait here, on disk, and
are delivered once, in order, when it answers again (by the next Stop hook and by ``memmy-memory sync``).

One file per turn under ``$MEMMY_HOME/outbox``: written to a temporary name, fsynced, renamed into place and the
folder fsynced, so a kill at any moment leaves either the whole entry or none. Names sort in capture order
(nanosecond clock, process id, a counter). An entry is removed only after the server acknowledged it; a kill
between the answer and the removal sends it again, and its ``requestId`` (the daemon's idempotency key) makes the
repeat a no-op. One deliverer at a time (an ``flock`` on ``.lock``); an entry the server refuses for good (a 4xx
other than 401/403/408/429) moves to ``failed/`` instead of blocking the queue. Standard library only (hooks)."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol


class _Answer(Protocol):
    def result(self) -> tuple[int, bytes]: ...


class Send(Protocol):
    """How one request is sent (the hook runtime's ``send_request``)."""

    def __call__(
        self,
        url: str,
        method: str,
        path: str,
        headers: dict[str, str],
        data: bytes | None,
        timeout: float,
        *,
        ca: str | None = None,
    ) -> _Answer: ...


#: Statuses that mean "not now" (keep the entry, stop delivering): auth being fixed, overload, server errors.
RETRY_LATER = frozenset({401, 403, 408, 425, 429})
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Delivery:
    """What one delivery pass did."""

    delivered: int
    left: int
    failed: int
    error: str | None = None


class Outbox:
    """The queue folder."""

    def __init__(self, directory: str) -> None:
        self.dir = directory

    @classmethod
    def default(cls, home: str) -> Outbox:
        """``<home>/outbox`` (``home``: the memmy home, ``$MEMMY_HOME``)."""
        return cls(os.path.join(home, "outbox"))

    def pending(self) -> list[str]:
        """Entry file names, oldest first."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(".json") and not n.startswith("."))

    def put(self, requests: list[dict[str, Any]], headers: dict[str, str]) -> str:
        """Append one entry (the requests of one turn, sent in order, and the caller's headers without the token);
        durable when this returns. Returns the entry's name."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        name = f"{time.time_ns():020d}-{os.getpid():08d}-{next(_COUNTER):06d}.json"
        kept = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "x-api-key")}
        data = json.dumps({"requests": requests, "headers": kept, "queuedAt": time.time()}).encode("utf-8")
        tmp = os.path.join(self.dir, "." + name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(self.dir, name))
        _fsync_dir(self.dir)
        return name

    def deliver(self, config: dict[str, Any], deadline_s: float, send: Send) -> Delivery:
        """Send the entries oldest first until the queue is empty, the server stops answering, or ``deadline_s``
        seconds pass; ``config`` is the hook's :func:`~memmy.hook.runtime.settings`, ``send`` its
        :func:`~memmy.hook.runtime.send_request` (passed in: the runtime imports this module)."""
        deadline = time.monotonic() + deadline_s
        delivered = failed = 0
        with self._lock() as held:
            if not held:
                return Delivery(0, len(self.pending()), 0, "another process is delivering the queue")
            for name in self.pending():
                path = os.path.join(self.dir, name)
                try:
                    with open(path, encoding="utf-8") as handle:
                        entry = json.load(handle)
                except (OSError, ValueError):
                    self._set_aside(name)
                    failed += 1
                    continue
                headers = {**entry.get("headers", {}), "content-type": "application/json"}
                if config.get("token"):
                    headers["authorization"] = f"Bearer {config['token']}"
                refused = 0
                try:
                    for request in entry.get("requests", []):
                        remaining = deadline - time.monotonic()
                        if remaining <= 0.05:
                            return Delivery(delivered, len(self.pending()), failed, "time budget spent")
                        body = json.dumps(request.get("body")).encode("utf-8")
                        status, _answer = send(
                            config["endpoint"],
                            request["method"],
                            request["path"],
                            headers,
                            body,
                            remaining,
                            ca=config.get("ca"),
                        ).result()
                        if status >= 400:
                            refused = status
                            break
                except OSError as exc:
                    return Delivery(delivered, len(self.pending()), failed, f"server unreachable: {exc}")
                if refused in RETRY_LATER or refused >= 500:
                    return Delivery(delivered, len(self.pending()), failed, f"server answered HTTP {refused}")
                if refused:
                    self._set_aside(name)
                    failed += 1
                    continue
                os.remove(path)
                delivered += 1
        return Delivery(delivered, len(self.pending()), failed)

    def _set_aside(self, name: str) -> None:
        """Move an entry the server refuses for good to ``failed/`` (kept for a look, out of the queue's way)."""
        os.makedirs(os.path.join(self.dir, "failed"), exist_ok=True)
        os.replace(os.path.join(self.dir, name), os.path.join(self.dir, "failed", name))

    @contextmanager
    def _lock(self) -> Iterator[bool]:
        """Hold ``.lock`` (non-blocking): True when this process is the one deliverer now."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except ImportError:  # Windows: no flock; a second deliverer only repeats keyed requests
                pass
            except OSError:
                yield False
                return
            yield True
        finally:
            os.close(fd)


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (a no-op where folders cannot be opened, as on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
