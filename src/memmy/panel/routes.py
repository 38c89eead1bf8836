"""The panel's HTTP side: sign-in, page routes, form actions (CSRF-checked), the sync progress stream."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from memmy.commands.admin import Export, ImportStore, ReloadConfig, Wipe
from memmy.commands.dream import DreamRestore
from memmy.commands.evolution import Feedback
from memmy.commands.governance import RestoreTombstone, ReviewDecision, ReviewQueue
from memmy.commands.imports import StartScan
from memmy.commands.memory import DeleteMemory, RestoreMemory
from memmy.domain import readable_text
from memmy.errors import InvalidArgument, MemmyError
from memmy.keys.args import ForgetArgs, key_args
from memmy.namespace import Namespace
from memmy.panel import integrations, pages
from memmy.panel.auth import SESSIONS_FILE, PanelAuth, PanelSession, host_allowed
from memmy.panel.i18n import LANG_COOKIE, LANGUAGES, pick_language, translator
from memmy.service import MemoryService, custom_sources

NAV = (
    ("overview", "/panel"),
    ("memories", "/panel/memories"),
    ("tasks", "/panel/tasks"),
    ("experiences", "/panel/experiences"),
    ("world_models", "/panel/world-models"),
    ("skills", "/panel/skills"),
    ("review", "/panel/review"),
    ("recalls", "/panel/recalls"),
    ("analytics", "/panel/analytics"),
    ("logs", "/panel/logs"),
    ("agents", "/panel/agents"),
    ("settings", "/panel/settings"),
)
#: The largest archive the Settings page accepts as an upload (the daemon's JSON body limit is far lower).
MAX_UPLOAD_BYTES = 1024 * 1024 * 1024
UPLOAD_PATHS = ("/panel/settings/import",)
PageHandler = Callable[[Request, PanelSession], Awaitable[Response]]
ActionHandler = Callable[[Request, dict[str, str]], Any]


async def read_form(request: Request) -> tuple[dict[str, str], dict[str, UploadFile]]:
    """A POST's fields (urlencoded or multipart, last value wins) and, for multipart, its uploaded files."""
    if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        parsed = await request.form(max_files=1, max_fields=50)
        form: dict[str, str] = {}
        uploads: dict[str, UploadFile] = {}
        for key, value in parsed.multi_items():
            if isinstance(value, UploadFile):
                uploads[key] = value
            else:
                form[key] = value
        return form, uploads
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}, {}


async def close_uploads(uploads: dict[str, UploadFile]) -> None:
    """Release the spooled upload files."""
    for upload in uploads.values():
        await upload.close()


def _safe_next(value: str | None, default: str = "/panel") -> str:
    """Only redirect inside the panel."""
    if value and value.startswith("/panel") and "//" not in value and "\\" not in value:
        return value
    return default


def _language_links(request: Request) -> dict[str, str]:
    """The language switch's links: this page with its query kept and ``lang`` set."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k not in ("lang", "msg", "err")]
    return {code: f"{request.url.path}?{urlencode([*kept, ('lang', code)])}" for code in LANGUAGES}


#: A favicon that needs no token or session: browsers ask for ``/favicon.ico`` on every page.
FAVICON = files("memmy.panel").joinpath("static", "favicon.svg")


async def favicon(request: Request) -> Response:
    """``GET /favicon.ico`` (and the panel's ``<link rel=icon>``): memmy's icon, anonymous."""
    return Response(FAVICON.read_bytes(), media_type="image/svg+xml", headers={"cache-control": "max-age=86400"})


class Panel:
    """Routes for ``/panel`` bound to one service."""

    def __init__(self, service: MemoryService, auth: PanelAuth | None = None) -> None:
        self.service = service
        self.auth = auth or PanelAuth(service.config.home / SESSIONS_FILE)
        self.env = Environment(
            loader=PackageLoader("memmy.panel", "templates"), autoescape=select_autoescape(["html"]), enable_async=False
        )
        self.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
        self.env.filters["readable"] = lambda v: readable_text(str(v or ""))  # no RawTurn:/step 1 / labels

    @property
    def ns(self) -> Namespace:
        """The panel's identity in audit rows."""
        return Namespace(source="panel", user_id=self.service.config.user_id)

    # -- plumbing ---------------------------------------------------------------------------------
    def render(
        self, request: Request, template: str, session: PanelSession | None, http_status: int = 200, **ctx: Any
    ) -> Response:
        """Render a page in the request's language."""
        chosen = request.query_params.get("lang")
        language = pick_language(request.headers.get("accept-language"), chosen, request.cookies.get(LANG_COOKIE))
        body = self.env.get_template(template).render(
            t=translator(language),
            lang=language,
            lang_links=_language_links(request),
            nav=NAV,
            path=request.url.path,
            csrf=session.csrf if session else "",
            msg=request.query_params.get("msg", ""),
            err=request.query_params.get("err", ""),
            request=request,
            **ctx,
        )
        response = HTMLResponse(
            body,
            status_code=http_status,
            headers={
                "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
                "x-frame-options": "DENY",
                "referrer-policy": "same-origin",  # no-referrer makes Chrome post forms with Origin: null
                "cache-control": "no-store",
            },
        )
        if chosen in LANGUAGES and chosen != request.cookies.get(LANG_COOKIE):  # the choice lasts past this page
            response.set_cookie(LANG_COOKIE, chosen, max_age=365 * 86400, path="/panel", samesite="lax", httponly=True)
        return response

    def _refuse(self, request: Request, status: int, message: str) -> Response:
        return self.render(request, "signin.html", None, http_status=status, problem=message)

    def page(
        self, fn: Callable[[Request], dict[str, Any]], template: str, fragment: str | None = None
    ) -> Callable[[Request], Awaitable[Response]]:
        """A GET page: host check, session check, data in the thread pool, render.

        With ``fragment``, a request carrying ``x-panel-fragment: 1`` (panel.js) gets only that partial template.
        """

        async def handler(request: Request) -> Response:
            if not host_allowed(request):
                return self._refuse(request, 403, "foreign Host or Origin refused")
            session = self.auth.session(request)
            if session is None:
                return self._refuse(request, 401, "")
            try:
                data = await run_in_threadpool(fn, request)
            except MemmyError as exc:
                return self.render(
                    request,
                    "error.html",
                    session,
                    http_status=404 if exc.code == "not_found" else 400,
                    problem=exc.message,
                )
            partial = fragment if fragment and request.headers.get("x-panel-fragment") == "1" else None
            return self.render(request, partial or template, session, **data)

        return handler

    def action(self, fn: ActionHandler, default_next: str = "/panel") -> Callable[[Request], Awaitable[Response]]:
        """A form POST: host check, session, CSRF token, run, then redirect back with a message."""

        async def handler(request: Request) -> Response:
            if not host_allowed(request):
                return self._refuse(request, 403, "foreign Host or Origin refused")
            session = self.auth.session(request)
            if session is None:
                return self._refuse(request, 401, "")
            form, uploads = await read_form(request)
            if not self.auth.csrf_ok(session, form.get("csrf") or request.headers.get("x-csrf-token")):
                await close_uploads(uploads)
                return self.render(
                    request, "error.html", session, http_status=403, problem="missing or wrong CSRF token"
                )
            request.state.uploads = uploads
            target = _safe_next(form.get("next"), default_next)
            try:
                result = await run_in_threadpool(fn, request, form)
            except MemmyError as exc:
                self.service.governance.reads.invalidate()
                return RedirectResponse(f"{target}{'&' if '?' in target else '?'}err={quote(exc.message)}", 303)
            finally:
                await close_uploads(uploads)
            self.service.governance.reads.invalidate()  # the panel's own change shows at once
            if isinstance(result, Response):
                return result
            message = result if isinstance(result, str) else "done"
            return RedirectResponse(f"{target}{'&' if '?' in target else '?'}msg={quote(message)}", 303)

        return handler

    # -- sign-in ----------------------------------------------------------------------------------
    async def login(self, request: Request) -> Response:
        """``/panel/login?code=``: spend a one-time code, set the session cookie, go to the panel."""
        if not host_allowed(request):
            return self._refuse(request, 403, "foreign Host or Origin refused")
        session = self.auth.redeem(request.query_params.get("code", ""))
        if session is None:
            return self.render(request, "signin.html", None, http_status=401, problem="link_used")
        response = RedirectResponse(_safe_next(request.query_params.get("next")), 303)
        response.headers["set-cookie"] = self.auth.cookie_header(session)
        return response

    async def logout(self, request: Request) -> Response:
        """Sign out (POST with the CSRF token)."""
        session = self.auth.session(request)
        if session is not None:
            raw = (await request.body()).decode("utf-8", "replace")
            if self.auth.csrf_ok(session, parse_qs(raw).get("csrf", [""])[-1]):
                self.auth.sign_out(session)
        response = RedirectResponse("/panel", 303)
        response.headers["set-cookie"] = "memmy_panel=; Path=/panel; HttpOnly; SameSite=Strict; Max-Age=0"
        return response

    # -- actions ----------------------------------------------------------------------------------
    def _memory_action(self, request: Request, form: dict[str, str]) -> str:
        memory_id, verb = request.path_params["memory_id"], request.path_params["verb"]
        svc, ns = self.service, self.ns
        reason = form.get("reason") or "panel"
        if verb == "edit":
            result = svc.keys_call(
                key_args("correct", {"memory_id": memory_id, "content": form.get("content", "")}), ns
            )
            return f"saved as {result.get('new_id') if isinstance(result, dict) else None}"
        if verb == "delete":
            svc.delete_memory(memory_id, DeleteMemory(reason=reason), ns)
            return f"deleted {memory_id} (Restore on its page undoes it)"
        if verb == "restore":
            svc.restore_memory(memory_id, RestoreMemory(reason=reason), ns)
            return f"restored {memory_id}"
        if verb == "forget":
            result = svc.keys_call(ForgetArgs(memory_id=memory_id, reason=reason), ns)
            return f"forgot {memory_id} (tombstone {result.get('tombstone_id') if isinstance(result, dict) else None})"
        if verb in ("archive", "activate"):
            svc.governance.set_status(memory_id, "archived" if verb == "archive" else "activated", ns)
            return f"{verb}d {memory_id}"
        if verb == "feedback":
            body = {"id": memory_id, "polarity": form.get("polarity", "negative"), "note": form.get("note", "")}
            svc.give_feedback(Feedback.from_json(body), ns)
            return "feedback recorded"
        raise InvalidArgument(f"unknown action {verb}")

    def _restore_tombstone(self, request: Request, form: dict[str, str]) -> str:
        self.service.restore_tombstone(request.path_params["tombstone_id"], RestoreTombstone(reason="panel"), self.ns)
        return "restored"

    def _review(self, request: Request, form: dict[str, str]) -> str:
        body: dict[str, Any] = {"decision": form.get("decision", "")}
        if form.get("content"):
            body["content"] = form["content"]
        if form.get("reason"):
            body["reason"] = form["reason"]
        decision = self.service.redacted(ReviewDecision.from_json(body))
        result = self.service.governance.review(request.path_params["memory_id"], decision, self.ns)
        return f"{result['id']}: {result['review']['state']}"

    def _recall_wrong(self, request: Request, form: dict[str, str]) -> str:
        note = f"marked wrong in the panel (recall {form.get('event', '')})"
        body = {"id": form.get("memory", ""), "polarity": "negative", "note": note}
        self.service.give_feedback(Feedback.from_json(body), self.ns)
        return "negative feedback recorded"

    def _task_feedback(self, request: Request, form: dict[str, str]) -> str:
        body = {"id": form.get("id", ""), "polarity": form.get("polarity", ""), "note": form.get("note", "")}
        self.service.give_feedback(Feedback.from_json(body), self.ns)
        return "feedback recorded"

    def _dream_restore(self, request: Request, form: dict[str, str]) -> str:
        self.service.dream_restore(
            request.path_params["dream_id"], DreamRestore(force=form.get("force") == "1"), self.ns
        )
        return "restored"

    def _sync(self, request: Request, form: dict[str, str]) -> Response:
        body: dict[str, Any] = {"mode": "full" if form.get("mode") == "full" else "incremental", "confirm": True}
        if form.get("source"):
            body["sources"] = [form["source"]]
        job = self.service.imports.start(StartScan.from_json(body))
        return RedirectResponse(f"/panel/agents?job={quote(job['jobId'])}", 303)

    def _add_agent(self, request: Request, form: dict[str, str]) -> Response:
        """Save a recipe for another agent (as ``memmy-memory sources add`` does) and import it with live progress."""
        added = custom_sources.add_recipe(self.service.config.home, form)
        self.service.governance.record("source.add", "source", added["source"], self.ns, meta=added)
        job = self.service.imports.start(StartScan.from_json({"sources": [added["source"]], "confirm": True}))
        return RedirectResponse(f"/panel/agents?job={quote(job['jobId'])}", 303)

    def _sync_control(self, request: Request, form: dict[str, str]) -> str:
        self.service.imports.control(request.path_params["job_id"], request.path_params["verb"])
        return str(request.path_params["verb"])

    def _integration(self, request: Request, form: dict[str, str]) -> str:
        agent, verb = request.path_params["agent"], request.path_params["verb"]
        if verb not in ("install", "remove"):
            raise InvalidArgument(f"unknown action {verb}")
        try:
            files = integrations.change(self.service.config, agent, verb == "install")
        except (OSError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
        self.service.governance.record(f"integration.{verb}", "agent", agent, self.ns, meta={"files": files})
        return f"{agent}: {verb} done ({len(files)} file(s) changed)"

    def _reload(self, request: Request, form: dict[str, str]) -> str:
        result = self.service.reload_config(ReloadConfig(reason="panel"), self.ns)
        return "reloaded; changed: " + (", ".join(result["changed"]) or "nothing")

    def _export(self, request: Request, form: dict[str, str]) -> Response:
        result = self.service.ownership.export(Export(raw=form.get("noRaw") != "1"), self.ns)
        path = Path(result["path"])
        return FileResponse(path, filename=path.name, media_type="application/zip")

    def _import(self, request: Request, form: dict[str, str]) -> str:
        """Import an archive uploaded from the browser (multipart): spooled to a private temporary file first."""
        upload: UploadFile | None = getattr(request.state, "uploads", {}).get("archive")
        if upload is None or not upload.filename:
            raise InvalidArgument("choose an export archive (.zip) to import")
        name = Path(upload.filename).name
        with tempfile.TemporaryDirectory(prefix="memmy-upload-") as tmp:
            path = Path(tmp) / (name or "upload.zip")
            with path.open("wb") as handle:
                upload.file.seek(0)
                shutil.copyfileobj(upload.file, handle, 1024 * 1024)
            try:
                body = {
                    "path": str(path),
                    "onConflict": form.get("onConflict", "skip"),
                    "dryRun": form.get("dryRun") == "1",
                    "label": f"upload:{name}",
                }
                result = self.service.ownership.import_(ImportStore.from_json(body), self.ns)
            except MemmyError as exc:  # name the file the user chose, not the temporary copy
                raise InvalidArgument(exc.message.replace(str(path), name)) from None
        verb = "would add" if result["dryRun"] else "added"
        return f"{name}: {verb} {result['added']} rows, {result['conflicts']} already present"

    def _wipe(self, request: Request, form: dict[str, str]) -> str:
        if form.get("confirm") != "1":
            raise InvalidArgument("tick the confirmation box to wipe the store")
        result = self.service.ownership.wipe(Wipe(confirm=True, backup=form.get("noBackup") != "1"), self.ns)
        return f"removed {sum(result['removed'].values())} rows; backup: {result['backup'] or 'none'}"

    # -- sync progress stream ---------------------------------------------------------------------
    async def sync_events(self, request: Request) -> Response:
        """Server-sent ``progress`` events of one import job, for the Cross-agent page."""
        if not host_allowed(request) or self.auth.session(request) is None:
            return Response(status_code=401)
        job_id = request.path_params["job_id"]
        try:
            version, status = await run_in_threadpool(self.service.imports.wait_for_change, job_id, -1, 0.0)
        except MemmyError:
            return Response(status_code=404)

        async def stream() -> AsyncIterator[bytes]:
            nonlocal version, status
            while True:
                yield f"event: progress\ndata: {json.dumps(status, ensure_ascii=False)}\n\n".encode()
                if status["state"] in ("done", "stopped", "failed") or await request.is_disconnected():
                    return
                await asyncio.sleep(0)
                version, status = await run_in_threadpool(self.service.imports.wait_for_change, job_id, version, 1.0)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    # -- table of routes --------------------------------------------------------------------------
    def routes(self) -> list[BaseRoute]:
        """Every ``/panel`` route (the daemon mounts these next to the API)."""
        svc = self.service

        def q(request: Request) -> dict[str, str]:
            return dict(request.query_params)

        def layer(name: str) -> Callable[[Request], dict[str, Any]]:
            return lambda r: {**pages.layer_page(svc, pages.LAYER_PAGES[name], q(r)), "page_key": name}

        get = [
            ("/panel", lambda r: pages.overview(svc, str(r.base_url)), "overview.html"),
            ("/panel/memories", lambda r: pages.memories(svc, q(r)), "memories.html"),
            ("/panel/memories/results", lambda r: pages.memories(svc, q(r), run_search=True), "memories.html"),
            ("/panel/memories/{memory_id}", lambda r: pages.memory(svc, r.path_params["memory_id"]), "memory.html"),
            ("/panel/tasks", lambda r: pages.tasks(svc, q(r)), "tasks.html"),
            ("/panel/experiences", layer("experiences"), "layer.html"),
            ("/panel/world-models", layer("world-models"), "layer.html"),
            ("/panel/skills", layer("skills"), "layer.html"),
            (
                "/panel/review",
                lambda r: {
                    "queue": svc.governance.review_queue(
                        ReviewQueue.from_json({"state": r.query_params.get("state", "pending")})
                    )
                },
                "review.html",
            ),
            ("/panel/recalls", lambda r: pages.recalls(svc, q(r)), "recalls.html"),
            ("/panel/analytics", lambda r: pages.analytics(svc), "analytics.html"),
            ("/panel/logs", lambda r: pages.logs(svc, q(r)), "logs.html"),
            ("/panel/agents", lambda r: pages.agents(svc, q(r)), "agents.html"),
            ("/panel/settings", lambda r: pages.settings(svc), "settings.html"),
        ]
        post = [
            ("/panel/memories/{memory_id}/{verb}", self._memory_action, "/panel/memories"),
            ("/panel/tombstones/{tombstone_id}/restore", self._restore_tombstone, "/panel/memories"),
            ("/panel/review/{memory_id}", self._review, "/panel/review"),
            ("/panel/recalls/wrong", self._recall_wrong, "/panel/recalls"),
            ("/panel/tasks/feedback", self._task_feedback, "/panel/tasks"),
            ("/panel/dreams/{dream_id}/restore", self._dream_restore, "/panel/logs?kind=dreams"),
            ("/panel/sync", self._sync, "/panel/agents"),
            ("/panel/sync/{job_id}/{verb}", self._sync_control, "/panel/agents"),
            ("/panel/agents/add", self._add_agent, "/panel/agents"),
            ("/panel/integrations/{agent}/{verb}", self._integration, "/panel/agents"),
            ("/panel/settings/reload", self._reload, "/panel/settings"),
            ("/panel/settings/export", self._export, "/panel/settings"),
            ("/panel/settings/import", self._import, "/panel/settings"),
            ("/panel/settings/wipe", self._wipe, "/panel/settings"),
        ]
        routes: list[BaseRoute] = [
            Route("/panel/login", self.login, methods=["GET"]),
            Route("/favicon.ico", favicon, methods=["GET"]),
            Route("/panel/logout", self.logout, methods=["POST"]),
            Route("/panel/sync/{job_id}/events", self.sync_events, methods=["GET"]),
            Mount("/panel/static", StaticFiles(packages=[("memmy.panel", "static")]), name="panel-static"),
        ]
        fragments = {"/panel/memories/results": "search_results.html"}
        routes += [
            Route(path, self.page(fn, template, fragments.get(path)), methods=["GET"]) for path, fn, template in get
        ]
        routes += [Route(path, self.action(fn, nxt), methods=["POST"]) for path, fn, nxt in post]
        return routes
