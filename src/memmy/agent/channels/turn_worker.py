"""Chat turns in a worker process of their own: the channels' process only receives, routes and sends, and the
agent's CPU work (the provider SDK, the runtime) runs in another interpreter, so it never holds the lock the
channels' sockets wait for.

:class:`TurnWorker` is the :class:`~memmy.agent.channels.router.TurnRunner` the channels' process holds: it starts
``python -m memmy.agent.channels.turn_worker``, which runs :class:`~memmy.agent.channels.agent_turns.AgentTurns`
(one runtime per chat session), and speaks to it over the child's stdin and a protocol pipe in JSON lines:

- to the worker: ``{"op": "run", "id", "session", "text", "source", "tools", "parts"}``, ``{"op": "cancel", "id"}``
  (``/stop``), ``{"op": "describe", "id", "session"}``, ``{"op": "close"}``; the first line is the agent config.
- from the worker: ``{"op": "ready"}``, ``{"id", "answer": {...}, "received", "answered"}`` (CLOCK_MONOTONIC
  stamps, one clock for the machine), ``{"id", "line"}``, ``{"id", "error"}``, ``{"op": "closed"}``.

A worker that dies (killed, out of memory, a crash in native code) is started again, and every turn it was running
is answered with :data:`CRASHED`: the chat is told, nothing is lost silently. A chat's messages stay in order
because its router sends the next one only after the previous answer.

:class:`TurnPool` is what ``memmy serve`` holds: ``channels.workers`` such workers (by default one per core but
one, from 1 to 4: :func:`~memmy.agent.channels.settings.default_workers`), each chat session always in the same one
(a stable hash of the session's name), so different chats' turns run on different cores while a session's runtime
and history live in exactly one process. Each worker restarts on its own; one dying fails only its own
turns."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import itertools
import json
import logging
import os
import pickle
import sys
import time
import zlib
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memmy.agent.channels.base import freeze_startup_heap
from memmy.agent.channels.router import TIMINGS_KEPT, Answer
from memmy.agent.config import AgentConfig

if TYPE_CHECKING:
    import cProfile

    from memmy.agent.channels.agent_turns import AgentTurns

log = logging.getLogger("memmy.channels")

CRASHED = (
    "The agent's worker process stopped while it worked on this message ({reason}); it has been started again. "
    "Send the message again to retry."
)
HEALTHY_AFTER_S = 10.0
CLOSE_WAIT_S = 30.0  # a worker delivering its captures at shutdown gets this long before it is killed
LINE_LIMIT = 64 * 1024 * 1024  # one answer (a long text, image parts going in) per line
MODULE = "memmy.agent.channels.turn_worker"
#: Set to a path prefix, the worker profiles itself (cProfile) from its first turn to its close and writes the
#: statistics to ``PREFIX.PID`` (bench/channels.py --profile).
PROFILE_ENV = "MEMMY_TURN_WORKER_PROFILE"


class WorkerGone(Exception):
    """The worker process ended while a request was waiting for it."""


class TurnWorker:
    """Runs chat turns in a worker process (started with the first use, started again when it dies)."""

    def __init__(self, config: AgentConfig, config_file: str | None = None) -> None:
        self.config = config  # the router reads the ASR slot from it (voice notes are heard in this process)
        self.config_file = config_file
        self.answered = 0  # turns this worker answered (any of its processes)
        self.process: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None
        # each waiting request, with the worker it was sent to (a worker that ends fails only its own requests)
        self.pending: dict[int, tuple[asyncio.Future[dict[str, Any]], asyncio.subprocess.Process]] = {}
        self.alive = False  # the current worker's answers pipe is open (false from its end, before it is reaped)
        self.backing_off = False  # waiting before a restart (close() need not wait for it)
        self.ids = itertools.count(1)
        self.starting = asyncio.Lock()
        self.ready: asyncio.Future[None] | None = None
        self.closing = False
        self.restarts = 0
        self.started_at = 0.0
        self.quick_deaths = 0  # deaths in a row within HEALTHY_AFTER_S of the start: the restart backs off
        # (stage, seconds) for bench/channels.py: "to_worker" from a turn's request leaving this process to the
        # worker having read it, "in_worker" from there to its answer (the turn, the provider's answer included),
        # "from_worker" from the worker's answer to this process having read it
        self.timings: deque[tuple[str, float]] = deque(maxlen=TIMINGS_KEPT)  # bounded: serve runs for weeks

    async def start(self) -> None:
        """Start the worker (it loads the tool loop and the provider's SDK before it says it is ready)."""
        async with self.starting:
            if self.alive and self.ready is not None:
                await asyncio.shield(self.ready)
                return
            if self.closing:
                raise WorkerGone("memmy serve is stopping")
            self.started_at = time.monotonic()
            loop = asyncio.get_running_loop()
            answers, theirs = os.pipe()  # the worker's answers come on a pipe of their own, not its stdout
            try:
                self.process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    MODULE,
                    str(theirs),
                    stdin=asyncio.subprocess.PIPE,
                    pass_fds=(theirs,),
                )
            finally:
                os.close(theirs)
            stream = asyncio.StreamReader(limit=LINE_LIMIT)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(answers, "rb", 0))
            self.ready = loop.create_future()
            self.alive = True
            self.reader = asyncio.create_task(self._read(self.process, stream, self.ready), name="channels:worker")
            setup = base64.b64encode(pickle.dumps((self.config, self.config_file))).decode("ascii")
            self._write({"op": "setup", "config": setup})
            await asyncio.shield(self.ready)

    async def _read(
        self, process: asyncio.subprocess.Process, stream: asyncio.StreamReader, ready: asyncio.Future[None]
    ) -> None:
        """Hand each answer to its waiting request; when the worker ends, fail what still waits."""
        try:
            while line := await stream.readline():
                got = time.monotonic()
                message = json.loads(line)
                if message.get("op") == "ready" and not ready.done():
                    ready.set_result(None)
                    continue
                future, _ = self.pending.pop(int(message.get("id") or 0), (None, None))
                if future is not None and not future.done():
                    message["got"] = got
                    future.set_result(message)
        except (ValueError, OSError) as exc:
            log.warning("the chat turns' worker sent something unreadable: %s", exc)
        if process is self.process:
            self.alive = False  # from here a request starts a new worker instead of writing to this one
        code = await process.wait()
        reason = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        if not ready.done():
            ready.set_exception(WorkerGone(f"the chat turns' worker did not start ({reason})"))
        for request, (future, sent_to) in list(self.pending.items()):
            if sent_to is process:
                del self.pending[request]
                if not future.done():
                    future.set_exception(WorkerGone(reason))
        if self.closing or not ready.done() or ready.exception() is not None:
            return  # never started: the next message tries again (and is told if it fails again)
        self.restarts += 1
        lived = time.monotonic() - self.started_at
        self.quick_deaths = self.quick_deaths + 1 if lived < HEALTHY_AFTER_S else 0
        delay = min(30.0, 0.5 * 2**self.quick_deaths) if self.quick_deaths else 0.0
        log.warning("the chat turns' worker stopped (%s); starting it again in %.1f s", reason, delay)
        self.backing_off = True
        try:
            await asyncio.sleep(delay)
        finally:
            self.backing_off = False
        if not self.closing and not self.alive:
            with contextlib.suppress(Exception):
                await self.start()

    def _write(self, message: dict[str, Any]) -> None:
        process = self.process
        if process is None or process.stdin is None or not self.alive:
            raise WorkerGone("the chat turns' worker is not running")
        process.stdin.write(json.dumps(message).encode("utf-8") + b"\n")

    async def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` with a new id and wait for the worker's reply to it."""
        if not self.alive:
            await self.start()
        assert self.process is not None
        request = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request] = (future, self.process)
        message["id"] = request
        try:
            self._write(message)
            return await future
        except asyncio.CancelledError:
            self.pending.pop(request, None)
            with contextlib.suppress(WorkerGone, OSError):
                self._write({"op": "cancel", "id": request})
            raise
        finally:
            self.pending.pop(request, None)

    async def run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None = None
    ) -> Answer:
        """Run one turn of ``session`` in the worker (a worker that dies answers it with :data:`CRASHED`)."""
        sent = time.monotonic()
        try:
            reply = await self._ask(
                {"op": "run", "session": session, "text": text, "source": source, "tools": tools, "parts": parts}
            )
        except WorkerGone as exc:
            return Answer(CRASHED.format(reason=exc), "failed")
        if "error" in reply:
            return Answer(f"[failed] {reply['error']}", "failed")
        self.answered += 1
        self.timings.append(("to_worker", float(reply["received"]) - sent))
        self.timings.append(("from_worker", float(reply["got"]) - float(reply["answered"])))
        self.timings.append(("in_worker", float(reply["answered"]) - float(reply["received"])))
        return answer_of(reply["answer"])

    async def describe(self, session: str) -> str:
        """The session's memory state for ``/status``."""
        try:
            reply = await self._ask({"op": "describe", "session": session})
        except WorkerGone:
            return "Memory: the agent's worker process is starting again"
        return str(reply.get("line") or reply.get("error") or "")

    async def close(self) -> None:
        """Let the worker deliver its pending captures and close its runtimes, then stop it."""
        self.closing = True
        process, reader = self.process, self.reader
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(WorkerGone, OSError):
                self._write({"op": "close"})
                if process.stdin is not None:
                    process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), CLOSE_WAIT_S)
            except TimeoutError:
                log.warning("the chat turns' worker did not stop in %.0f s; killing it", CLOSE_WAIT_S)
                process.kill()
                await process.wait()
        if reader is not None:
            if self.backing_off:
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        self.process = self.reader = None


def worker_index(session: str, size: int) -> int:
    """Which of ``size`` workers holds ``session``: CRC-32 of its name, the same in every run and on every machine."""
    return zlib.crc32(session.encode("utf-8")) % size


class TurnPool:
    """Runs chat turns in ``size`` worker processes, each session always in the same worker (see the module)."""

    def __init__(self, config: AgentConfig, config_file: str | None = None, size: int = 1) -> None:
        self.config = config  # the router reads the ASR slot from it
        self.workers = [TurnWorker(config, config_file) for _ in range(max(1, size))]

    def worker_for(self, session: str) -> TurnWorker:
        """The worker that holds ``session``."""
        return self.workers[worker_index(session, len(self.workers))]

    @property
    def timings(self) -> list[tuple[str, float]]:
        """Every worker's hop timings (for bench/channels.py)."""
        return [timing for worker in self.workers for timing in worker.timings]

    async def start(self) -> None:
        """Start every worker (together: each loads the provider's SDK); the first failure is raised."""
        for result in await asyncio.gather(*(worker.start() for worker in self.workers), return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    async def run(
        self, session: str, text: str, *, source: str, tools: bool, parts: list[dict[str, Any]] | None = None
    ) -> Answer:
        """Run one turn of ``session`` in its worker."""
        return await self.worker_for(session).run(session, text, source=source, tools=tools, parts=parts)

    async def describe(self, session: str) -> str:
        """The session's memory state for ``/status``."""
        return await self.worker_for(session).describe(session)

    async def close(self) -> None:
        """Close every worker (each delivers its pending captures first)."""
        await asyncio.gather(*(worker.close() for worker in self.workers))


def answer_to_json(answer: Answer) -> dict[str, Any]:
    """An answer on the wire."""
    files = [str(path) for path in answer.files]
    return {"text": answer.text, "status": answer.status, "files": files, "memoryIds": answer.memory_ids}


def answer_of(data: dict[str, Any]) -> Answer:
    """An answer read from the wire."""
    files = [Path(str(path)) for path in data.get("files") or []]
    ids = [str(item) for item in data.get("memoryIds") or []]
    return Answer(str(data.get("text") or ""), str(data.get("status") or "succeeded"), files, ids)


class _Worker:
    """The worker's side: reads requests from stdin, runs each turn in a task, writes answers to its pipe."""

    def __init__(self, out: int, profiler: cProfile.Profile | None = None) -> None:
        self.out = os.fdopen(out, "wb", buffering=0)
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.profiler = profiler  # enabled from the first turn on (start-up is not what is asked about)

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message).encode("utf-8") + b"\n")

    async def serve(self) -> None:
        from memmy.agent.channels.agent_turns import AgentTurns

        loop = asyncio.get_running_loop()
        stdin = asyncio.StreamReader(limit=LINE_LIMIT)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin.buffer)
        setup = json.loads(await stdin.readline())
        config, config_file = pickle.loads(base64.b64decode(setup["config"]))
        turns = AgentTurns(config, config_file)
        await turns.warm()
        freeze_startup_heap()
        self.send({"op": "ready"})
        try:
            while line := await stdin.readline():
                received = time.monotonic()
                message = json.loads(line)
                op = message.get("op")
                if op == "close":
                    break
                if op == "cancel":
                    task = self.tasks.get(int(message["id"]))
                    if task is not None:
                        task.cancel()
                    continue
                request = int(message["id"])
                if self.profiler is not None:
                    self.profiler.enable()
                    self.profiler = None
                self.tasks[request] = asyncio.create_task(self.handle(turns, message, received))
                self.tasks[request].add_done_callback(functools.partial(self.forget, request))
        finally:
            for task in list(self.tasks.values()):
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
            await turns.close()

    def forget(self, request: int, task: asyncio.Task[None]) -> None:
        if self.tasks.get(request) is task:
            del self.tasks[request]

    async def handle(self, turns: AgentTurns, message: dict[str, Any], received: float) -> None:
        request = int(message["id"])
        try:
            if message.get("op") == "describe":
                self.send({"id": request, "line": await turns.describe(str(message["session"]))})
                return
            answer = await turns.run(
                str(message["session"]),
                str(message["text"]),
                source=str(message["source"]),
                tools=bool(message["tools"]),
                parts=message.get("parts") or None,
            )
            self.send(
                {"id": request, "answer": answer_to_json(answer), "received": received, "answered": time.monotonic()}
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one failed turn answers its chat; the worker goes on
            logging.getLogger("memmy.channels").exception("a chat turn failed in the worker")
            self.send({"id": request, "error": f"{type(exc).__name__}: {exc}"})


def main() -> None:
    """The worker process: answers go to the pipe named by the first argument; its stdout goes to stderr, so
    nothing printed by a tool or a library can corrupt them."""
    out = int(sys.argv[1])
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, format="memmy chat worker: %(levelname)s %(name)s: %(message)s")
    profile = os.environ.get(PROFILE_ENV)
    if not profile:
        asyncio.run(_Worker(out).serve())
        return
    import cProfile

    profiler = cProfile.Profile()
    try:
        asyncio.run(_Worker(out, profiler).serve())
    finally:
        profiler.dump_stats(f"{profile}.{os.getpid()}")


if __name__ == "__main__":
    main()
