"""``/memmy-resume <query>``: pick an earlier task from memory and continue it. Standard library only.

Step 1 searches L1 traces and ranks the sessions they belong to (0.55 best hit + 0.25 weighted top-3 + 0.10 hit
share + 0.07 recency + 0.03 continuity); the top five are shown and the hook blocks the prompt. Step 2, a reply
of 1-5, injects that session's turns as continuation context; ``cancel`` clears the pending choice.
"""

import time

from memmy.hook import lean_json as json

TYPE_CHECKING = False  # typing costs milliseconds at hook start; it is only needed by the type checker
if TYPE_CHECKING:
    from typing import Any, Protocol

    class Api(Protocol):
        """The hook client's call method."""

        def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any: ...

else:  # annotations are evaluated at import (no ``from __future__``, which is one more import): placeholders
    Any = Api = object

SENTINEL_START = "MEMMY_RESUME_COMMAND_ARGUMENTS:"
SENTINEL_END = "MEMMY_RESUME_COMMAND_END"
COMMAND = "/memmy-resume"
RESUME_TTL_S = 600
MAX_CONTEXT_CHARS = 24_000


def resume_request(prompt: str) -> str | None:
    """The query of a ``/memmy-resume`` prompt (expanded or not), else None."""
    text = prompt.strip()
    start = text.find(SENTINEL_START)
    end = text.find(SENTINEL_END, start + len(SENTINEL_START)) if start >= 0 else -1
    if end >= 0:  # the expanded slash command: the arguments between the two markers
        return text[start + len(SENTINEL_START) : end].strip()
    rest = text[len(COMMAND) :]
    if text.startswith(COMMAND) and not (rest[:1].isalnum() or rest[:1] == "_"):  # "/memmy-resume" + word end
        return rest.strip()
    return None


def _age_days(iso: str | None) -> float:
    from datetime import UTC, datetime

    try:
        then = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return 30.0
    return max(0.0, (datetime.now(UTC) - then).total_seconds() / 86400)


def rank_sessions(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group hits by session and score each group; best first."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for hit in hits:
        groups.setdefault(str(hit.get("sessionId") or hit["id"]), []).append(hit)
    ranked: list[dict[str, Any]] = []
    for session, members in groups.items():
        scores = sorted((float(h.get("score", 0)) for h in members), reverse=True)
        top3 = sum(w * s for w, s in zip((1.0, 0.7, 0.5), scores, strict=False)) / 2.2
        newest = max((str(h.get("createdAt") or h.get("updatedAt") or "") for h in members), default="")
        recency = max(0.0, 1 - _age_days(newest) / 30)
        score = 0.55 * scores[0] + 0.25 * top3 + 0.10 * len(members) / 20 + 0.07 * recency + 0.03 * 0.5
        ordered = sorted(members, key=lambda h: str(h.get("createdAt") or ""))
        ranked.append(
            {
                "sessionId": session,
                "score": round(score, 4),
                "memoryIds": [h["id"] for h in ordered],
                "first": str(ordered[0].get("title") or "")[:220],
                "last": str(ordered[-1].get("snippet") or "")[:260],
                "time": newest,
            }
        )
    return sorted(ranked, key=lambda r: -float(r["score"]))[:5]


def candidates_message(candidates: list[dict[str, Any]], query: str) -> str:
    """The list shown to the user."""
    if not candidates:
        return f"memmy found no earlier task matching “{query}”."
    lines = [f"memmy found earlier work matching “{query}”:"]
    for number, cand in enumerate(candidates, start=1):
        lines.append(f"{number}. {cand['sessionId']} / {cand['time']} / {cand['first']}\n   last: {cand['last']}")
    lines.append("Reply with 1-5 to continue one of them (回复 1-5 继续), or `cancel`.")
    return "\n".join(lines)


def continuation(api: Api, candidate: dict[str, Any]) -> str:
    """The selected task's turns as continuation context (capped)."""
    parts = [f"Memmy resume selection: continuing earlier work from session {candidate['sessionId']}."]
    for memory_id in candidate["memoryIds"]:
        detail = api.call("GET", f"/api/v1/memory/{memory_id}")
        raw = (detail.get("refs") or {}).get("rawTurn") or {}
        user = raw.get("userText") or detail.get("title") or ""
        answer = raw.get("assistantText") or detail.get("content") or ""
        parts.append(f"## Turn {memory_id} ({detail.get('createdAt')})\nUser: {user}\nAssistant: {answer}")
        if sum(len(p) for p in parts) > MAX_CONTEXT_CHARS:
            break
    return "\n\n".join(parts)[:MAX_CONTEXT_CHARS]


def handle_resume(api: Api, state: Any, prompt: str) -> tuple[str, str] | None:
    """Return ("block", message) or ("inject", context) when the prompt is part of a resume, else None."""
    pending = state.load().get("resume")
    fresh = bool(pending) and time.time() - float(pending.get("at", 0)) <= RESUME_TTL_S
    text = prompt.strip()
    if fresh and text.lower() in ("cancel", "取消"):
        state.save({"resume": None})
        return "block", "memmy resume cancelled."
    if fresh and text.isdigit() and 1 <= int(text) <= len(pending["candidates"]):
        state.save({"resume": None})
        return "inject", continuation(api, pending["candidates"][int(text) - 1])
    query = resume_request(prompt)
    if query is None:
        return None
    if not query:
        return "block", "Usage: /memmy-resume <what you were working on>"
    found = api.call(
        "POST", "/api/v1/memory/search", {"query": query, "layers": ["L1"], "limit": 20, "scope": "pooled"}
    )
    candidates = rank_sessions(found.get("hits") or [])
    state.save({"resume": {"at": time.time(), "candidates": candidates}})
    return "block", candidates_message(candidates, query)


def block_output(agent: str, message: str) -> str:
    """Stop the prompt and show ``message`` (host-specific)."""
    if agent == "cursor":
        return json.dumps({"continue": False, "user_message": message}, ensure_ascii=False)
    return json.dumps({"decision": "block", "reason": message}, ensure_ascii=False)
