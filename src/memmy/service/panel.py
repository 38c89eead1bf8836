"""Read models for the panel and the logs page: overview, analysis, items, tasks, logs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from memmy.commands.answers import ItemsPage, MemoryLogsPage, PanelAnalysis, PanelOverview, TasksPage
from memmy.commands.panel import PAGE_SIZE, MemoryLogs, PanelItems, PanelTasks
from memmy.service.memories import memory_item
from memmy.store.db import utc_now
from memmy.store.episodes import EpisodeRecord
from memmy.store.memories import MemoryFilter
from memmy.store.sessions import raw_turn_dict
from memmy.store.unit import Store


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))
    return round(ordered[index], 2)


class PanelOps:
    """Aggregates for the web panel and the CLI status command."""

    def __init__(self, store: Store) -> None:
        self.memories = store.memories
        self.logs = store.logs
        self.sessions = store.sessions
        self.queue = store.queue
        self.episodes = store.episodes

    def overview(self) -> PanelOverview:
        """Counts per layer, source distribution and 371 days of daily activity."""
        counts = self.memories.count_by_layer()
        distribution = self.memories.source_distribution()
        total = sum(n for _, n in distribution) or 1
        start = (datetime.now(UTC) - timedelta(days=370)).date()
        daily = self.memories.daily_counts(start.isoformat())
        return {
            "counts": {
                "memories": counts.get("L1", 0),
                "experiences": counts.get("L2", 0),
                "worldModels": counts.get("L3", 0),
                "skills": counts.get("Skill", 0),
            },
            "sourceDistribution": [
                {"source": source, "count": n, "percentage": round(100 * n / total, 2)} for source, n in distribution
            ],
            "dailyActivity": [
                {
                    "date": (start + timedelta(days=i)).isoformat(),
                    "count": daily.get((start + timedelta(days=i)).isoformat(), 0),
                }
                for i in range(371)
            ],
            "serverTime": utc_now(),
        }

    def analysis(self) -> PanelAnalysis:
        """Recall and latency metrics."""
        events, avg_hits, avg_score = self.logs.recall_stats()
        latencies = self.logs.tool_latencies()
        all_latencies = [v for values in latencies.values() for v in values]
        start = (datetime.now(UTC) - timedelta(days=30)).date().isoformat()
        return {
            "metrics": {
                "avgRecallScore": round(avg_score, 4),
                "avgHitsPerRecall": round(avg_hits, 3),
                "recallEvents": events,
                "activeSkills": self.memories.count_by_layer().get("Skill", 0),
                "recentlyUsedSkills": 0,
                "avgToolLatencyMs": round(sum(all_latencies) / len(all_latencies), 2) if all_latencies else 0.0,
                "p95ToolLatencyMs": _percentile(all_latencies, 0.95),
            },
            "dailyMemoryWrites": self.memories.daily_counts(start),
            "dailySkillEvolutions": self.memories.daily_counts(start, ("L2", "L3", "Skill")),
            "toolLatency": {
                "tools": [
                    {
                        "name": name,
                        "calls": len(values),
                        "avgMs": round(sum(values) / len(values), 2),
                        "p95Ms": _percentile(values, 0.95),
                    }
                    for name, values in sorted(latencies.items())
                ],
            },
            "serverTime": utc_now(),
        }

    def items(self, cmd: PanelItems) -> ItemsPage:
        """A page of memories filtered by layer, status, text and source."""
        page, page_size = cmd.page, cmd.page_size
        layers = (cmd.layer,) if cmd.layer else ()
        flt = MemoryFilter(layers=layers, source_agent=cmd.source_agent, include_pending_imports=True)
        memories, total = self.memories.page(
            flt,
            status=cmd.status,
            text=cmd.q,
            excluded_sources=list(cmd.excluded_source_agents),
            offset=(page - 1) * page_size,
            limit=page_size,
        )
        states = self.queue.states([m.id for m in memories])
        items = [memory_item(m, states.get(m.id)) for m in memories]
        total_pages = max(1, -(-total // page_size))
        return {
            "items": items,
            "page": page,
            "pageSize": page_size,
            "total": total,
            "totalPages": total_pages,
            "hasNext": page < total_pages,
            "hasPrev": page > 1,
            "serverTime": utc_now(),
        }

    def tasks(self, cmd: PanelTasks) -> TasksPage:
        """Recent captured turns (tasks), newest first."""
        page = cmd.page
        rows, total = self.sessions.list_recent_turns(PAGE_SIZE, (page - 1) * PAGE_SIZE, cmd.q)
        episodes: dict[str, EpisodeRecord | None] = {
            episode_id: self.episodes.get(episode_id)
            for episode_id in {str(row["episode_id"]) for row in rows if row["episode_id"]}
        }
        tasks = []
        for row in rows:
            turn = raw_turn_dict(row)
            episode = episodes.get(str(row["episode_id"])) if row["episode_id"] else None
            tasks.append(
                {
                    "id": row["episode_id"] or row["id"],
                    "episode": episode.to_json() if episode is not None else None,
                    "memoryIds": json.loads(row["source_memory_ids_json"] or "[]"),
                    "turns": [turn],
                    "updatedAt": row["created_at"],
                }
            )
        total_pages = max(1, -(-total // PAGE_SIZE))
        return {
            "tasks": tasks,
            "page": page,
            "pageSize": PAGE_SIZE,
            "total": total,
            "totalPages": total_pages,
            "hasNext": page < total_pages,
            "hasPrev": page > 1,
            "serverTime": utc_now(),
        }

    def api_logs(self, cmd: MemoryLogs) -> MemoryLogsPage:
        """The memory logs page: memory_add / memory_search calls."""
        limit, offset = cmd.limit, cmd.offset
        logs, total = self.logs.api_logs(
            list(cmd.tools), cmd.source_agent, list(cmd.excluded_source_agents), limit, offset
        )
        response: MemoryLogsPage = {
            "logs": logs,
            "total": total,
            "limit": limit,
            "offset": offset,
            "serverTime": utc_now(),
        }
        if offset + limit < total:
            response["nextOffset"] = offset + limit
        return response
