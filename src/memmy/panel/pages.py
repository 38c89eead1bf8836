"""Read side of the panel: one function per page, turning service calls into template context."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from memmy.commands.dream import DreamLog
from memmy.commands.governance import ListLogs, ListTombstones
from memmy.commands.memory import SearchMemory
from memmy.commands.panel import PanelTasks
from memmy.errors import InvalidArgument, MemmyError
from memmy.kinds import memory as stored
from memmy.namespace import Namespace
from memmy.panel import integrations
from memmy.service import MemoryService
from memmy.service.memories import memory_item

LAYERS = ("L1", "L2", "L3", "Skill")
LAYER_PAGES = {"experiences": "L2", "world-models": "L3", "skills": "Skill"}
SECRET_WORDS = ("key", "token", "secret", "password")
RECALLS_PER_PAGE = 10


def mask_secrets(tree: Any, name: str = "") -> Any:
    """The config tree with every non-empty secret-looking value replaced by ``••••``."""
    if isinstance(tree, dict):
        return {k: mask_secrets(v, k) for k, v in tree.items()}
    if isinstance(tree, list):
        return [mask_secrets(v, name) for v in tree]
    if isinstance(tree, str) and tree and any(w in name.lower() for w in SECRET_WORDS):
        return "••••"
    return tree


def bar_chart(points: list[tuple[str, float]], height: int = 80) -> dict[str, Any]:
    """Bars for an inline SVG: ``[(label, value)]`` scaled to ``height``."""
    peak = max((v for _, v in points), default=0.0) or 1.0
    width = 12
    bars = [
        {"x": i * (width + 2), "h": round(height * v / peak, 1), "label": label, "value": v}
        for i, (label, v) in enumerate(points)
    ]
    return {"bars": bars, "width": max(1, len(points) * (width + 2)), "height": height, "barWidth": width}


def overview(service: MemoryService, daemon_url: str = "http://127.0.0.1:18960") -> dict[str, Any]:
    """Counts per layer and status, today's injections, sources, queues and warnings (``daemon_url``: where the
    browser reached this daemon, which installed hooks must point at too)."""
    reads = service.governance.reads
    counts = reads.counts()
    by_source = reads.by_source()
    total = sum(n for _, n in by_source) or 1
    health = service.health()
    today = reads.injected_today(datetime.now(UTC).date().isoformat())
    sources = service.imports.sources()["sources"]
    jobs = health["evolution"]["jobs"]
    warnings = []
    fault = service.db.write_probe()  # cached briefly; a failed write stands until a write succeeds
    if fault:
        warnings.append(f"the store is degraded: {fault} (memmy-memory doctor names the fix)")
    failed = health["embeddingQueue"]["failed"]
    if failed:
        warnings.append(f"{failed} embeddings failed (memmy-memory worker run retries them)")
    if jobs.get("failed"):
        warnings.append(f"{jobs['failed']} evolution jobs failed (see memmy-memory jobs --status failed)")
    if health["evolution"]["workerLastError"]:
        warnings.append(f"evolution worker: {health['evolution']['workerLastError']}")
    if health["models"]["embedding"]["lastError"]:
        warnings.append(f"embedding: {health['models']['embedding']['lastError']}")
    pending = reads.pending_review()
    if pending:
        warnings.append(f"{len(pending)} items wait in the review queue")
    warnings += reads.cached(  # reads agents' config files: kept as briefly as the counts
        f"hooks:{daemon_url}",
        10.0,
        lambda: integrations.hook_warnings(service.config, daemon_url, reads.last_seen_by_source()),
    )
    return {
        "counts": counts,
        "live": {layer: counts.get(layer, {}).get("activated", 0) for layer in LAYERS},
        "sourceDistribution": [
            {"source": name, "count": n, "percentage": round(100 * n / total, 1)} for name, n in by_source
        ],
        "health": health,
        "injectedToday": today,
        "sources": sources,
        "warnings": warnings,
        "jobs": jobs,
    }


def date_range(params: dict[str, str]) -> tuple[str | None, str | None]:
    """``from`` / ``to`` (``YYYY-MM-DD``, both inclusive, UTC) as ``[start, end)`` timestamps for ``updated_at``."""
    bounds: list[str | None] = []
    for name, shift in (("from", 0), ("to", 1)):
        raw = (params.get(name) or "").strip()
        if not raw:
            bounds.append(None)
            continue
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            raise InvalidArgument(f"{name}: expected a date like 2026-12-03, got {raw!r}") from None
        bounds.append((day + timedelta(days=shift)).isoformat())
    return bounds[0], bounds[1]


def _in_range(stamp: str, start: str | None, end: str | None) -> bool:
    return (start is None or stamp >= start) and (end is None or stamp < end)


def _paged(service: MemoryService, params: dict[str, str], layers: tuple[str, ...]) -> dict[str, Any]:
    """A newest-first page (25) in one status, from the panel's index-friendly reads."""
    size = 25
    try:
        page = max(1, int(params.get("page") or 1))
    except ValueError:
        page = 1
    status = params.get("status") or "activated"
    changed_from, changed_before = date_range(params)
    memories, total = service.governance.reads.page(
        layers=layers,
        status=status,
        source_agent=params.get("sourceAgent") or None,
        project_id=params.get("projectId") or None,
        changed_from=changed_from,
        changed_before=changed_before,
        offset=(page - 1) * size,
        limit=size,
    )
    pages = max(1, -(-total // size))
    return {
        "items": [memory_item(m) for m in memories],
        "page": page,
        "total": total,
        "totalPages": pages,
        "hasNext": page < pages,
        "hasPrev": page > 1,
        "memories": memories,
    }


FILTERS = ("layer", "status", "sourceAgent", "projectId", "from", "to", "evidence", "page")
#: At most this many search results on the panel (the engine's own cost grows with k).
SEARCH_K = 20


def memories(service: MemoryService, params: dict[str, str], run_search: bool = False) -> dict[str, Any]:
    """A filtered page of memories or, for a query, the search page.

    Without ``run_search`` a query only renders the page shell (``deferred``: the results URL, which panel.js
    fetches at once); ``run_search`` runs the same engine as ``memmy-memory search``, with the ``--verbose``
    evidence only when ``evidence=1`` was asked for.
    """
    query = (params.get("q") or "").strip()
    filters = {k: params[k] for k in FILTERS if params.get(k)}
    result: dict[str, Any] = {"q": query, "filters": filters, "search": None, "page": None, "deferred": ""}
    start, end = date_range(params)  # a bad date is refused before any work
    if query and not run_search:
        result["deferred"] = urlencode({"q": query, **{k: v for k, v in filters.items() if k != "page"}})
    elif query:
        result["search"] = search(service, query, params, start, end)
    else:
        layers = (params["layer"],) if params.get("layer") in LAYERS else ()
        result["page"] = _paged(service, params, layers)
    result["tombstones"] = service.list_tombstones(ListTombstones(limit=20))["tombstones"] if not query else []
    return result


def search(
    service: MemoryService, query: str, params: dict[str, str], start: str | None, end: str | None
) -> dict[str, Any]:
    """The search results, filtered like the list (layer in the engine; agent, project and date on the hits)."""
    evidence = params.get("evidence") == "1"
    body: dict[str, Any] = {"query": query, "verbose": evidence, "limit": SEARCH_K, "scope": "pooled"}
    if params.get("layer"):
        body["layers"] = [params["layer"]]
    started = time.perf_counter()
    found = service.search(SearchMemory.from_json(body), _panel_ns(service))
    debug: dict[str, Any] = dict(found.get("debug") or {})
    agent, project = params.get("sourceAgent"), params.get("projectId")
    hits = [
        h
        for h in found["hits"]
        if _in_range(str(h.get("updatedAt") or ""), start, end)
        and (not agent or h.get("sourceAgent") == agent)
        and (not project or h.get("projectId") == project)
    ]
    return {
        "hits": hits,
        "status": found["status"],
        "evidence": evidence,
        "channels": {c["id"]: c for c in debug.get("channels", [])},
        "dropped": debug.get("dropped", [])[:30],
        "tokens": debug.get("tokenEstimate"),
        "latencyMs": round((time.perf_counter() - started) * 1000, 1),
        "injected": found["injectedContext"],
    }


def memory(service: MemoryService, memory_id: str) -> dict[str, Any]:
    """One memory: text, provenance, versions, validity, the recalls it appeared in, its audit rows."""
    detail = service.get_memory(memory_id, include_deleted=True)  # a deleted memory is shown with Restore
    chain = version_chain(service, memory_id)
    recalls = service.governance.audit_log.recalls_of(memory_id, limit=20)
    audits = service.governance.audit_log.audits_of(memory_id)
    return {"m": detail, "chain": chain, "recalls": recalls, "audits": audits}


def version_chain(service: MemoryService, memory_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """Oldest -> newest versions, walked by ``properties.supersedes`` and ``superseded_by`` (no table scan)."""
    start = service.memories.get(memory_id, include_deleted=True)
    if start is None:
        return []
    chain = [start]
    seen = {start.id}
    while len(chain) < limit:
        back = stored.supersedes(chain[0].properties)
        older = service.memories.get(back, include_deleted=True) if back is not None else None
        if older is None or older.id in seen:
            break
        chain.insert(0, older)
        seen.add(older.id)
    while len(chain) < limit and chain[-1].superseded_by:
        newer = service.memories.get(chain[-1].superseded_by, include_deleted=True)
        if newer is None or newer.id in seen:
            break
        chain.append(newer)
        seen.add(newer.id)
    return [
        {
            "id": m.id,
            "content": m.content,
            "validFrom": m.valid_from,
            "validTo": m.valid_to,
            "current": m.status == "activated" and not m.superseded_by,
        }
        for m in chain
    ]


def layer_page(service: MemoryService, layer: str, params: dict[str, str]) -> dict[str, Any]:
    """Experiences (L2), world models (L3) or skills in one status, with their evidence."""
    page = _paged(service, params, (layer,))
    items = [
        {**item, "content": memory.content, "props": memory.properties}
        for item, memory in zip(page["items"], page["memories"], strict=True)
    ]
    return {"layer": layer, "status": params.get("status") or "activated", "page": page, "items": items}


def tasks(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Episodes with their turns, reward and feedback."""
    return {
        "tasks": service.panel.tasks(PanelTasks.from_json({"page": params.get("page", "1"), "q": params.get("q", "")}))
    }


def recalls(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """The last recall events with exactly what they injected."""
    try:
        offset = max(0, int(params.get("offset") or 0))
    except ValueError:
        offset = 0
    # Each event carries its injected text and one form per injected memory: 10 a page keeps the page light.
    items, total = service.governance.audit_log.recalls(limit=RECALLS_PER_PAGE, offset=offset)
    return {
        "events": items,
        "total": total,
        "offset": offset,
        "older": offset + RECALLS_PER_PAGE if offset + RECALLS_PER_PAGE < total else None,
        "newer": max(0, offset - RECALLS_PER_PAGE) if offset else None,
    }


def analytics(service: MemoryService) -> dict[str, Any]:
    """Memories and injections over time, hit rate, tokens, latency, top projects and agents."""
    extra = service.governance.analytics(days=30)
    return {
        "x": extra,
        "writes": bar_chart([(p["date"], float(p["count"])) for p in extra["memoriesPerDay"]]),
        "tokens": bar_chart([(p["date"], float(p["tokens"])) for p in extra["injectionsPerDay"]]),
    }


def logs(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Audit, API, change logs and Dream runs."""
    kind = params.get("kind") or "audit"
    if kind == "dreams":
        return {"kind": kind, "dreams": service.dream_log(DreamLog(limit=50)).get("dreams", [])}
    return {"kind": kind, "log": service.governance.logs_page(ListLogs.from_json({"kind": kind, "limit": 100}))}


def agents(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Detected agents, counts, last sync; a running sync's progress."""
    job = None
    job_id = params.get("job")
    if job_id:
        try:
            job = service.imports.status(job_id)
        except MemmyError:
            job = None
    return {"sources": service.imports.sources(), "job": job, "jobId": job_id, "integrations": integrations.agents()}


def settings(service: MemoryService) -> dict[str, Any]:
    """The effective config (masked), where the data lives."""
    config = service.config
    return {
        "tree": mask_secrets(config.tree),
        "configPath": str(config.path),
        "dbPath": str(config.storage.sqlite_path),
        "home": str(config.home),
        "exports": str(service.data.default_export_path().parent),
    }


def _panel_ns(service: MemoryService) -> Namespace:
    return Namespace(source="panel", user_id=service.config.user_id)
