"""The route table: one row per HTTP endpoint. The Starlette app (``server/app.py``) and the OpenAPI document
(``server/openapi.py``) are both built from it, so adding an endpoint is adding one row.

A row names its method and path, its request type (a :class:`~memmy.commands.base.Command` read from the JSON
body, the query string or the path; a plain JSON Schema only for the undocumented catch-all of unknown key-graph
operations, which passes its raw body), its answer type (a
``TypedDict`` of ``memmy/commands/answers.py``), the service call, and the idempotency operation a request carrying
``adapterId`` + ``requestId`` is recorded under (``{name}`` is filled from the path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memmy.commands import answers as r
from memmy.commands.admin import AddPerson, Export, ImportStore, ReloadConfig, Wipe
from memmy.commands.base import Command
from memmy.commands.dream import DreamGet, DreamLog, DreamRestore, DreamRun
from memmy.commands.evolution import Feedback, ListEpisodes, ListJobs, RunWorker
from memmy.commands.governance import ListLogs, ListTombstones, RestoreTombstone, ReviewDecision, ReviewQueue
from memmy.commands.imports import StartScan
from memmy.commands.memory import (
    AddMemory,
    ArchiveMemory,
    DeleteMemory,
    ProcessingStatus,
    PurgeCanary,
    RestoreMemory,
    SearchMemory,
)
from memmy.commands.panel import MemoryLogs, PanelItems, PanelTasks
from memmy.commands.turn_requests import CloseSession, CompleteTurn, OpenSession, StartTurn
from memmy.keys.args import KEY_ARGS, KeyArgs, key_args
from memmy.namespace import Namespace
from memmy.service import MemoryService


@dataclass(frozen=True)
class Call:
    """What a service call gets besides its request: the service, the caller's namespace, the path's values."""

    service: MemoryService
    ns: Namespace
    path: dict[str, str]


#: ``(call, request) -> JSON answer``; the request is the row's Command (or the raw body for a schema row).
ServiceCall = Callable[[Call, Any], Any]


@dataclass(frozen=True)
class Row:
    """One endpoint."""

    method: str
    path: str
    summary: str
    #: The service call; None for the few endpoints with a handler of their own on ``Api`` (``handler``).
    call: ServiceCall | None = None
    #: The request: a Command type, a JSON Schema of a raw body, or None (no body, no query).
    request: type[Command] | dict[str, Any] | None = None
    #: The answer: a ``TypedDict`` of :mod:`memmy.commands.answers` (or the type of a non-JSON body).
    response: object = r.Answer
    idempotency: str | None = None
    #: The ``Api`` method serving a row without ``call``.
    handler: str | None = None
    #: Health answers without the token (details only with it).
    anonymous: bool = False
    #: Left out of the document (the catch-all for unknown key-graph operations).
    documented: bool = True
    #: Success media types other than JSON.
    media: str = "application/json"
    #: The answer carries recalled context for an agent: while the store cannot write, it says so (see
    #: :func:`memmy.server.app.mark_unavailable`).
    recall: bool = False


def _key_row(args: type[KeyArgs]) -> Row:
    return Row(
        "POST",
        f"/api/v1/keys/{args.op}",
        f"Key graph: {args.summary}",
        lambda c, q: c.service.keys_call(q, c.ns),
        args,
        response=r.KEY_ANSWERS[args.op],
    )


def _scan_control_row(action: str) -> Row:
    return Row(
        "POST",
        f"/api/v1/sources/scan/{{job_id}}/{action}",
        f"{action.capitalize()} an import job",
        lambda c, _q: c.service.imports.control(c.path["job_id"], action),
        response=r.ImportJob,
    )


#: Every HTTP endpoint, in match order.
ROUTES: tuple[Row, ...] = (
    Row(
        "GET",
        "/",
        "A small HTML page pointing at the API document and health",
        handler="index",
        response=str,
        media="text/html",
    ),
    Row(
        "GET",
        "/api/v1/health",
        "Health: {ok, version} for anyone; details with the token",
        handler="health",
        response=r.Health,
        anonymous=True,
    ),
    Row("GET", "/api/v1/openapi.json", "This document", handler="openapi", response=r.JSONObject),
    Row(
        "POST",
        "/api/v1/sessions/open",
        OpenSession.summary,
        lambda c, q: c.service.open_session(q, c.ns),
        OpenSession,
        r.SessionOpened,
        idempotency="sessions.create",
    ),
    Row(
        "POST",
        "/api/v1/sessions/{session_id}/close",
        CloseSession.summary,
        lambda c, q: c.service.close_session(q),
        CloseSession,
        r.SessionClosed,
        idempotency="sessions.close:{session_id}",
    ),
    Row(
        "POST",
        "/api/v1/turns/start",
        StartTurn.summary,
        lambda c, q: c.service.start_turn(q, c.ns),
        StartTurn,
        r.TurnStarted,
        idempotency="turn.start",
        recall=True,
    ),
    Row(
        "POST",
        "/api/v1/turns/{turn_id}/complete",
        CompleteTurn.summary,
        lambda c, q: c.service.complete_turn(q, c.ns),
        CompleteTurn,
        r.TurnCompleted,
        idempotency="turn.complete:{turn_id}",
    ),
    Row(
        "POST",
        "/api/v1/memory/search",
        SearchMemory.summary,
        lambda c, q: c.service.search(q, c.ns),
        SearchMemory,
        r.SearchAnswer,
        "memory.search",
        recall=True,
    ),
    Row(
        "POST",
        "/api/v1/memory/add",
        AddMemory.summary,
        lambda c, q: c.service.add_memory(q, c.ns),
        AddMemory,
        r.MemoryAdded,
        "memory.add",
    ),
    Row(
        "GET",
        "/api/v1/memory/logs",
        MemoryLogs.summary,
        lambda c, q: c.service.panel.api_logs(q),
        MemoryLogs,
        r.MemoryLogsPage,
    ),
    Row(
        "POST",
        "/api/v1/memory/processing/status",
        ProcessingStatus.summary,
        lambda c, q: c.service.processing_status(q),
        ProcessingStatus,
        r.Items,
    ),
    Row(
        "POST",
        "/api/v1/memory/{memory_id}/processing/retry",
        "Retry a failed embedding",
        lambda c, q: c.service.retry_processing(c.path["memory_id"]),
        response=r.ProcessingRetried,
    ),
    Row(
        "POST",
        "/api/v1/memory/{memory_id}/archive",
        ArchiveMemory.summary,
        lambda c, q: c.service.archive_memory(c.path["memory_id"], q, c.ns),
        ArchiveMemory,
        r.MemoryArchived,
    ),
    Row(
        "POST",
        "/api/v1/admin/canary/purge",
        PurgeCanary.summary,
        lambda c, q: c.service.purge_canary(q),
        PurgeCanary,
        r.CanaryPurged,
    ),
    Row(
        "POST",
        "/api/v1/memory/{memory_id}/restore",
        RestoreMemory.summary,
        lambda c, q: c.service.restore_memory(c.path["memory_id"], q, c.ns),
        RestoreMemory,
        r.MemoryRestored,
        "memory.restore:{memory_id}",
    ),
    Row(
        "GET",
        "/api/v1/memory/{memory_id}/history",
        "Version chain of a memory (oldest -> newest, with validity)",
        lambda c, q: c.service.memory_history(c.path["memory_id"]),
        response=r.MemoryHistory,
    ),
    *(_key_row(args) for args in KEY_ARGS.values()),
    Row(
        "POST",
        "/api/v1/keys/{op}",
        "Unknown key-graph operation (404)",
        lambda c, body: c.service.keys_call(key_args(c.path["op"], body), c.ns),
        {"type": "object"},
        documented=False,
    ),
    Row(
        "GET",
        "/api/v1/tombstones",
        ListTombstones.summary,
        lambda c, q: c.service.list_tombstones(q),
        ListTombstones,
        r.TombstoneList,
    ),
    Row(
        "POST",
        "/api/v1/feedback",
        Feedback.summary,
        lambda c, q: c.service.give_feedback(q, c.ns),
        Feedback,
        r.FeedbackRecorded,
    ),
    Row(
        "GET", "/api/v1/episodes", ListEpisodes.summary, lambda c, q: c.service.list_episodes(q), ListEpisodes, r.Items
    ),
    Row("GET", "/api/v1/evolution/jobs", ListJobs.summary, lambda c, q: c.service.list_jobs(q), ListJobs, r.JobList),
    Row(
        "POST",
        "/api/v1/tombstones/{tombstone_id}/restore",
        RestoreTombstone.summary,
        lambda c, q: c.service.restore_tombstone(c.path["tombstone_id"], q, c.ns),
        RestoreTombstone,
        r.TombstoneRestored,
    ),
    Row(
        "POST", "/api/v1/dream/run", DreamRun.summary, lambda c, q: c.service.dream_run(q, c.ns), DreamRun, r.DreamPass
    ),
    Row("GET", "/api/v1/dream/log", DreamLog.summary, lambda c, q: c.service.dream_log(q), DreamLog, r.DreamLogPage),
    Row(
        "GET",
        "/api/v1/dream/{dream_id}",
        DreamGet.summary,
        lambda c, q: c.service.dream_get(c.path["dream_id"], q),
        DreamGet,
        r.DreamRecord,
    ),
    Row(
        "POST",
        "/api/v1/dream/{dream_id}/restore",
        DreamRestore.summary,
        lambda c, q: c.service.dream_restore(c.path["dream_id"], q, c.ns),
        DreamRestore,
        r.DreamRestored,
    ),
    Row(
        "GET",
        "/api/v1/memory/{memory_id}",
        "Memory detail",
        lambda c, q: c.service.get_memory(c.path["memory_id"], ns=c.ns),
        response=r.MemoryDetail,
    ),
    Row(
        "DELETE",
        "/api/v1/memory/{memory_id}",
        DeleteMemory.summary,
        lambda c, q: c.service.delete_memory(c.path["memory_id"], q, c.ns),
        DeleteMemory,
        r.MemoryDeleted,
        "memory.delete:{memory_id}",
    ),
    Row(
        "GET",
        "/api/v1/panel/overview",
        "Panel overview",
        lambda c, q: c.service.panel.overview(),
        response=r.PanelOverview,
    ),
    Row(
        "GET",
        "/api/v1/panel/analysis",
        "Memory analytics",
        lambda c, q: c.service.panel.analysis(),
        response=r.PanelAnalysis,
    ),
    Row(
        "GET",
        "/api/v1/panel/items",
        "Entry list (page, layer, status, q, sourceAgent)",
        lambda c, q: c.service.panel.items(q),
        PanelItems,
        r.ItemsPage,
    ),
    Row(
        "GET", "/api/v1/panel/tasks", PanelTasks.summary, lambda c, q: c.service.panel.tasks(q), PanelTasks, r.TasksPage
    ),
    Row(
        "POST",
        "/api/v1/admin/reload-config",
        ReloadConfig.summary,
        lambda c, q: c.service.reload_config(q, c.ns),
        ReloadConfig,
        r.ConfigReloaded,
    ),
    Row("POST", "/api/v1/admin/shutdown", "Stop the daemon", handler="shutdown", response=r.Accepted),
    Row("POST", "/api/v1/worker/run", RunWorker.summary, lambda c, q: c.service.run_worker(q), RunWorker, r.WorkerRun),
    Row(
        "GET",
        "/api/v1/sources",
        "Detected agent history sources, last sync and counts",
        lambda c, q: c.service.imports.sources(),
        response=r.Sources,
    ),
    Row(
        "POST",
        "/api/v1/sources/scan",
        "Start a history import job",
        lambda c, scan: c.service.imports.start(scan),
        StartScan,
        r.ImportJob,
    ),
    Row(
        "GET",
        "/api/v1/sources/scan/{job_id}",
        "Import job progress",
        lambda c, q: c.service.imports.status(c.path["job_id"]),
        response=r.ImportJob,
    ),
    Row(
        "GET",
        "/api/v1/sources/scan/{job_id}/events",
        "Import progress as server-sent events",
        handler="scan_events",
        response=r.ImportJob,
        media="text/event-stream",
    ),
    *(_scan_control_row(action) for action in ("pause", "resume", "stop")),
    Row("GET", "/api/v1/logs", ListLogs.summary, lambda c, q: c.service.governance.logs_page(q), ListLogs, r.LogsPage),
    Row(
        "GET",
        "/api/v1/review",
        ReviewQueue.summary,
        lambda c, q: c.service.governance.review_queue(q),
        ReviewQueue,
        r.ReviewPage,
    ),
    Row(
        "POST",
        "/api/v1/review/{memory_id}",
        ReviewDecision.summary,
        lambda c, q: c.service.governance.review(c.path["memory_id"], c.service.redacted(q), c.ns),
        ReviewDecision,
        r.ReviewDecided,
    ),
    Row(
        "POST",
        "/api/v1/admin/export",
        Export.summary,
        lambda c, q: c.service.ownership.export(q, c.ns),
        Export,
        r.Exported,
    ),
    Row(
        "POST",
        "/api/v1/admin/import",
        ImportStore.summary,
        lambda c, q: c.service.ownership.import_(q, c.ns),
        ImportStore,
        r.Imported,
    ),
    Row("POST", "/api/v1/admin/wipe", Wipe.summary, lambda c, q: c.service.ownership.wipe(q, c.ns), Wipe, r.Wiped),
    Row("GET", "/api/v1/admin/users", "A team server's people", lambda c, q: c.service.team.list(), response=r.People),
    Row(
        "POST",
        "/api/v1/admin/users",
        AddPerson.summary,
        lambda c, q: c.service.team.add(q.name, c.ns),
        AddPerson,
        r.PersonAdded,
    ),
    Row(
        "POST",
        "/api/v1/admin/users/{name}/revoke",
        "Revoke a person's token (refused from the next request on)",
        lambda c, q: c.service.team.revoke(c.path["name"], c.ns),
        response=r.Person,
    ),
)
