"""The answers of the HTTP API as ``TypedDict``s: the response schemas of the generated OpenAPI document, and
the return types of the service calls that build them.

They describe the JSON the service returns (plain dicts); a key the service always sends is required here, so
schemathesis' response check catches an answer that drifts from its type. A nested record whose shape belongs
to another package (a memory list item, an episode, a job) is a :data:`JSONObject`: a JSON object whose fields
the reader checks. Every public method of an ops group returns one of these types (``tests/test_answer_types.py``).
"""

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypeAlias, TypedDict

#: Any JSON value an answer carries, read-only (so a ``dict[str, int]`` or a ``list[str]`` is one). The OpenAPI
#: document describes it as "any JSON".
JSONValue: TypeAlias = str | int | float | bool | None | Sequence["JSONValue"] | Mapping[str, "JSONValue"]
#: A JSON object (a nested record; the OpenAPI document describes its values as "any JSON").
JSONObject: TypeAlias = Mapping[str, Any]


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
    uptimeMs: NotRequired[int]
    mode: NotRequired[str]
    activeProfile: NotRequired[str | None]
    storage: NotRequired[JSONObject]
    models: NotRequired[JSONObject]
    evolution: NotRequired[JSONObject]
    embeddingQueue: NotRequired[JSONObject]
    capabilities: NotRequired[JSONObject]
    serverTime: NotRequired[str]


class Accepted(TypedDict):
    """The request was accepted (work continues in the background)."""

    accepted: bool


class MemoryAdded(TypedDict):
    """A memory written, merged into an identical one (``deduplicated``), a deleted identical one brought back
    (``restored``), or refused as forgotten (``tombstoned``)."""

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
    restored: NotRequired[bool]
    duplicate: NotRequired[bool]


class SearchAnswer(TypedDict):
    """Injectable markdown plus the hits it was made from."""

    injectedContext: str
    hits: Sequence[JSONObject]
    sourceMemoryIds: list[str]
    status: list[str]
    serverTime: str
    debug: NotRequired[JSONObject]
    duplicate: NotRequired[bool]
    #: Only while the store cannot write: the "memory unavailable" line (also the first line of the context).
    unavailable: NotRequired[str]


class MemoryDeleted(TypedDict):
    """A memory deleted (hidden; ``restorable`` until it is forgotten)."""

    ok: bool
    id: str
    kind: str
    status: str
    restorable: bool
    changeSeq: int
    syncCursor: str
    auditId: int | str | None
    serverTime: str
    tombstoneId: NotRequired[str]
    duplicate: NotRequired[bool]


class CanaryPurged(TypedDict):
    """What a ``doctor --canary`` run wrote, removed."""

    purged: bool
    memories: int
    turns: int
    serverTime: str
    duplicate: NotRequired[bool]


class MemoryRestored(TypedDict):
    """A deleted memory active again."""

    ok: bool
    id: str
    kind: str
    status: str
    auditId: str
    serverTime: str
    duplicate: NotRequired[bool]


class MemoryArchived(TypedDict):
    """A memory archived."""

    ok: bool
    id: str
    status: str
    auditId: int | str
    serverTime: str


class StatusSet(TypedDict):
    """A memory archived or activated again from the panel (audited)."""

    id: str
    status: str
    auditId: int | str
    serverTime: str


class DayInjections(TypedDict):
    """Recall events of one day: how many, how many injected something, and the tokens injected."""

    date: str
    events: int
    hits: int
    tokens: int


class DayMemories(TypedDict):
    """Memories written on one day, in all and per layer."""

    date: str
    count: int
    layers: dict[str, int]


class Analytics(TypedDict):
    """The panel's analytics: recall events and memories per day, hit rate, latency, top projects and agents."""

    injectionsPerDay: list[DayInjections]
    hitRate: float
    recallEvents: int
    injectedToday: dict[str, int]
    memoriesPerDay: list[DayMemories]
    avgApiLatencyMs: float
    p95ApiLatencyMs: float
    topProjects: Sequence[JSONObject]
    topAgents: Sequence[JSONObject]
    serverTime: str


class Items(TypedDict):
    """A list of records."""

    items: Sequence[JSONObject]
    serverTime: str


class JobList(Items):
    """Evolution jobs and the count per status."""

    counts: dict[str, int]


class TombstoneList(TypedDict):
    """Tombstones, newest first."""

    tombstones: Sequence[JSONObject]
    total: int
    serverTime: str


class TombstoneRestored(TypedDict):
    """A tombstone removed."""

    restored: bool
    tombstone: JSONObject
    auditId: int | str
    serverTime: str


class LogsPage(TypedDict):
    """One page of a log."""

    kind: str
    items: Sequence[JSONObject]
    total: int | None
    retentionDays: int
    serverTime: str


class ReviewPage(TypedDict):
    """The review queue in one state."""

    state: str
    required: bool
    items: Sequence[JSONObject]
    serverTime: str


class WorkerRun(TypedDict):
    """What one worker run did."""

    leased: int
    succeeded: int
    failed: int
    jobs: Sequence[JSONObject]
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
    models: JSONObject
    warnings: list[str]
    reason: str | None
    reloadedAt: str


class DreamLogPage(TypedDict):
    """Past Dream passes and the schedule."""

    dreams: Sequence[JSONObject]
    total: int
    schedule: JSONObject
    serverTime: str


class FeedbackRecorded(TypedDict):
    """Feedback stored; the jobs it scheduled."""

    ok: bool
    feedback: JSONObject
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

    items: Sequence[JSONObject]


class TasksPage(Page):
    """A page of captured turns."""

    tasks: Sequence[JSONObject]


class MemoryLogsPage(TypedDict):
    """memory_add / memory_search calls."""

    logs: Sequence[JSONObject]
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
    chain: Sequence[JSONObject]
    serverTime: str


class DreamPass(TypedDict):
    """A Dream pass just run (or, with ``dryRun``, what it would change)."""

    id: str | None
    dryRun: bool
    status: str
    trigger: str
    startedAt: str
    finishedAt: str | None
    stats: JSONObject
    changes: Sequence[JSONObject]
    serverTime: str


class DreamRecord(TypedDict):
    """One past Dream pass and its changes."""

    id: str
    status: str
    trigger: str
    startedAt: str
    finishedAt: str | None
    restoredAt: str | None
    stats: JSONObject
    error: str | None
    changes: Sequence[JSONObject]
    serverTime: str


class DreamRestored(TypedDict):
    """A Dream pass undone."""

    id: str
    status: str
    restoredAt: str
    memories: int
    overwritten: list[str]
    skipped: Sequence[JSONObject]
    force: bool
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
    thresholds: JSONObject
    serverTime: str


class SessionOpened(TypedDict):
    """A session opened, or an open one resumed (same id, or the same host session key)."""

    sessionId: str
    status: str
    resumed: bool
    serverTime: str
    duplicate: NotRequired[bool]


class SessionClosed(TypedDict):
    """A session closed, with the episodes that closed with it."""

    ok: bool
    sessionId: str
    status: str
    closedEpisodeIds: list[str]
    serverTime: str
    duplicate: NotRequired[bool]


class InjectedContext(TypedDict):
    """The recalled context of a turn start: markdown for the prompt and its sections."""

    markdown: str
    sections: list[str]
    tokenEstimate: int


class TurnStarted(TypedDict):
    """A turn start recorded, with the context recalled for the agent's prompt."""

    turnId: str
    contextPacketId: str
    sessionId: str
    episodeId: str | None
    episodeRelation: str | None
    searchEventId: str | None
    injectedContext: InjectedContext
    sourceMemoryIds: list[str]
    hits: Sequence[JSONObject]
    status: list[str]
    serverTime: str
    duplicate: NotRequired[bool]
    #: Only while the store cannot write: the "memory unavailable" line (also the first line of the context).
    unavailable: NotRequired[str]


class JobScheduled(TypedDict):
    """An evolution job a capture queued."""

    jobId: str
    jobType: str
    status: str
    targetMemoryId: str | None


class TurnCompleted(TypedDict):
    """A turn captured as an L1 trace (or not: ``captured`` false, e.g. a forgotten value)."""

    turnId: str
    sessionId: str
    status: str
    episodeId: str | None
    rawTurnId: str | None
    l1MemoryId: str | None
    captured: bool
    scheduledEvolution: bool
    jobs: list[JobScheduled]
    changeSeq: int
    serverTime: str
    deduplicated: NotRequired[bool]
    tombstoned: NotRequired[bool]
    tombstoneId: NotRequired[str]
    duplicate: NotRequired[bool]


class ProcessingRetried(TypedDict):
    """A failed embedding queued again."""

    accepted: bool
    processing: JSONObject | None
    serverTime: str


class MemoryDetail(TypedDict):
    """One memory with its refs and history (or, for an ``episode_…`` id, the episode with its turns)."""

    id: str
    kind: str
    refs: JSONObject
    status: str
    memoryLayer: NotRequired[str]
    title: NotRequired[str]
    summary: NotRequired[str]
    tags: NotRequired[list[str]]
    content: NotRequired[str]
    sourceAgent: NotRequired[str]
    projectId: NotRequired[str | None]
    sessionId: NotRequired[str | None]
    metrics: NotRequired[JSONObject]
    createdAt: NotRequired[str]
    updatedAt: NotRequired[str]
    validFrom: NotRequired[str | None]
    validTo: NotRequired[str | None]
    supersededBy: NotRequired[str | None]
    version: NotRequired[int]
    validity: NotRequired[JSONObject]
    processing: NotRequired[JSONObject]
    memoryKey: NotRequired[str | None]
    turnId: NotRequired[str | None]
    properties: NotRequired[JSONObject]
    etag: NotRequired[str]
    item: NotRequired[JSONObject]
    metadata: NotRequired[JSONObject]
    history: NotRequired[Sequence[JSONObject]]


class KeyView(TypedDict):
    """A key cluster: its concept, aliases and how many memories it reaches."""

    key_id: str
    concept: str
    aliases: list[str]
    key_type: str
    memory_count: int
    is_hub: bool
    specificity: float
    score: NotRequired[float]
    score_kind: NotRequired[str]
    match_type: NotRequired[str]


class KeyLink(KeyView):
    """A key of one memory: its view, the link weight and, given a query, its relevance."""

    weight: float
    relevance: float | None


class AliasLearning(TypedDict):
    """A confirmed route through a key: how often, and whether its query became a learned alias."""

    query: str
    confirmations: int
    learned: bool


class KeyRecall(TypedDict):
    """``keys/recall``: the matching key clusters and one passive Top-1 memory per key."""

    status: str
    query: str
    namespace: str | None
    keys: list[KeyView]
    memories: Sequence[JSONObject]
    namespace_memory_count: NotRequired[int]
    nearest_keys: NotRequired[Sequence[JSONObject]]
    note: NotRequired[str]


class KeyBrowse(TypedDict):
    """``keys/browse_keys``: one page of the key vocabulary."""

    namespace: str | None
    memory_count: int
    total: int
    offset: int
    limit: int
    has_more: bool
    keys: list[KeyView]


class KeyRead(TypedDict):
    """``keys/read_key``: one key and a page of its memories, ranked."""

    key: KeyView
    query: str | None
    namespace: str | None
    total: int
    offset: int
    limit: int
    has_more: bool
    memories: Sequence[JSONObject]


class KeyMemoryRead(TypedDict):
    """``keys/read_memory``: a memory's full content, connected keys and validity."""

    id: str
    memory_id: str
    namespace: str | None
    layer: str
    validity: JSONObject
    content: str
    current: bool
    source: JSONObject
    connected_keys: list[KeyLink]
    related: Sequence[JSONObject]
    reinforced: JSONObject | None
    alias_learning: NotRequired[AliasLearning]


class KeyRemembered(TypedDict):
    """``keys/remember``: the memory saved (or merged into an identical one, or refused as forgotten)."""

    saved: str | None
    deduplicated: NotRequired[bool]
    tombstoned: NotRequired[bool]
    tombstone_id: NotRequired[str]
    note: NotRequired[str]
    hints: NotRequired[JSONObject]


class KeyCorrected(TypedDict):
    """``keys/correct``: the new version and the one it superseded."""

    new_id: str | None
    superseded: str | None
    hints: NotRequired[JSONObject]
    deduplicated: NotRequired[bool]
    saved: NotRequired[str | None]
    tombstoned: NotRequired[bool]
    tombstone_id: NotRequired[str]
    note: NotRequired[str]


class KeyConfirmed(TypedDict):
    """``keys/confirm_memory``: the memory confirmed with evidence (its validity renewed)."""

    memory_id: str
    confirmed: bool
    evidence: str
    depth: float | None
    confirmation_count: int
    validity: JSONObject


class KeyRelated(TypedDict):
    """``keys/related``: memories sharing keys with this one or linked to it, best first."""

    memory_id: str
    count: int
    related: Sequence[JSONObject]


class KeyMemoryList(TypedDict):
    """``keys/list_memories``: active key-graph memories, newest first."""

    namespace: str | None
    total: int
    count: int
    memories: Sequence[JSONObject]


class PanelOverview(TypedDict):
    """Counts per layer, the share of each source and the daily activity of the last weeks."""

    counts: dict[str, int]
    sourceDistribution: Sequence[JSONObject]
    dailyActivity: Sequence[JSONObject]
    serverTime: str


class PanelAnalysis(TypedDict):
    """Recall and tool-latency figures, daily writes and evolutions."""

    metrics: dict[str, float]
    dailyMemoryWrites: dict[str, int]
    dailySkillEvolutions: dict[str, int]
    toolLatency: JSONObject
    serverTime: str


class Sources(TypedDict):
    """The agent histories found on this machine, their last sync and counts."""

    sources: Sequence[JSONObject]
    known: list[str]
    recipeErrors: list[str]
    serverTime: str


class ImportJob(TypedDict):
    """An import job's progress: totals and one entry per source (``startedAt`` is null while it is queued)."""

    jobId: str
    state: str
    mode: str
    dryRun: bool
    startedAt: str | None
    finishedAt: str | None
    error: str | None
    totals: JSONObject
    sources: Sequence[JSONObject]


class ReviewDecided(TypedDict):
    """A review decision applied (audited)."""

    id: str
    status: str
    review: JSONObject
    auditId: int | str
    serverTime: str


class Exported(TypedDict):
    """An export archive written: its path, size, manifest and rows per table."""

    path: str
    bytes: int
    manifest: JSONObject
    counts: dict[str, int]


class Imported(TypedDict):
    """An export archive merged (or, with ``dryRun``, what would be)."""

    path: str
    dryRun: bool
    onConflict: str
    schemaVersion: int | None
    exportedAt: str | None
    tables: JSONObject
    added: int
    conflicts: int
    serverTime: str


class Wiped(TypedDict):
    """The store emptied: rows removed per table, the backup taken, what was kept."""

    removed: dict[str, int]
    backup: str | None
    kept: list[str]
    serverTime: str


#: Answer types of the key-graph tools, by operation.
KEY_ANSWERS: dict[str, object] = {
    "forget": KeyForgotten,
    "dismiss": KeyDismissed,
    "cleanup_expired": KeysCleaned,
    "memory_stats": KeyStats,
    "remember_batch": list[KeyRemembered],
    "recall": KeyRecall,
    "browse_keys": KeyBrowse,
    "read_key": KeyRead,
    "read_memory": KeyMemoryRead,
    "remember": KeyRemembered,
    "correct": KeyCorrected,
    "confirm_memory": KeyConfirmed,
    "related": KeyRelated,
    "list_memories": KeyMemoryList,
}

#: Any key-graph answer (what ``KeyOps.call`` returns for one of :data:`KEY_ANSWERS`' operations).
KeyAnswer: TypeAlias = (
    KeyForgotten
    | KeyDismissed
    | KeysCleaned
    | KeyStats
    | list[KeyRemembered]
    | KeyRecall
    | KeyBrowse
    | KeyRead
    | KeyMemoryRead
    | KeyRemembered
    | KeyCorrected
    | KeyConfirmed
    | KeyRelated
    | KeyMemoryList
)


class Person(TypedDict):
    """One person of a team server."""

    name: str
    createdAt: str
    revokedAt: str | None


class PersonAdded(Person):
    """A person added: their token, shown this once (only its hash is kept)."""

    token: str


class People(TypedDict):
    """Everyone of a team server, revoked people included."""

    items: Sequence[Person]
