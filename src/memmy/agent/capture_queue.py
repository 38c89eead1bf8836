"""Turn captures off the reply's critical path: one background thread redacts each finished turn and posts it to
the daemon through the :class:`~memmy.daemon_client.DaemonClient`, over the thread's own kept-alive connection
(``http.client``, the client's transport), so neither the answer nor the next turn waits.

Nothing is lost: :meth:`CaptureQueue.flush` waits for the queue (the agent calls it when it closes) and an
``atexit`` hook flushes what is left at interpreter exit. A capture the daemon cannot take now (not running, no
answer in time, HTTP 401/429/5xx) is appended, already redacted, to a spool file and sent again once the daemon
answers (before the next capture, and unasked after 2 s, 4 s, ... up to every minute); the daemon's idempotency
(``requestId``) makes a repeat harmless. Fail-open: nothing here raises into the agent; the last error is reported
through ``on_error``."""

from __future__ import annotations

import atexit
import http.client
import json
import os
import queue
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from memmy.daemon_client import DaemonClient, DaemonError, DaemonTimeout, DaemonUnreachable

#: Statuses worth sending again later (the daemon is starting, overloaded, or the token is being fixed).
RETRYABLE = frozenset({401, 408, 425, 429, 500, 502, 503, 504, 507})
#: Spooled captures are sent again after this long without a new capture, then twice as long each time, up to
#: the maximum (a daemon that was slow or down a moment gets them without waiting for the next turn).
RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0
SPOOL_MAX_BYTES = 20 * 1024 * 1024


@dataclass
class Capture:
    """One capture: the route, a function that builds the (redacted) body, extra headers, and its outcome."""

    path: str
    prepare: Callable[[], dict[str, Any]]
    headers: dict[str, str] = field(default_factory=dict)
    done: Future[bool] = field(default_factory=Future)


class CaptureQueue:
    """A FIFO of captures drained by one daemon thread (started at the first capture)."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        spool: Path | None = None,
        timeout_s: float = 15.0,
        on_error: Callable[[str | None], None] | None = None,
        ca: str | None = None,
    ) -> None:
        self.ca = ca  # a team server's private CA (None: the system's); HTTPS is always verified
        parts = urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.secure else 80)
        self.prefix = parts.path.rstrip("/")
        self.url = url
        self.headers = {"content-type": "application/json"}
        self._client = DaemonClient(url, headers=headers, sync_send=self._exchange)
        self.spool = spool
        self.timeout_s = timeout_s
        self.on_error = on_error or (lambda message: None)
        self._queue: queue.Queue[Capture | None] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._connection: http.client.HTTPConnection | None = None
        self._closed = False
        if spool is not None and spool.exists():  # an earlier run left captures: send them now, in the background
            self._enqueue(Capture("", dict))

    # -- the agent's side ---------------------------------------------------------------------------------------
    def submit(self, path: str, prepare: Callable[[], dict[str, Any]], headers: dict[str, str]) -> Future[bool]:
        """Queue one capture; the future says whether the daemon stored it (False: spooled or dropped)."""
        item = Capture(path, prepare, headers)
        with self._idle:
            if self._closed:
                item.done.set_result(self._spool_item(item))
                return item.done
        self._enqueue(item)
        return item.done

    def _enqueue(self, item: Capture) -> None:
        with self._idle:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memmy-capture", daemon=True)
                self._thread.start()
                atexit.register(self.close)
        self._queue.put(item)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued capture is delivered (or spooled); False when the time ran out."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush, then stop the thread; what could not be sent in time goes to the spool."""
        with self._idle:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        self.flush(timeout_s)
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout_s)
        while True:  # the thread did not get to these in time: keep them for the next run
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.done.set_result(self._spool_item(item))
                self._finished()

    # -- the thread ---------------------------------------------------------------------------------------------
    def _run(self) -> None:
        retry_in: float | None = None  # while the spool holds captures: when to send them again unasked
        while True:
            try:
                item = self._queue.get(timeout=retry_in)
            except queue.Empty:
                sent = self._guarded(self._replay)
                retry_in = None if sent else min(2 * (retry_in or RETRY_FIRST_S), RETRY_MAX_S)
                continue
            if item is None:
                break
            ok = self._guarded(partial(self._deliver, item) if item.path else self._replay)
            if not item.done.done():
                item.done.set_result(ok)
            self._finished()
            retry_in = (retry_in or RETRY_FIRST_S) if self._spooled() else None
        if self._connection is not None:
            self._connection.close()

    def _guarded(self, send: Callable[[], bool]) -> bool:
        try:
            return send()
        except Exception as exc:  # fail-open: a bug here must never take the agent down
            self.on_error(f"turn capture failed: {type(exc).__name__}: {exc}")
            return False

    def _spooled(self) -> bool:
        """Whether captures wait in the spool."""
        try:
            return self.spool is not None and self.spool.stat().st_size > 0
        except OSError:
            return False

    def _finished(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _deliver(self, item: Capture) -> bool:
        body = item.prepare()
        status, detail = self._post(item.path, body, item.headers)
        if 200 <= status < 300:
            self.on_error(None)
            if self.spool is not None and self.spool.exists():
                self._replay()
            return True
        if status == 0 or status in RETRYABLE:
            self._append({"path": item.path, "body": body, "headers": item.headers})
            where = " (kept; sent again when the daemon answers)" if self.spool is not None else ""
            self.on_error(f"turn capture failed: {detail}{where}")
        else:
            self.on_error(f"turn capture refused (HTTP {status}): {detail}")
        return False

    def _post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
        """Send one capture through the daemon client; (HTTP status, what went wrong), status 0: no answer."""
        try:
            self._client.request("POST", path, body, headers=headers)
        except DaemonError as exc:
            return exc.status or 0, exc.message
        return 200, ""

    def _exchange(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        """The client's transport: one request on the kept-alive connection; (status, JSON answer or text)."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        for attempt in (0, 1):  # a kept-alive connection the daemon closed: once more on a new one
            reused = self._connection is not None
            if self._connection is None:
                if self.secure:
                    context = ssl.create_default_context(cafile=self.ca)
                    self._connection = http.client.HTTPSConnection(
                        self.host, self.port, timeout=self.timeout_s, context=context
                    )
                else:
                    self._connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            try:
                self._connection.request(method, self.prefix + path, data, {**headers, **self.headers})
                response = self._connection.getresponse()
                text = response.read().decode("utf-8", "replace")
                if response.will_close:
                    self._drop_connection()
                try:
                    return response.status, json.loads(text)
                except ValueError:
                    return response.status, text[:300]
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                if reused and attempt == 0 and not isinstance(exc, TimeoutError):
                    continue
                if isinstance(exc, TimeoutError):
                    raise DaemonTimeout(f"{self.url} did not answer within {self.timeout_s:g} s") from None
                raise DaemonUnreachable(f"daemon not running at {self.url} ({exc})") from None
        raise DaemonUnreachable(f"daemon not running at {self.url}")

    def _drop_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None

    # -- the spool ----------------------------------------------------------------------------------------------
    def _spool_item(self, item: Capture) -> bool:
        try:
            self._append({"path": item.path, "body": item.prepare(), "headers": item.headers})
        except Exception as exc:  # fail-open
            self.on_error(f"turn capture lost: {type(exc).__name__}: {exc}")
        return False

    def _append(self, record: dict[str, Any]) -> None:
        if self.spool is None:
            return
        try:
            if self.spool.exists() and self.spool.stat().st_size > SPOOL_MAX_BYTES:
                self.on_error(f"turn capture dropped: {self.spool} is over {SPOOL_MAX_BYTES // 2**20} MiB")
                return
            self.spool.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.spool, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(descriptor, "a", encoding="utf-8") as out:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        except OSError as exc:
            self.on_error(f"turn capture lost: cannot write {self.spool}: {exc.strerror}")

    def _replay(self) -> bool:
        """Send the spooled captures in order; keep those the daemon still cannot take. True: all sent."""
        if self.spool is None or not self.spool.exists():
            return True
        claimed = self.spool.with_name(self.spool.name + f".{os.getpid()}.sending")
        try:
            os.replace(self.spool, claimed)  # another agent process replaying at the same time gets nothing
            lines = claimed.read_text(encoding="utf-8").splitlines()
        except OSError:
            return False
        sent = True
        for index, line in enumerate(lines):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            status, _detail = self._post(str(record["path"]), record["body"], dict(record.get("headers") or {}))
            if status == 0 or status in RETRYABLE:
                for rest in lines[index:]:
                    try:
                        self._append(json.loads(rest))
                    except ValueError:
                        continue
                sent = False
                break
        claimed.unlink(missing_ok=True)
        return sent
