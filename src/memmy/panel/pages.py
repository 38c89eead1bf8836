"""Read side of the panel: one function per page, turning service calls into template context."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memmy.commands.dream import DreamLog
from memmy.commands.governance import ListLogs, ListTombstones
from memmy.commands.memory import SearchMemory
from memmy.commands.panel import PanelTasks
from memmy.errors import MemmyError
from memmy.namespace import Namespace
from memmy.panel import integrations
from memmy.service import MemoryService
from memmy.service.memories import memory_item

LAYERS = ("L1", "L2", "L3", "Skill")
LAYER_PAGES = {"experiences": "L2", "world-models": "L3", "skills": "Skill"}
SECRET_WORDS = ("key", "token", "secret", "password")


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


def overview(service: MemoryService) -> dict[str, Any]:
    """Counts per layer and status, today's injections, sources, queues and warnings."""
    reads = service.governance.reads
    counts = reads.counts()
    by_source = reads.by_source()
    total = sum(n for _, n in by_source) or 1
    health = service.health()
    today = reads.injected_today(datetime.now(UTC).date().isoformat())
    sources = service.imports.sources()["sources"]
    jobs = health["evolution"]["jobs"]
    warnings = []
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


def _paged(service: MemoryService, params: dict[str, str], layers: tuple[str, ...]) -> dict[str, Any]:
    """A newest-first page (25) in one status, from the panel's index-friendly reads."""
    size = 25
    try:
        page = max(1, int(params.get("page") or 1))
    except ValueError:
        page = 1
    status = params.get("status") or "activated"
    memories, total = service.governance.reads.page(
        layers=layers,
        status=status,
        source_agent=params.get("sourceAgent") or None,
        project_id=params.get("projectId") or None,
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


def memories(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Search with the verbose evidence, or a filtered page of memories."""
    query = (params.get("q") or "").strip()
    filters = {k: params[k] for k in ("layer", "status", "sourceAgent", "projectId", "page") if params.get(k)}
    result: dict[str, Any] = {"q": query, "filters": filters, "search": None, "page": None}
    if query:
        body: dict[str, Any] = {"query": query, "verbose": True, "limit": 20, "scope": "pooled"}
        if params.get("layer"):
            body["layers"] = [params["layer"]]
        found = service.search(SearchMemory.from_json(body), _panel_ns(service))
        debug = found.get("debug") or {}
        result["search"] = {
            "hits": found["hits"],
            "status": found["status"],
            "channels": {c["id"]: c for c in debug.get("channels", [])},
            "dropped": debug.get("dropped", [])[:30],
            "timings": debug.get("timingsMs", {}),
            "tokens": debug.get("tokenEstimate"),
            "injected": found["injectedContext"],
        }
    else:
        layers = (params["layer"],) if params.get("layer") in LAYERS else ()
        result["page"] = _paged(service, params, layers)
    result["tombstones"] = service.list_tombstones(ListTombstones(limit=20))["tombstones"] if not query else []
    return result


def memory(service: MemoryService, memory_id: str) -> dict[str, Any]:
    """One memory: text, provenance, versions, validity, the recalls it appeared in, its audit rows."""
    detail = service.get_memory(memory_id)
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
        back = chain[0].properties.get("supersedes")
        older = service.memories.get(back, include_deleted=True) if isinstance(back, str) else None
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
    items, total = service.governance.audit_log.recalls(limit=30, offset=int(params.get("offset") or 0))
    return {"events": items, "total": total}


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
