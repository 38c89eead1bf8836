"""The daemon's routes with their answer types, for :class:`memmy.daemon_client.DaemonClient`.

Generated from ``memmy/server/routes.py`` by ``python -m memmy.server.client_routes``; do not edit."""

from memmy.commands import answers as a
from memmy.daemon_client.route import Route

#: Health: {ok, version} for anyone; details with the token
HEALTH: Route[a.Health] = Route("GET", "/api/v1/health")
#: This document
OPENAPI_JSON: Route[a.JSONObject] = Route("GET", "/api/v1/openapi.json")
#: Open or resume an agent session
SESSIONS_OPEN: Route[a.SessionOpened] = Route("POST", "/api/v1/sessions/open")
#: Close a session
SESSIONS_CLOSE: Route[a.SessionClosed] = Route("POST", "/api/v1/sessions/{session_id}/close")
#: Record a turn start and recall context
TURNS_START: Route[a.TurnStarted] = Route("POST", "/api/v1/turns/start")
#: Record a turn completion (capture)
TURNS_COMPLETE: Route[a.TurnCompleted] = Route("POST", "/api/v1/turns/{turn_id}/complete")
#: Search memories
MEMORY_SEARCH: Route[a.SearchAnswer] = Route("POST", "/api/v1/memory/search")
#: Write a memory
MEMORY_ADD: Route[a.MemoryAdded] = Route("POST", "/api/v1/memory/add")
#: memory_add / memory_search call logs
MEMORY_LOGS: Route[a.MemoryLogsPage] = Route("GET", "/api/v1/memory/logs")
#: Processing state of memories
MEMORY_PROCESSING_STATUS: Route[a.Items] = Route("POST", "/api/v1/memory/processing/status")
#: Retry a failed embedding
MEMORY_PROCESSING_RETRY: Route[a.ProcessingRetried] = Route("POST", "/api/v1/memory/{memory_id}/processing/retry")
#: Archive a memory
MEMORY_ARCHIVE: Route[a.MemoryArchived] = Route("POST", "/api/v1/memory/{memory_id}/archive")
#: Remove what a doctor canary wrote
ADMIN_CANARY_PURGE: Route[a.CanaryPurged] = Route("POST", "/api/v1/admin/canary/purge")
#: Restore a deleted memory
MEMORY_RESTORE: Route[a.MemoryRestored] = Route("POST", "/api/v1/memory/{memory_id}/restore")
#: Version chain of a memory (oldest -> newest, with validity)
MEMORY_HISTORY: Route[a.MemoryHistory] = Route("GET", "/api/v1/memory/{memory_id}/history")
#: Key graph: Ranked key clusters plus one passive Top-1 memory (or no_match with nearest_keys)
KEYS_RECALL: Route[a.KeyRecall] = Route("POST", "/api/v1/keys/recall")
#: Key graph: A namespace's key vocabulary, hubs first
KEYS_BROWSE_KEYS: Route[a.KeyBrowse] = Route("POST", "/api/v1/keys/browse_keys")
#: Key graph: Ranked memory handles under one key (no content)
KEYS_READ_KEY: Route[a.KeyRead] = Route("POST", "/api/v1/keys/read_key")
#: Key graph: Full content, connected keys and validity; reinforces only the via_key_id edge
KEYS_READ_MEMORY: Route[a.KeyMemoryRead] = Route("POST", "/api/v1/keys/read_memory")
#: Key graph: Save a memory under atomic keys (dedupes; refuses tombstoned content)
KEYS_REMEMBER: Route[a.KeyRemembered] = Route("POST", "/api/v1/keys/remember")
#: Key graph: Save several memories (all validated before anything is written)
KEYS_REMEMBER_BATCH: Route[list[a.KeyRemembered]] = Route("POST", "/api/v1/keys/remember_batch")
#: Key graph: New version of a memory; the old one's validity ends and the chain is kept
KEYS_CORRECT: Route[a.KeyCorrected] = Route("POST", "/api/v1/keys/correct")
#: Key graph: Evidence-backed confirmation: refreshes freshness, depth +0.05
KEYS_CONFIRM_MEMORY: Route[a.KeyConfirmed] = Route("POST", "/api/v1/keys/confirm_memory")
#: Key graph: Weaken one key->memory edge (floored, never severed)
KEYS_DISMISS: Route[a.KeyDismissed] = Route("POST", "/api/v1/keys/dismiss")
#: Key graph: Memories sharing keys or explicitly related
KEYS_RELATED: Route[a.KeyRelated] = Route("POST", "/api/v1/keys/related")
#: Key graph: Delete a memory and tombstone its value
KEYS_FORGET: Route[a.KeyForgotten] = Route("POST", "/api/v1/keys/forget")
#: Key graph: Active key-graph memories
KEYS_LIST_MEMORIES: Route[a.KeyMemoryList] = Route("POST", "/api/v1/keys/list_memories")
#: Key graph: Delete memories past their TTL
KEYS_CLEANUP_EXPIRED: Route[a.KeysCleaned] = Route("POST", "/api/v1/keys/cleanup_expired")
#: Key graph: Counts of keys, memories and links
KEYS_MEMORY_STATS: Route[a.KeyStats] = Route("POST", "/api/v1/keys/memory_stats")
#: Forgotten values (content hash + memory key)
TOMBSTONES: Route[a.TombstoneList] = Route("GET", "/api/v1/tombstones")
#: Explicit feedback on a memory or episode (reward, guidance)
FEEDBACK: Route[a.FeedbackRecorded] = Route("POST", "/api/v1/feedback")
#: Recent episodes (status, limit)
EPISODES: Route[a.Items] = Route("GET", "/api/v1/episodes")
#: Evolution jobs (status, type, episodeId, limit) and counts
EVOLUTION_JOBS: Route[a.JobList] = Route("GET", "/api/v1/evolution/jobs")
#: Remove a tombstone so the value may come back
TOMBSTONES_RESTORE: Route[a.TombstoneRestored] = Route("POST", "/api/v1/tombstones/{tombstone_id}/restore")
#: Run a Dream pass (merge twins, archive stale/contradicted)
DREAM_RUN: Route[a.DreamPass] = Route("POST", "/api/v1/dream/run")
#: Past Dream passes with counts per action (limit, offset)
DREAM_LOG: Route[a.DreamLogPage] = Route("GET", "/api/v1/dream/log")
#: One Dream pass and its changes (verbose=true: full rows)
DREAM_GET: Route[a.DreamRecord] = Route("GET", "/api/v1/dream/{dream_id}")
#: Undo a Dream pass byte for byte
DREAM_RESTORE: Route[a.DreamRestored] = Route("POST", "/api/v1/dream/{dream_id}/restore")
#: Memory detail
MEMORY_GET: Route[a.MemoryDetail] = Route("GET", "/api/v1/memory/{memory_id}")
#: Delete a memory (undo with restore)
MEMORY_DELETE: Route[a.MemoryDeleted] = Route("DELETE", "/api/v1/memory/{memory_id}")
#: Panel overview
PANEL_OVERVIEW: Route[a.PanelOverview] = Route("GET", "/api/v1/panel/overview")
#: Memory analytics
PANEL_ANALYSIS: Route[a.PanelAnalysis] = Route("GET", "/api/v1/panel/analysis")
#: Entry list (page, layer, status, q, sourceAgent)
PANEL_ITEMS: Route[a.ItemsPage] = Route("GET", "/api/v1/panel/items")
#: Captured turns
PANEL_TASKS: Route[a.TasksPage] = Route("GET", "/api/v1/panel/tasks")
#: Hot-reload config.yaml
ADMIN_RELOAD_CONFIG: Route[a.ConfigReloaded] = Route("POST", "/api/v1/admin/reload-config")
#: Stop the daemon
ADMIN_SHUTDOWN: Route[a.Accepted] = Route("POST", "/api/v1/admin/shutdown")
#: Run due embeddings and evolution jobs now
WORKER_RUN: Route[a.WorkerRun] = Route("POST", "/api/v1/worker/run")
#: Detected agent history sources, last sync and counts
SOURCES: Route[a.Sources] = Route("GET", "/api/v1/sources")
#: Start a history import job
SOURCES_SCAN: Route[a.ImportJob] = Route("POST", "/api/v1/sources/scan")
#: Import job progress
SOURCES_SCAN_GET: Route[a.ImportJob] = Route("GET", "/api/v1/sources/scan/{job_id}")
#: Import progress as server-sent events
SOURCES_SCAN_EVENTS: Route[a.ImportJob] = Route("GET", "/api/v1/sources/scan/{job_id}/events")
#: Pause an import job
SOURCES_SCAN_PAUSE: Route[a.ImportJob] = Route("POST", "/api/v1/sources/scan/{job_id}/pause")
#: Resume an import job
SOURCES_SCAN_RESUME: Route[a.ImportJob] = Route("POST", "/api/v1/sources/scan/{job_id}/resume")
#: Stop an import job
SOURCES_SCAN_STOP: Route[a.ImportJob] = Route("POST", "/api/v1/sources/scan/{job_id}/stop")
#: Audit, API, change and recall logs (kind, limit, offset)
LOGS: Route[a.LogsPage] = Route("GET", "/api/v1/logs")
#: The review queue of induced L2/L3/Skills (state)
REVIEW: Route[a.ReviewPage] = Route("GET", "/api/v1/review")
#: Approve (optionally edited) or reject a review item
REVIEW_POST: Route[a.ReviewDecided] = Route("POST", "/api/v1/review/{memory_id}")
#: Export the store to one archive (manifest + checksums)
ADMIN_EXPORT: Route[a.Exported] = Route("POST", "/api/v1/admin/export")
#: Import an exported archive
ADMIN_IMPORT: Route[a.Imported] = Route("POST", "/api/v1/admin/import")
#: Remove every memory (config and tokens stay; a backup first)
ADMIN_WIPE: Route[a.Wiped] = Route("POST", "/api/v1/admin/wipe")
#: A team server's people
ADMIN_USERS_GET: Route[a.People] = Route("GET", "/api/v1/admin/users")
#: Add a person to a team server (their token, shown once)
ADMIN_USERS_POST: Route[a.PersonAdded] = Route("POST", "/api/v1/admin/users")
#: Revoke a person's token (refused from the next request on)
ADMIN_USERS_REVOKE: Route[a.Person] = Route("POST", "/api/v1/admin/users/{name}/revoke")
