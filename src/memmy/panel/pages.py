"""Read side of the panel: one function per page, turning service calls into template context."""

from __future__ import annotations

from typing import Any

from memmy.errors import MemmyError
from memmy.service import MemoryService
from memmy.service.namespace import Namespace

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
    """Counts, today's injections, sources, queues and warnings."""
    data = service.panel.overview()
    health = service.health()
    analytics = service.governance.analytics(days=1)
    sources = service.imports.sources()["sources"]
    jobs = health["evolution"]["jobs"]
    warnings = []
    if health["embeddingQueue"]["failed"]:
        warnings.append(
            f"{health['embeddingQueue']['failed']} embeddings failed (memmy-memory worker run retries them)"
        )
    if jobs.get("failed"):
        warnings.append(f"{jobs['failed']} evolution jobs failed (see memmy-memory jobs --status failed)")
    if health["evolution"]["workerLastError"]:
        warnings.append(f"evolution worker: {health['evolution']['workerLastError']}")
    if health["models"]["embedding"]["lastError"]:
        warnings.append(f"embedding: {health['models']['embedding']['lastError']}")
    review = service.review_queue({"limit": 1000})
    if review["items"]:
        warnings.append(f"{len(review['items'])} items wait in the review queue")
    return {
        "counts": data["counts"],
        "sourceDistribution": data["sourceDistribution"],
        "health": health,
        "injectedToday": analytics["injectedToday"],
        "sources": sources,
        "warnings": warnings,
        "jobs": jobs,
    }


def memories(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Search with the verbose evidence, or a filtered page of memories."""
    query = (params.get("q") or "").strip()
    filters = {k: params[k] for k in ("layer", "status", "sourceAgent", "page") if params.get(k)}
    result: dict[str, Any] = {"q": query, "filters": filters, "search": None, "page": None}
    if query:
        body: dict[str, Any] = {"query": query, "verbose": True, "limit": 20, "scope": "pooled"}
        if params.get("layer"):
            body["layers"] = [params["layer"]]
        found = service.search(body, _panel_ns(service))
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
        result["page"] = service.panel.items({**filters, "pageSize": "25"})
    result["tombstones"] = service.list_tombstones({"limit": "20"})["tombstones"] if not query else []
    return result


def memory(service: MemoryService, memory_id: str) -> dict[str, Any]:
    """One memory: text, provenance, versions, validity, the recalls it appeared in, its audit rows."""
    detail = service.get_memory(memory_id)
    try:
        chain = service.memory_history(memory_id)["chain"]
    except MemmyError:
        chain = []
    recalls = service.governance.audit_log.recalls_of(memory_id, limit=20)
    audits = service.governance.audit_log.audits_of(memory_id)
    return {"m": detail, "chain": chain, "recalls": recalls, "audits": audits}


def layer_page(service: MemoryService, layer: str, params: dict[str, str]) -> dict[str, Any]:
    """Experiences (L2), world models (L3) or skills: live and archived, with their evidence."""
    status = params.get("status") or ""
    page = service.panel.items({"layer": layer, "status": status, "pageSize": "50", "page": params.get("page", "1")})
    items = []
    for item in page["items"]:
        full = service.memories.get(item["id"])
        props = full.properties if full is not None else {}
        items.append({**item, "content": full.content if full else "", "props": props})
    return {"layer": layer, "status": status, "page": page, "items": items}


def tasks(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Episodes with their turns, reward and feedback."""
    return {"tasks": service.panel.tasks({"page": params.get("page", "1"), "q": params.get("q", "")})}


def recalls(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """The last recall events with exactly what they injected."""
    items, total = service.governance.audit_log.recalls(limit=30, offset=int(params.get("offset") or 0))
    return {"events": items, "total": total}


def analytics(service: MemoryService) -> dict[str, Any]:
    """Memories and injections over time, hit rate, tokens, top projects and agents."""
    data = service.panel.analysis()
    extra = service.governance.analytics(days=30)
    writes = sorted(data["dailyMemoryWrites"].items())
    return {
        "a": data,
        "x": extra,
        "writes": bar_chart([(d, float(n)) for d, n in writes]),
        "tokens": bar_chart([(p["date"], float(p["tokens"])) for p in extra["injectionsPerDay"]]),
    }


def logs(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Audit, API, change logs and Dream runs."""
    kind = params.get("kind") or "audit"
    if kind == "dreams":
        return {"kind": kind, "dreams": service.dream_log({"limit": "50"}).get("dreams", [])}
    return {"kind": kind, "log": service.logs_page({"kind": kind, "limit": "100"})}


def agents(service: MemoryService, params: dict[str, str]) -> dict[str, Any]:
    """Detected agents, counts, last sync; a running sync's progress."""
    job = None
    job_id = params.get("job")
    if job_id:
        try:
            job = service.imports.status(job_id)
        except MemmyError:
            job = None
    return {"sources": service.imports.sources(), "job": job, "jobId": job_id}


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
