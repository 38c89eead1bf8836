"""The workbench's HTTP edge on ``memmy serve``: sign-in by a one-time link (cookie ``memmy_workbench``,
HttpOnly, SameSite=Strict, path ``/``), the CSRF token on every POST, loopback Host/Origin only, a JSON API over
the sessions and turns, one Server-Sent Events stream of every event, and the two pages (``/`` and ``/pet``)."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from memmy.agent import asr, imagegen
from memmy.agent.attachments import MAX_BYTES, MAX_FILES, AttachmentError, Converted, convert, message_text
from memmy.agent.config import AgentConfig
from memmy.agent.schedule import ScheduleStore
from memmy.agent.sessions import Session
from memmy.signin import CookieAuth, CookieSession, host_allowed
from memmy.workbench import slash_commands
from memmy.workbench.channels import ChannelsPage
from memmy.workbench.running_turns import Input, Turns
from memmy.workbench.settings import Settings, general

COOKIE = "memmy_workbench"
SESSIONS_FILE = "workbench-sessions.json"
KEEPALIVE_S = 15.0
DAY = 86400.0
Handler = Callable[[Request, CookieSession], Awaitable[Response]]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def group(session: Session, running: bool, now: float) -> str:
    """The task list's group: Pinned, Today, Yesterday, Last 7 days, Older or Archived (local time)."""
    if session.archived:
        return "archived"
    if session.pinned:
        return "pinned"
    local = time.localtime(now)
    midnight = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    when = now if running else session.updated
    if when >= midnight:
        return "today"
    if when >= midnight - DAY:
        return "yesterday"
    return "week" if when >= midnight - 6 * DAY else "older"


def summary(session: Session, running: bool, now: float, turns: int | None = None) -> dict[str, Any]:
    """A task list row (``turns`` when ``session`` holds only its first message)."""
    return {
        "id": session.id,
        "name": session.name,
        "title": session.label if session.title or session.messages else "",  # "": the page says "New task"
        "updated": session.updated,
        "group": group(session, running, now),
        "pinned": session.pinned,
        "archived": session.archived,
        "unread": session.unread and not running,
        "running": running,
        "turns": session.turns if turns is None else turns,
    }


class Workbench:
    """Routes for the workbench, bound to the process's :class:`Turns`."""

    def __init__(
        self, config: AgentConfig, turns: Turns, auth: CookieAuth, panel_url: str, schedules: ScheduleStore
    ) -> None:
        self.config = config
        self.schedules = schedules
        self.turns = turns
        self.auth = auth
        self.panel_url = panel_url
        self.settings = Settings(config, turns, self._reloaded)
        self.channels = ChannelsPage(config)
        self.verbs: dict[str, Callable[[Request, Session, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "rename": self._rename,
            "pin": self._flag("pinned", True),
            "unpin": self._flag("pinned", False),
            "archive": self._flag("archived", True),
            "restore": self._flag("archived", False),
            "read": self._flag("unread", False),
            "delete": self._delete,
            "stop": self._stop,
            "restart": self._restart,
            "command": self._command,
            "approve": self._approve,
        }

    def _reloaded(self, config: AgentConfig) -> None:
        """A Settings edit rewrote the config: the next turns use it (a running one finishes as it began)."""
        self.config = config
        self.turns.config = config

    # -- guards ---------------------------------------------------------------------------------------
    def _signed_in(self, request: Request) -> CookieSession | Response:
        if not host_allowed(request):
            return _error(403, "foreign Host or Origin refused")
        session = self.auth.session(request)
        return session if session is not None else _error(401, "sign in with `memmy workbench`")

    def read(self, fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A GET of the API: loopback and a signed-in browser."""

        async def handler(request: Request) -> Response:
            session = self._signed_in(request)
            return session if isinstance(session, Response) else await fn(request, session)

        return handler

    def write(self, fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A POST of the API: loopback, a signed-in browser and its CSRF token in ``x-csrf-token``."""

        async def handler(request: Request) -> Response:
            session = self._signed_in(request)
            if isinstance(session, Response):
                return session
            if not self.auth.csrf_ok(session, request.headers.get("x-csrf-token")):
                return _error(403, "missing or wrong CSRF token")
            return await fn(request, session)

        return handler

    # -- sign-in --------------------------------------------------------------------------------------
    async def link(self, request: Request) -> Response:
        """``POST /workbench/link`` with the serve token: a one-time sign-in link (what ``memmy workbench`` opens)."""
        token = self.config.serve_token or ""
        presented = request.headers.get("authorization", "")
        if not token or not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
            return _error(401, "missing or wrong bearer token (serve.token)")
        host = request.headers.get("host") or f"{self.config.serve_host}:{self.config.serve_port}"
        return JSONResponse({"url": f"http://{host}/signin?code={self.auth.new_link_code()}"})

    async def signin(self, request: Request) -> Response:
        """``GET /signin?code=&next=``: spend the code, set the cookie, open the page."""
        if not host_allowed(request):
            return _error(403, "foreign Host or Origin refused")
        session = self.auth.redeem(request.query_params.get("code", ""))
        if session is None:
            return self._page("signin.html", None, 401)
        target = request.query_params.get("next", "/")
        if target not in ("/", "/pet") and not (target.startswith("/?s=") and target[4:].replace("-", "").isalnum()):
            target = "/"
        response = RedirectResponse(target, 303)
        response.headers["set-cookie"] = self.auth.cookie_header(session)
        return response

    async def signout(self, request: Request, session: CookieSession) -> Response:
        """Revoke this browser's session."""
        self.auth.sign_out(session)
        response = JSONResponse({"ok": True})
        response.headers["set-cookie"] = self.auth.clear_cookie_header()
        return response

    # -- pages ----------------------------------------------------------------------------------------
    def _page(self, name: str, session: CookieSession | None, status: int = 200) -> Response:
        html = resources.files("memmy.workbench").joinpath("static", name).read_text(encoding="utf-8")
        boot = {
            "csrf": session.csrf if session else "",
            "panel": self.panel_url,
            "model": self.config.default.model if self.config.default else None,
            "commands": [list(c) for c in slash_commands.COMMANDS],
            "maxFiles": MAX_FILES,
            "maxBytes": MAX_BYTES,
            "asr": asr.enabled(self.config),
            **{k: v for k, v in general(self.config.raw).items() if k != "logLevel"},
        }
        html = html.replace("{{BOOT}}", json.dumps(boot).replace("<", "\\u003c"))
        headers = {
            "cache-control": "no-store",
            "content-security-policy": "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; "
            "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
        }
        return HTMLResponse(html, status_code=status, headers=headers)

    def page(self, name: str) -> Callable[[Request], Awaitable[Response]]:
        """``/`` or ``/pet``: the page when signed in, else the sign-in hint."""

        async def handler(request: Request) -> Response:
            if not host_allowed(request):
                return _error(403, "foreign Host or Origin refused")
            session = self.auth.session(request)
            return self._page(name if session else "signin.html", session, 200 if session else 401)

        return handler

    # -- reads ----------------------------------------------------------------------------------------
    async def state(self, request: Request, _: CookieSession) -> Response:
        """Every task with its group, running and unread marks; the stream's position."""
        running = self.turns.running_ids()
        now = time.time()
        heads = await asyncio.to_thread(self.turns.store.heads)
        rows = [summary(s, s.id in running, now, turns) for s, turns in heads]
        recent = self.turns.recent()
        upcoming = [s.to_json() for s in await asyncio.to_thread(self.schedules.all) if s.next_at is not None]
        return JSONResponse(
            {"sessions": rows, "seq": self.turns.hub.seq, "pet": recent.id if recent else None, "schedules": upcoming}
        )

    async def session(self, request: Request, _: CookieSession) -> Response:
        """One task's messages; when a turn runs, the messages before it and the turn's events so far."""
        sid = request.path_params["sid"]
        session = self.turns.session(sid)
        if session is None:
            return _error(404, "no such task")
        live = self.turns.live_events(sid)
        messages = session.messages
        if live:  # the running turn is replayed from its events
            users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
            messages = messages[: users[-1]] if users else []
        elif session.unread:
            session.unread = False
            self.turns.save_meta(session)
        return JSONResponse(
            {
                "task": summary(session, bool(live), time.time()),
                "messages": messages,
                "live": [e.to_json() for e in live],
                "waiting": self.turns.waiting(sid),
                "seq": self.turns.hub.seq,
                "goal": session.goal,
                "usage": session.usage,
            }
        )

    async def search(self, request: Request, _: CookieSession) -> Response:
        """Tasks whose title or messages contain every word of ``q`` (case-insensitive)."""
        words = request.query_params.get("q", "").lower().split()
        sessions = await asyncio.to_thread(self.turns.store.list)
        running = self.turns.running_ids()
        now = time.time()
        found = []
        for s in sessions:
            hay = (s.label + "\n" + "\n".join(str(m.get("content") or "") for m in s.messages)).lower()
            if all(w in hay for w in words):
                found.append(summary(s, s.id in running, now))
        return JSONResponse({"sessions": found[:50]})

    async def events(self, request: Request, _: CookieSession) -> Response:
        """``GET /api/events?after=SEQ``: every event after SEQ, then each new one (SSE; a comment every 15 s)."""
        try:
            after = int(request.query_params.get("after") or self.turns.hub.seq)
        except ValueError:
            return _error(400, "after: expected an integer")
        hub = self.turns.hub
        queue = hub.listen()
        backlog = hub.since(after)

        async def stream() -> AsyncIterator[str]:
            try:
                last = after
                for event in backlog:
                    last = event.seq
                    yield f"id: {event.seq}\ndata: {json.dumps(event.to_json(), ensure_ascii=False)}\n\n"
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if event.seq > last:
                        last = event.seq
                        yield f"id: {event.seq}\ndata: {json.dumps(event.to_json(), ensure_ascii=False)}\n\n"
            finally:
                hub.leave(queue)

        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    # -- writes ---------------------------------------------------------------------------------------
    async def create(self, request: Request, _: CookieSession) -> Response:
        """A new, empty task."""
        session = self.turns.new_session()
        self.turns.hub.publish(session.id, "meta")
        return JSONResponse({"id": session.id})

    async def send(self, request: Request, _: CookieSession) -> Response:
        """``POST /api/send`` (multipart: ``text``, ``session`` (empty: a new task), ``pet``, up to 4 ``files``)."""
        limit = MAX_FILES * MAX_BYTES + 1024 * 1024
        if int(request.headers.get("content-length") or 0) > limit:
            return _error(413, f"at most {MAX_FILES} files of {MAX_BYTES // 1048576} MB")
        try:
            form = await request.form(max_files=MAX_FILES + 1, max_fields=20)
        except Exception as exc:  # python-multipart's errors: a bad body
            return _error(400, f"the form could not be read: {exc}")
        try:
            uploads = [v for k, v in form.multi_items() if k == "files" and isinstance(v, UploadFile)]
            if len(uploads) > MAX_FILES:
                return _error(400, f"at most {MAX_FILES} attachments")
            files: list[Converted] = []
            for upload in uploads:
                data = await upload.read(MAX_BYTES + 1)
                files.append(await asyncio.to_thread(convert, upload.filename or "file", data))
        except AttachmentError as exc:
            return _error(400, str(exc))
        finally:
            await form.close()
        text = str(form.get("text") or "")
        if not text.strip() and not files:
            return _error(400, "an empty message")
        command = text.strip().startswith("/") and not files
        session = self._target(str(form.get("session") or ""), str(form.get("pet") or "") == "1", not command)
        if session is None:
            return _error(404, "no such task")
        if command:  # a command in a new task does not save the task (/goal or a turn will)
            return JSONResponse(await self._slash(session, text.strip()))
        message = Input(message_text(text, files), [f.image for f in files if f.image is not None])
        outcome = self.turns.send(session, message)
        return JSONResponse({"id": session.id, "status": outcome, "files": [f.name for f in files]})

    async def transcribe(self, request: Request, _: CookieSession) -> Response:
        """``POST /api/transcribe`` (multipart ``audio``): the text through the ASR slot (the microphone button)."""
        if int(request.headers.get("content-length") or 0) > asr.MAX_AUDIO_BYTES + 65536:
            return _error(413, f"at most {asr.MAX_AUDIO_BYTES // 1048576} MB of audio")
        try:
            form = await request.form(max_files=1, max_fields=2)
        except Exception as exc:  # python-multipart's errors: a bad body
            return _error(400, f"the form could not be read: {exc}")
        try:
            upload = form.get("audio")
            if not isinstance(upload, UploadFile):
                return _error(400, "audio: expected a file")
            data = await upload.read(asr.MAX_AUDIO_BYTES + 1)
            mime = upload.content_type or "audio/webm"
        finally:
            await form.close()
        try:
            return JSONResponse({"text": await asr.transcribe(self.config, data, mime)})
        except asr.AsrError as exc:
            return _error(502 if exc.upstream else 400, str(exc))

    def _target(self, sid: str, pet: bool, save: bool) -> Session | None:
        if sid:
            return self.turns.session(sid)
        if pet:
            recent = self.turns.recent()
            if recent is not None:
                return recent
        session = self.turns.new_session(save=save)
        if save:
            self.turns.hub.publish(session.id, "meta")
        return session

    async def _slash(self, session: Session, line: str) -> dict[str, Any]:
        agent = self.turns.agent(session)
        if line.split()[0] == "/image":
            return await self._image(session, line.removeprefix("/image").strip())
        outcome = await slash_commands.run(agent, line, [])
        result: dict[str, Any] = {"id": session.id, "status": "command", "text": outcome.text}
        if outcome.action == "new":
            result["id"] = self.turns.new_session().id
            result["text"] = "new task"
        elif outcome.action == "stop":
            result["text"] = "stopped" if await self.turns.stop(session.id) else "nothing is running"
        elif outcome.action == "restart":
            restarted = await self.turns.restart(session)
            result["text"] = "restarted" if restarted else "nothing to run again"
        if self.turns.store.by_id(result["id"]) is None:
            result["id"] = ""  # a command in a task that was never saved: the page stays where it is
        else:
            self.turns.hub.publish(result["id"], "meta")
        return result

    async def _image(self, session: Session, prompt: str) -> dict[str, Any]:
        """``/image PROMPT``: a picture through the image slot, saved in the task's folder and shown."""
        folder = self.turns.agent(session).tools.base_dir
        try:
            image = await imagegen.generate(self.config, prompt, folder)
        except imagegen.ImageError as exc:
            return {
                "id": session.id if self.turns.store.by_id(session.id) else "",
                "status": "command",
                "text": str(exc),
            }
        # Kept in the conversation, the picture as an artifact of the answer: reopening the task shows it again,
        # and the model knows it was made (the artifact key itself is never sent to a provider).
        saved = f"{imagegen.FOLDER}/{image.name}"
        session.messages.append({"role": "user", "content": f"/image {prompt}"})
        session.messages.append(
            {"role": "assistant", "content": f"saved {saved}", "artifacts": [{"kind": "image", "path": saved}]}
        )
        await asyncio.to_thread(self.turns.store.save, session)
        self.turns.hub.publish(session.id, "meta")
        url = f"/api/sessions/{session.id}/image/{image.name}"
        return {"id": session.id, "status": "command", "text": f"saved {saved}", "image": url}

    async def unschedule(self, request: Request, _: CookieSession) -> Response:
        """``POST /api/schedules/{id}/remove``: delete a schedule (the ✕ on its row in the task list)."""
        removed = await asyncio.to_thread(self.schedules.remove, request.path_params["id"])
        if not removed:
            return _error(404, "no such schedule")
        self.turns.hub.publish("", "schedule", "removed", {"schedule": request.path_params["id"]})
        return JSONResponse({"ok": True})

    async def image(self, request: Request, _: CookieSession) -> Response:
        """``GET /api/sessions/{sid}/image/{name}``: a picture under the task's ``images/`` folder."""
        session = self.turns.session(request.path_params["sid"])
        name = request.path_params["name"]
        if session is None or not imagegen.NAME.fullmatch(name):
            return _error(404, "no such image")
        path = self.turns.agent(session).tools.base_dir / imagegen.FOLDER / name
        if not path.is_file():
            return _error(404, "no such image")
        kind = {"jpg": "jpeg", "jpeg": "jpeg", "webp": "webp"}.get(name.rsplit(".", 1)[1], "png")
        headers = {"cache-control": "private, max-age=3600", "x-content-type-options": "nosniff"}
        return Response(await asyncio.to_thread(path.read_bytes), media_type=f"image/{kind}", headers=headers)

    async def act(self, request: Request, _: CookieSession) -> Response:
        """``POST /api/sessions/{sid}/{verb}`` with a JSON body."""
        verb = self.verbs.get(request.path_params["verb"])
        if verb is None:
            return _error(404, "no such action")
        session = self.turns.session(request.path_params["sid"])
        if session is None:
            return _error(404, "no such task")
        try:
            body = await request.json() if await request.body() else {}
        except ValueError:
            return _error(400, "the body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        return JSONResponse(await verb(request, session, body))

    async def _rename(self, request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        session.title = " ".join(str(body.get("title") or "").split())[:120]
        self.turns.save_meta(session)
        return {"ok": True, "title": session.label}

    def _flag(self, name: str, value: bool) -> Callable[[Request, Session, dict[str, Any]], Awaitable[dict[str, Any]]]:
        async def set_flag(request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
            setattr(session, name, value)
            self.turns.save_meta(session)
            return {"ok": True}

        return set_flag

    async def _delete(self, request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        await self.turns.delete(session)
        return {"ok": True}

    async def _stop(self, request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": await self.turns.stop(session.id)}

    async def _restart(self, request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": await self.turns.restart(session)}

    async def _command(self, request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        line = str(body.get("line") or "").strip()
        if not line.startswith("/"):
            return {"id": session.id, "status": "command", "text": "a command starts with /"}
        return await self._slash(session, line)

    async def _approve(self, request: Request, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": self.turns.answer(session.id, str(body.get("id") or ""), bool(body.get("allow")))}

    def routes(self) -> list[BaseRoute]:
        """The route table."""
        return [
            Route("/", self.page("workbench.html"), methods=["GET"]),
            Route("/pet", self.page("pet.html"), methods=["GET"]),
            Route("/settings", self.page("settings.html"), methods=["GET"]),
            Route("/channels", self.page("channels.html"), methods=["GET"]),
            Route("/api/channels", self.read(self.channels.read), methods=["GET"]),
            Route("/api/channels/connect", self.write(self.channels.connect), methods=["POST"]),
            Route("/api/channels/disconnect", self.write(self.channels.disconnect), methods=["POST"]),
            Route("/api/channels/pair", self.write(self.channels.pair), methods=["POST"]),
            Route("/api/settings", self.read(self.settings.read), methods=["GET"]),
            Route("/api/settings/test", self.write(self.settings.test), methods=["POST"]),
            Route("/api/settings/log-level", self.write(self.settings.log_level), methods=["POST"]),
            Route("/api/settings/slot", self.write(self.settings.save_slot), methods=["POST"]),
            Route("/api/settings/general", self.write(self.settings.save_general), methods=["POST"]),
            Route("/api/settings/cap", self.write(self.settings.save_cap), methods=["POST"]),
            Route("/api/usage", self.read(self.settings.usage), methods=["GET"]),
            Route("/api/diagnostics", self.read(self.settings.diagnostics), methods=["GET"]),
            Route("/signin", self.signin, methods=["GET"]),
            Route("/signout", self.write(self.signout), methods=["POST"]),
            Route("/workbench/link", self.link, methods=["POST"]),
            Route("/api/state", self.read(self.state), methods=["GET"]),
            Route("/api/search", self.read(self.search), methods=["GET"]),
            Route("/api/events", self.read(self.events), methods=["GET"]),
            Route("/api/sessions", self.write(self.create), methods=["POST"]),
            Route("/api/sessions/{sid}", self.read(self.session), methods=["GET"]),
            Route("/api/sessions/{sid}/{verb}", self.write(self.act), methods=["POST"]),
            Route("/api/sessions/{sid}/image/{name}", self.read(self.image), methods=["GET"]),
            Route("/api/send", self.write(self.send), methods=["POST"]),
            Route("/api/transcribe", self.write(self.transcribe), methods=["POST"]),
            Route("/api/schedules/{id}/remove", self.write(self.unschedule), methods=["POST"]),
            Mount("/static", StaticFiles(packages=[("memmy.workbench", "static")]), name="workbench-static"),
        ]
