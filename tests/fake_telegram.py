"""A small Telegram Bot API server on loopback for the channel tests, speaking the documented wire format
(https://core.telegram.org/bots/api): ``/bot<token>/<method>`` with form or JSON parameters, answers
``{"ok": true, "result": …}`` or ``{"ok": false, "error_code": …, "description": …}``; ``getUpdates`` long-polls
and confirms updates below ``offset``; ``sendMessage`` refuses text over 4096 characters after entity parsing
and HTML it cannot parse, as Telegram does; files are served under ``/file/bot<token>/<path>``.

Tests push user messages with :meth:`FakeTelegram.say`, read what the bot sent in :attr:`FakeTelegram.sent`, and
make the next ``getUpdates`` calls fail (:meth:`FakeTelegram.drop_polls`) to stand for a dropped connection."""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tests.fake_platform import PlatformFake, serving

ALLOWED_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code", "pre", "a", "tg-spoiler",
                "blockquote", "span"}  # fmt: skip


class _EntityText(HTMLParser):
    """Telegram's HTML parse mode: the text a message shows, or ValueError where Telegram answers 400."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            raise ValueError(f'Bad Request: can\'t parse entities: unsupported start tag "{tag}"')
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            raise ValueError(f'Bad Request: can\'t parse entities: unmatched end tag "{tag}"')

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def shown_text(text: str, parse_mode: str | None) -> str:
    """What a message with ``parse_mode`` shows (raises ValueError like Telegram's 400 for broken markup)."""
    if parse_mode != "HTML":
        return text
    if re.search(r"&(?!(lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);)", text):
        raise ValueError("Bad Request: can't parse entities: unsupported entity")
    parser = _EntityText()
    parser.feed(text)
    parser.close()
    if parser.stack:
        raise ValueError("Bad Request: can't parse entities: unclosed tag")
    return html.unescape("".join(parser.parts))


@dataclass
class Sent:
    """One thing the bot sent."""

    method: str
    chat_id: str
    text: str = ""
    parse_mode: str | None = None
    filename: str = ""
    data: bytes = b""
    at: float = field(default_factory=time.monotonic)


class FakeTelegram(PlatformFake):
    """The fake server's state; thread-safe helpers for the test, asyncio inside the server."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self.updates: list[dict[str, Any]] = []
        self.sent: list[Sent] = []
        self.actions: list[tuple[str, str]] = []
        self.files: dict[str, tuple[str, bytes]] = {}
        self.calls: list[str] = []
        self.fail_polls = 0
        self.confirmed = 0
        self._ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self._lock = threading.Lock()
        self.injected_at: dict[int, float] = {}
        self.delivered_at: dict[int, float] = {}  # when getUpdates first handed an update to the bot
        self.update_of: dict[str, int] = {}  # message text -> its update id

    # --- the test's side -------------------------------------------------------------------------------------
    def say(self, chat_id: int, user_id: int, text: str = "", document: tuple[str, bytes, str] | None = None) -> int:
        """Queue a user's message (optionally with a document: name, bytes, MIME); its update id."""
        with self._lock:
            update_id = next(self._ids)
            message: dict[str, Any] = {
                "message_id": next(self._message_ids),
                "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private", "first_name": f"user{user_id}"},
                "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}", "username": f"u{user_id}"},
            }
            if text:
                message["caption" if document else "text"] = text
            if document is not None:
                file_id = f"file{update_id}"
                name, data, mime = document
                self.files[file_id] = (f"documents/{name}", data)
                message["document"] = {
                    "file_id": file_id,
                    "file_unique_id": f"u{file_id}",
                    "file_name": name,
                    "mime_type": mime,
                    "file_size": len(data),
                }
            self.updates.append({"update_id": update_id, "message": message})
            self.update_of.setdefault(text, update_id)
            self.injected_at[update_id] = time.monotonic()
        self.notify()
        return update_id

    def drop_polls(self, count: int) -> None:
        """Answer the next ``count`` getUpdates calls with 502 Bad Gateway (a dropped connection)."""
        self.fail_polls = count

    def texts(self, chat_id: int) -> list[str]:
        """The texts (as shown) sent to one chat, in order."""
        return [s.text for s in self.sent if s.chat_id == str(chat_id) and s.method == "sendMessage"]

    # --- the server's side -----------------------------------------------------------------------------------
    def _message(self, chat_id: str, **extra: Any) -> dict[str, Any]:
        chat = {"id": int(chat_id), "type": "private"}
        return {"message_id": next(self._message_ids), "date": int(time.time()), "chat": chat, **extra}

    async def _params(self, request: Request) -> dict[str, Any]:
        kind = request.headers.get("content-type", "")
        if kind.startswith("application/json"):
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        form = await request.form()
        params: dict[str, Any] = {}
        for key, value in form.multi_items():
            if hasattr(value, "read"):
                params[key] = (value.filename or key, await value.read())  # type: ignore[union-attr]
            else:
                try:
                    params[key] = json.loads(str(value))
                except ValueError:
                    params[key] = str(value)
        return params

    async def method(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return JSONResponse({"ok": False, "error_code": 401, "description": "Unauthorized"}, 401)
        name = request.path_params["method"]
        params = await self._params(request)
        self.calls.append(name)
        handler = getattr(self, f"do_{name}", None)
        if handler is None:
            return JSONResponse({"ok": False, "error_code": 404, "description": "Not Found: method not found"}, 404)
        try:
            result = await handler(params)
        except ValueError as exc:
            return JSONResponse({"ok": False, "error_code": 400, "description": str(exc)}, 400)
        if isinstance(result, Response):
            return result
        return JSONResponse({"ok": True, "result": result})

    async def do_getMe(self, params: dict[str, Any]) -> Any:  # noqa: N802 - Bot API method names
        return {"id": 777, "is_bot": True, "first_name": "memmy", "username": "memmy_test_bot"}

    async def do_deleteWebhook(self, params: dict[str, Any]) -> Any:  # noqa: N802
        return True

    async def do_getUpdates(self, params: dict[str, Any]) -> Any:  # noqa: N802
        if self.fail_polls > 0:
            self.fail_polls -= 1
            return Response("Bad Gateway", status_code=502)
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if offset:
                    self.confirmed = max(self.confirmed, offset - 1)
                    self.updates = [u for u in self.updates if u["update_id"] >= offset]
                ready = list(self.updates)
            if ready or time.monotonic() >= deadline:
                now = time.monotonic()
                for update in ready:
                    self.delivered_at.setdefault(update["update_id"], now)
                return ready
            assert self.wake is not None
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                pass

    async def do_sendMessage(self, params: dict[str, Any]) -> Any:  # noqa: N802
        text = str(params.get("text") or "")
        mode = params.get("parse_mode")
        shown = shown_text(text, mode if isinstance(mode, str) else None)
        if not shown.strip():
            raise ValueError("Bad Request: message text is empty")
        if len(shown) > 4096:
            raise ValueError("Bad Request: message is too long")
        chat_id = str(params["chat_id"])
        self.sent.append(Sent("sendMessage", chat_id, shown, mode if isinstance(mode, str) else None))
        return self._message(chat_id, text=shown)

    async def do_sendChatAction(self, params: dict[str, Any]) -> Any:  # noqa: N802
        self.actions.append((str(params["chat_id"]), str(params.get("action"))))
        return True

    async def do_sendDocument(self, params: dict[str, Any]) -> Any:  # noqa: N802
        chat_id = str(params["chat_id"])
        filename, data = params["document"]
        self.sent.append(Sent("sendDocument", chat_id, filename=filename, data=data))
        document = {"file_id": f"out{len(self.sent)}", "file_unique_id": f"o{len(self.sent)}", "file_name": filename}
        return self._message(chat_id, document=document)

    async def do_getFile(self, params: dict[str, Any]) -> Any:  # noqa: N802
        file_id = str(params["file_id"])
        if file_id not in self.files:
            raise ValueError("Bad Request: invalid file_id")
        path, data = self.files[file_id]
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data), "file_path": path}

    async def download(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return Response("Unauthorized", status_code=401)
        wanted = request.path_params["path"]
        for path, data in self.files.values():
            if path == wanted:
                return Response(data, media_type="application/octet-stream")
        return Response("Not Found", status_code=404)

    def outbox(self) -> list[Any]:
        return [(s.chat_id, s.text[:80]) for s in self.sent]

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/bot{token}/{method}", self.method, methods=["GET", "POST"]),
            Route("/file/bot{token}/{path:path}", self.download, methods=["GET"]),
        ]


@contextmanager
def fake_telegram(token: str = "123456:TEST-token") -> Iterator[FakeTelegram]:
    """Run a fake Bot API server on a free loopback port for the ``with`` block (``.url`` is its apiBase)."""
    fake = FakeTelegram(token)
    with serving(fake):
        yield fake
