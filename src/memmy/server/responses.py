"""The answers of the HTTP API as ``TypedDict``s: the response schemas of the generated OpenAPI document.

They describe the JSON the service returns today (the service builds plain dicts); a key the service always
sends is required here, so schemathesis' response check catches an answer that drifts from its type.
"""

from typing import Any, NotRequired, TypedDict


class Answer(TypedDict, total=False):
    """A JSON object answer (most carry ``serverTime``)."""

    serverTime: str


class Health(TypedDict):
    """``{ok, version}`` for anyone; with the token also storage, models, queue and the store id."""

    ok: bool
    version: str
    status: NotRequired[str]
    reason: NotRequired[str]
    storeId: NotRequired[str]


class Accepted(TypedDict):
    """The request was accepted (work continues in the background)."""

    accepted: bool


class MemoryAdded(TypedDict):
    """A memory written, merged into an identical one (``deduplicated``) or refused as forgotten (``tombstoned``)."""

    id: str | None
    kind: str
    memoryLayer: str
    status: str
    title: str
    summary: str
    tags: list[str]
    deduplicated: bool
    serverTime: str
    projectId: NotRequired[str | None]
    sourceAgent: NotRequired[str]
    createdAt: NotRequired[str]
    tombstoned: NotRequired[bool]
    tombstoneId: NotRequired[str]
    duplicate: NotRequired[bool]


class SearchAnswer(TypedDict):
    """Injectable markdown plus the hits it was made from."""

    injectedContext: str
    hits: list[dict[str, Any]]
    sourceMemoryIds: list[str]
    status: list[str]
    serverTime: str
    debug: NotRequired[dict[str, Any]]
    duplicate: NotRequired[bool]


class MemoryDeleted(TypedDict):
    """A memory soft-deleted; its value tombstoned."""

    ok: bool
    id: str
    kind: str
    status: str
    tombstoneId: str
    changeSeq: int
    syncCursor: str
    auditId: int | str
    serverTime: str
    duplicate: NotRequired[bool]


class MemoryArchived(TypedDict):
    """A memory archived."""

    ok: bool
    id: str
    status: str
    auditId: int | str
    serverTime: str


class Items(TypedDict):
    """A list of records."""

    items: list[dict[str, Any]]
    serverTime: str


class JobList(Items):
    """Evolution jobs and the count per status."""

    counts: dict[str, int]


class TombstoneList(TypedDict):
    """Tombstones, newest first."""

    tombstones: list[dict[str, Any]]
    total: int
    serverTime: str


class TombstoneRestored(TypedDict):
    """A tombstone removed."""

    restored: bool
    tombstone: dict[str, Any]
    auditId: int | str
    serverTime: str


class LogsPage(TypedDict):
    """One page of a log."""

    kind: str
    items: list[dict[str, Any]]
    total: int | None
    retentionDays: int
    serverTime: str


class ReviewPage(TypedDict):
    """The review queue in one state."""

    state: str
    required: bool
    items: list[dict[str, Any]]
    serverTime: str


class WorkerRun(TypedDict):
    """What one worker run did."""

    leased: int
    succeeded: int
    failed: int
    jobs: list[dict[str, Any]]
    embeddingRetries: dict[str, int]
    changeSeq: int
    syncCursor: str
    serverTime: str


class ConfigReloaded(TypedDict):
    """What a config reload changed."""

    activeProfile: str | None
    changed: list[str]
    requiresRestart: bool
    restartedFailedProcessing: int
    models: dict[str, Any]
    warnings: list[str]
    reason: str | None
    reloadedAt: str


class DreamLogPage(TypedDict):
    """Past Dream passes and the schedule."""

    dreams: list[dict[str, Any]]
    total: int
    schedule: dict[str, Any]
    serverTime: str


class FeedbackRecorded(TypedDict):
    """Feedback stored; the jobs it scheduled."""

    ok: bool
    feedback: dict[str, Any]
    episodeId: str | None
    scheduled: list[str]
    serverTime: str


class Page(TypedDict):
    """One page of a paged list."""

    page: int
    pageSize: int
    total: int
    totalPages: int
    hasNext: bool
    hasPrev: bool
    serverTime: str


class ItemsPage(Page):
    """A page of memories (the panel's entry list)."""

    items: list[dict[str, Any]]


class TasksPage(Page):
    """A page of captured turns."""

    tasks: list[dict[str, Any]]


class MemoryLogsPage(TypedDict):
    """memory_add / memory_search calls."""

    logs: list[dict[str, Any]]
    total: int
    limit: int
    offset: int
    serverTime: str
    nextOffset: NotRequired[int]


class MemoryHistory(TypedDict):
    """The version chain of a memory, oldest first."""

    id: str
    currentId: str | None
    length: int
    chain: list[dict[str, Any]]
    serverTime: str


class DreamPass(TypedDict):
    """A Dream pass just run (or, with ``dryRun``, what it would change)."""

    id: str | None
    dryRun: bool
    status: str
    trigger: str
    startedAt: str
    finishedAt: str | None
    stats: dict[str, Any]
    changes: list[dict[str, Any]]
    serverTime: str


class DreamRecord(TypedDict):
    """One past Dream pass and its changes."""

    id: str
    status: str
    trigger: str
    startedAt: str
    finishedAt: str | None
    restoredAt: str | None
    stats: dict[str, Any]
    error: str | None
    changes: list[dict[str, Any]]
    serverTime: str


class DreamRestored(TypedDict):
    """A Dream pass undone."""

    id: str
    status: str
    restoredAt: str
    changes: int
    serverTime: str


class KeyForgotten(TypedDict):
    """``keys/forget``: the memory deleted and its value tombstoned."""

    deleted: bool
    memory_id: str
    tombstone_id: str | None


class KeyDismissed(TypedDict):
    """``keys/dismiss``: one key->memory edge weakened."""

    memory_id: str
    key_id: str
    dismissed: bool
    weight_before: float
    weight: float
    floored: bool
    cancelled_alias_candidates: int


class KeysCleaned(TypedDict):
    """``keys/cleanup_expired``: memories past their TTL deleted."""

    deleted: int
    ids: list[str]
    durationMs: float


class KeyStats(TypedDict):
    """``keys/memory_stats``: counts of the key graph."""

    keys: int
    memories: int
    links: int
    aliases: int
    related_links: int
    tombstones: int
    namespaces: dict[str, int]
    thresholds: dict[str, Any]
    serverTime: str


#: Answer types of the key-graph tools that have one (the others are documented as any JSON).
KEY_ANSWERS: dict[str, Any] = {
    "forget": KeyForgotten,
    "dismiss": KeyDismissed,
    "cleanup_expired": KeysCleaned,
    "memory_stats": KeyStats,
    "remember_batch": list[dict[str, Any]],
}
