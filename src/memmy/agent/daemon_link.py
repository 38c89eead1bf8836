"""Keep-alive HTTP/1.1 to the memory daemon for the agent's turn path: asyncio streams with the ``h11`` protocol
state machine, connections kept open and reused (one per request in flight), JSON in and out.

Measured on two busy cores: a POST to a trivial local uvicorn app took 1-3 ms this way against 8-16 ms through
``httpx.AsyncClient`` (load 8-12), and the daemon's anonymous health 5.8 against 8.3 ms (p50, load 14,
``bench/agent.py``): httpx's per-request layers (anyio, the pool, the models) weigh on a loopback call. A
connection the daemon closed while idle is detected and the request sent again on a new one. It is the transport
under the agent's :class:`~memmy.daemon_client.DaemonClient` (``send=link.request``), which builds the requests
and reads the answers."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

import h11

from memmy.daemon_client import DaemonError, DaemonTimeout, DaemonUnreachable

__all__ = ["DaemonError", "DaemonLink", "DaemonTimeout", "DaemonUnreachable"]

READ_CHUNK = 65536


class _Stale(Exception):
    """A reused connection turned out to be closed before any answer came (send the request again)."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = h11.Connection(h11.CLIENT)

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, request: h11.Request, data: bytes, reused: bool) -> tuple[int, bytes]:
        p = self.protocol
        self.writer.write(p.send(request) + (p.send(h11.Data(data=data)) if data else b"") + p.send(h11.EndOfMessage()))
        status = 0
        chunks: list[bytes] = []
        answered = False
        while True:
            event = p.next_event()
            if event is h11.NEED_DATA:
                try:
                    received = await self.reader.read(READ_CHUNK)
                except ConnectionError:
                    if reused and not answered:
                        raise _Stale() from None
                    raise
                if not received and reused and not answered:
                    raise _Stale()
                p.receive_data(received)
                continue
            answered = True
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
        return status, b"".join(chunks)

    def reusable(self) -> bool:
        """Start the next request/response cycle; False when either side will close."""
        p = self.protocol
        if p.our_state is h11.DONE and p.their_state is h11.DONE:
            p.start_next_cycle()
            return True
        return False


class DaemonLink:
    """JSON requests to one daemon over kept-alive connections."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float = 5.0,
        connect_timeout_s: float = 1.0,
        ca: str | None = None,
    ) -> None:
        self.ca = ca  # a team server's private CA (None: the system's); HTTPS is always verified
        parts = urlsplit(url)
        self.url = url
        self.secure = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.secure else 80)
        self.prefix = parts.path.rstrip("/")
        authority = f"[{self.host}]" if ":" in self.host else self.host
        default_port = self.port == (443 if self.secure else 80)
        self.headers = [("host", authority if default_port else f"{authority}:{self.port}"), *headers.items()]
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        context = ssl.create_default_context(cafile=self.ca) if self.secure else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=context), self.connect_timeout_s
            )
        except TimeoutError:
            raise DaemonTimeout(f"no connection to {self.url} within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise DaemonUnreachable(f"cannot connect to {self.url}: {exc.strerror or exc}") from None
        return _Connection(reader, writer)

    async def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """Send one request; (status, parsed JSON body or None). Raises DaemonUnreachable / DaemonTimeout."""
        data = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else b""
        extra = headers or {}
        fields = [*self.headers, *extra.items(), *([] if "accept" in extra else [("accept", "application/json")])]
        if body is not None:
            fields += [("content-type", "application/json"), ("content-length", str(len(data)))]
        request = h11.Request(method=method, target=self.prefix + path, headers=fields)
        try:
            async with asyncio.timeout(self.timeout_s):
                status, raw = await self._send(request, data)
        except TimeoutError:
            raise DaemonTimeout(f"{self.url} did not answer {method} {path} within {self.timeout_s:g} s") from None
        try:
            return status, (json.loads(raw) if raw else None)
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    async def _send(self, request: h11.Request, data: bytes) -> tuple[int, bytes]:
        while True:
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect()
            done = False
            try:
                status, raw = await connection.exchange(request, data, reused)
                done = True
            except _Stale:
                continue  # the daemon closed that idle connection: send it on another one
            except (ConnectionError, h11.ProtocolError) as exc:
                raise DaemonUnreachable(f"the connection to {self.url} broke: {exc}") from None
            finally:
                if done and connection.reusable():
                    self._idle.append(connection)
                else:
                    connection.close()
            return status, raw

    async def aclose(self) -> None:
        """Close every idle connection."""
        while self._idle:
            self._idle.pop().close()
