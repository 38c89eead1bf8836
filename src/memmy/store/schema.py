"""Versioned schema migrations for the SQLite store.

A fresh database runs every migration in order; an older file runs the missing ones after a backup.
Migration 1 is the first released layout (the upstream tables); migration 2 adds what memmy does beyond
upstream: scope columns (project, source agent), validity time, and the CJK-aware full-text table.
Migration 4 adds the associative key graph (keys, aliases, key vectors, weighted links, related_to links,
per-memory key state) and value-keyed tombstones (existing deleted memories are tombstoned on the way).
Migration 5 adds Dream: one row per consolidation pass and the full before/after rows it changed.
Migrations 6 and 7 add indexes for evolution and the panel; migration 8 drops two memories indexes no query needs
and migration 6's duplicate of a raw_turns index; migration 9 puts every full-text row under its memory's rowid.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from memmy.errors import StoreError
from memmy.store.text import fts_row

MIGRATION_001: Final = """
CREATE TABLE IF NOT EXISTS memories (
  id TEXT PRIMARY KEY,
  timeline TEXT,
  user_id TEXT NOT NULL,
  conversation_id TEXT,
  session_id TEXT,
  agent_id TEXT,
  app_id TEXT,
  memory_type TEXT NOT NULL DEFAULT 'LongTermMemory',
  status TEXT NOT NULL DEFAULT 'activated'
    CHECK (status IN ('activated','resolving','archived','deleted')),
  visibility TEXT NOT NULL DEFAULT 'private',
  memory_key TEXT,
  title TEXT NOT NULL DEFAULT '',
  memory_value TEXT NOT NULL,
  tags_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags_json)),
  info_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(info_json)),
  properties_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(properties_json)),
  memory_layer TEXT NOT NULL CHECK (memory_layer IN ('L1','L2','L3','Skill')),
  content_hash TEXT,
  version INTEGER NOT NULL DEFAULT 1,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  deleted_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_memories_user_layer ON memories(user_id, memory_layer, status, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_memories_conversation ON memories(user_id, conversation_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_memories_session ON memories(session_id, memory_layer, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_memories_agent ON memories(agent_id, app_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_memories_hash ON memories(user_id, content_hash, memory_layer);
CREATE INDEX IF NOT EXISTS idx_memories_key ON memories(user_id, memory_key, memory_layer);

CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts
  USING fts5(id UNINDEXED, identifier, memory_value, tags, tokenize='unicode61');

CREATE TABLE IF NOT EXISTS memory_vector_entries (
  id INTEGER PRIMARY KEY,
  memory_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
  vector_field TEXT NOT NULL CHECK (vector_field IN ('vec_summary','vec_action','vec')),
  embedding_provider TEXT NOT NULL,
  embedding_model TEXT NOT NULL,
  embedding_dim INTEGER NOT NULL,
  embedding BLOB NOT NULL,
  updated_at TEXT NOT NULL,
  UNIQUE (memory_id, vector_field)
);
CREATE INDEX IF NOT EXISTS idx_vectors_field ON memory_vector_entries(vector_field, updated_at DESC, id DESC);

CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY,
  user_id TEXT,
  project_id TEXT,
  source TEXT NOT NULL,
  profile_id TEXT NOT NULL DEFAULT 'default',
  profile_label TEXT,
  workspace_id TEXT,
  workspace_path TEXT,
  host_session_key TEXT,
  conversation_id TEXT,
  status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open','processing','closed')),
  meta_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(meta_json)),
  opened_at TEXT NOT NULL,
  last_seen_at TEXT NOT NULL,
  closed_at TEXT,
  updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_sessions_user ON sessions(user_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_host_key ON sessions(host_session_key);
CREATE INDEX IF NOT EXISTS idx_sessions_lookup ON sessions(user_id, source, profile_id, host_session_key, status);

CREATE TABLE IF NOT EXISTS episodes (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  user_id TEXT,
  project_id TEXT,
  conversation_id TEXT,
  status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open','processing','closed')),
  title TEXT,
  summary TEXT,
  l1_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(l1_memory_ids_json)),
  raw_turn_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(raw_turn_ids_json)),
  feedback_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(feedback_ids_json)),
  decision_repair_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(decision_repair_ids_json)),
  l2_policy_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(l2_policy_ids_json)),
  l3_world_model_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(l3_world_model_ids_json)),
  skill_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(skill_memory_ids_json)),
  turn_count INTEGER NOT NULL DEFAULT 0,
  r_task REAL,
  reward_detail_json TEXT CHECK (reward_detail_json IS NULL OR json_valid(reward_detail_json)),
  pipeline_run_id TEXT,
  pipeline_status TEXT NOT NULL DEFAULT 'idle'
    CHECK (pipeline_status IN ('idle','running','succeeded','failed')),
  pipeline_error TEXT,
  meta_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(meta_json)),
  opened_at TEXT NOT NULL,
  closed_at TEXT,
  updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_episodes_session ON episodes(session_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_episodes_project ON episodes(project_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS idx_episodes_pipeline ON episodes(pipeline_status, updated_at DESC);

CREATE TABLE IF NOT EXISTS raw_turns (
  id TEXT PRIMARY KEY,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  episode_id TEXT REFERENCES episodes(id) ON DELETE SET NULL,
  turn_id TEXT NOT NULL,
  user_id TEXT,
  conversation_id TEXT,
  user_text TEXT,
  assistant_text TEXT,
  reasoning_summary TEXT,
  tool_calls_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tool_calls_json)),
  tool_results_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tool_results_json)),
  source_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(source_memory_ids_json)),
  usage_json TEXT CHECK (usage_json IS NULL OR json_valid(usage_json)),
  message_payload_json TEXT CHECK (message_payload_json IS NULL OR json_valid(message_payload_json)),
  status TEXT NOT NULL DEFAULT 'succeeded',
  redacted_at TEXT,
  deleted_at TEXT,
  created_at TEXT NOT NULL,
  UNIQUE (session_id, turn_id)
);
CREATE INDEX IF NOT EXISTS idx_raw_turns_episode ON raw_turns(episode_id, created_at);

CREATE TABLE IF NOT EXISTS feedback (
  id TEXT PRIMARY KEY,
  user_id TEXT, project_id TEXT, conversation_id TEXT, session_id TEXT, episode_id TEXT,
  l1_memory_id TEXT, raw_turn_id TEXT,
  channel TEXT NOT NULL CHECK (channel IN ('explicit','implicit')),
  polarity TEXT NOT NULL CHECK (polarity IN ('positive','negative','neutral')),
  magnitude REAL NOT NULL DEFAULT 1,
  rationale TEXT,
  raw_payload_json TEXT CHECK (raw_payload_json IS NULL OR json_valid(raw_payload_json)),
  context_hash TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_feedback_session ON feedback(session_id, created_at);
CREATE INDEX IF NOT EXISTS idx_feedback_l1 ON feedback(l1_memory_id);
CREATE INDEX IF NOT EXISTS idx_feedback_user ON feedback(user_id, created_at);
CREATE INDEX IF NOT EXISTS idx_feedback_episode ON feedback(episode_id);
CREATE INDEX IF NOT EXISTS idx_feedback_raw_turn ON feedback(raw_turn_id);
CREATE INDEX IF NOT EXISTS idx_feedback_context ON feedback(user_id, project_id, context_hash, created_at);

CREATE TABLE IF NOT EXISTS decision_repairs (
  id TEXT PRIMARY KEY,
  session_id TEXT, episode_id TEXT, raw_turn_id TEXT, user_id TEXT, project_id TEXT, context_hash TEXT,
  issue TEXT NOT NULL, suggestion TEXT NOT NULL, preference TEXT, anti_pattern TEXT,
  high_value_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(high_value_memory_ids_json)),
  low_value_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(low_value_memory_ids_json)),
  attached_policy_memory_ids_json TEXT NOT NULL DEFAULT '[]'
    CHECK (json_valid(attached_policy_memory_ids_json)),
  feedback_id TEXT, validated INTEGER NOT NULL DEFAULT 0,
  source_json TEXT, meta_json TEXT, created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_repairs_context ON decision_repairs(user_id, project_id, context_hash);
CREATE INDEX IF NOT EXISTS idx_repairs_episode ON decision_repairs(episode_id, created_at);

CREATE TABLE IF NOT EXISTS l2_candidate_pool (
  id TEXT PRIMARY KEY,
  user_id TEXT, session_id TEXT,
  source_memory_id TEXT NOT NULL,
  candidate_key TEXT NOT NULL,
  candidate_value TEXT,
  score REAL,
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','promoted','rejected')),
  evidence_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(evidence_json)),
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL, expires_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_l2_pool_status ON l2_candidate_pool(user_id, status, updated_at);
CREATE INDEX IF NOT EXISTS idx_l2_pool_key ON l2_candidate_pool(user_id, candidate_key, status, expires_at);

CREATE TABLE IF NOT EXISTS trace_policy_links (
  id TEXT PRIMARY KEY,
  user_id TEXT, l1_memory_id TEXT NOT NULL, l2_memory_id TEXT NOT NULL,
  relation TEXT NOT NULL DEFAULT 'supports', strength REAL, created_at TEXT NOT NULL,
  UNIQUE (l1_memory_id, l2_memory_id, relation)
);

CREATE TABLE IF NOT EXISTS skill_trials (
  id TEXT PRIMARY KEY,
  user_id TEXT, project_id TEXT, skill_memory_id TEXT NOT NULL, session_id TEXT,
  episode_id TEXT NOT NULL, l1_memory_id TEXT, raw_turn_id TEXT, turn_id TEXT, tool_call_id TEXT,
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','pass','fail','unknown')),
  outcome TEXT NOT NULL DEFAULT 'unknown' CHECK (outcome IN ('unknown','success','failure','cancelled')),
  feedback_id TEXT, created_at TEXT NOT NULL, resolved_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_skill_trials_skill ON skill_trials(skill_memory_id, created_at);
CREATE INDEX IF NOT EXISTS idx_skill_trials_episode ON skill_trials(episode_id);
CREATE INDEX IF NOT EXISTS idx_skill_trials_status ON skill_trials(status, created_at);
CREATE INDEX IF NOT EXISTS idx_skill_trials_session ON skill_trials(session_id);
CREATE INDEX IF NOT EXISTS idx_skill_trials_l1 ON skill_trials(l1_memory_id);

CREATE TABLE IF NOT EXISTS recall_events (
  id TEXT PRIMARY KEY,
  namespace_id TEXT, session_id TEXT, episode_id TEXT, turn_id TEXT, user_id TEXT,
  query TEXT NOT NULL, query_hash TEXT,
  layers_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(layers_json)),
  candidate_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(candidate_memory_ids_json)),
  injected_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(injected_memory_ids_json)),
  hit_memory_ids_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(hit_memory_ids_json)),
  dropped_json TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(dropped_json)),
  outcome TEXT NOT NULL DEFAULT 'pending' CHECK (outcome IN ('pending','positive','negative','ignored')),
  request_json TEXT CHECK (request_json IS NULL OR json_valid(request_json)),
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_recall_session ON recall_events(session_id, created_at);

CREATE TABLE IF NOT EXISTS api_logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  tool_name TEXT NOT NULL CHECK (tool_name IN ('memory_add','memory_search','skill_generate','skill_evolve')),
  source_agent TEXT,
  input_json TEXT, output_json TEXT,
  duration_ms REAL, success INTEGER NOT NULL DEFAULT 1,
  called_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_api_logs_called ON api_logs(called_at);

CREATE TABLE IF NOT EXISTS memory_change_log (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  memory_id TEXT NOT NULL,
  namespace_id TEXT, kind TEXT, op TEXT, entity_id TEXT, user_id TEXT, change_type TEXT,
  version INTEGER, before_json TEXT, after_json TEXT, source TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_change_log_memory ON memory_change_log(memory_id, seq);

CREATE TABLE IF NOT EXISTS audit_logs (
  id TEXT PRIMARY KEY,
  user_id TEXT, session_id TEXT, actor_json TEXT, action TEXT NOT NULL,
  target_kind TEXT, target_id TEXT, before_json TEXT, after_json TEXT, meta_json TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_audit_target ON audit_logs(target_id, created_at);

CREATE TABLE IF NOT EXISTS idempotency_keys (
  key TEXT PRIMARY KEY,
  request_hash TEXT NOT NULL,
  response_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at TEXT
);

CREATE TABLE IF NOT EXISTS evolution_jobs (
  id TEXT PRIMARY KEY,
  job_type TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'queued'
    CHECK (status IN ('queued','leased','succeeded','failed','dead_letter')),
  dedupe_key TEXT, user_id TEXT, session_id TEXT, episode_id TEXT, target_memory_id TEXT,
  payload_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(payload_json)),
  priority INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL DEFAULT 3,
  run_after TEXT,
  leased_until TEXT, last_error TEXT,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_jobs_dedupe ON evolution_jobs(dedupe_key)
  WHERE status IN ('queued','leased','failed');
CREATE INDEX IF NOT EXISTS idx_jobs_status ON evolution_jobs(status, priority DESC, created_at);

CREATE TABLE IF NOT EXISTS embedding_retry_queue (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  target_kind TEXT NOT NULL CHECK (target_kind IN ('trace','policy','world_model','skill')),
  target_id TEXT NOT NULL,
  vector_field TEXT NOT NULL,
  source_text TEXT NOT NULL,
  embed_role TEXT NOT NULL DEFAULT 'document' CHECK (embed_role IN ('document','query')),
  status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','in_progress','failed','succeeded')),
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL DEFAULT 6,
  next_attempt_at INTEGER NOT NULL DEFAULT 0,
  claimed_by TEXT, lease_until INTEGER, last_error TEXT,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
  UNIQUE (target_kind, target_id, vector_field)
);
CREATE INDEX IF NOT EXISTS idx_embed_queue_due ON embedding_retry_queue(status, next_attempt_at);

CREATE TABLE IF NOT EXISTS memory_processing_state (
  memory_id TEXT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
  state TEXT NOT NULL CHECK (state IN ('summary_pending','summarizing','embedding_pending','embedding',
                                        'ready','ready_text_only','failed')),
  stage TEXT CHECK (stage IS NULL OR stage IN ('summary','embedding')),
  active_job_id TEXT REFERENCES evolution_jobs(id) ON DELETE SET NULL,
  attempt_count INTEGER NOT NULL DEFAULT 0,
  manual_retry_count INTEGER NOT NULL DEFAULT 0,
  retry_action TEXT CHECK (retry_action IS NULL OR retry_action IN ('retry','open_settings','none')),
  error_code TEXT, error_message TEXT, failed_at TEXT,
  updated_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS artifacts (
  id TEXT PRIMARY KEY,
  session_id TEXT, episode_id TEXT, raw_turn_id TEXT, user_id TEXT,
  kind TEXT, uri TEXT, payload_json TEXT, created_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS runtime_kv (
  key TEXT PRIMARY KEY,
  value_json TEXT NOT NULL CHECK (json_valid(value_json)),
  updated_at TEXT NOT NULL
);
"""

MIGRATION_002: Final = """
ALTER TABLE memories ADD COLUMN project_id TEXT;
ALTER TABLE memories ADD COLUMN source_agent TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE memories ADD COLUMN turn_id TEXT;
ALTER TABLE memories ADD COLUMN valid_from TEXT;
ALTER TABLE memories ADD COLUMN valid_to TEXT;
ALTER TABLE memories ADD COLUMN superseded_by TEXT;
UPDATE memories SET source_agent = COALESCE(agent_id, 'unknown'), valid_from = created_at;
CREATE INDEX IF NOT EXISTS idx_memories_project ON memories(project_id, memory_layer, status);
CREATE INDEX IF NOT EXISTS idx_memories_source ON memories(source_agent, memory_layer, status);
ALTER TABLE api_logs ADD COLUMN user_id TEXT;
DROP TABLE IF EXISTS memories_fts;
CREATE VIRTUAL TABLE memories_fts
  USING fts5(id UNINDEXED, identifier, memory_value, tags, tokenize='porter unicode61 remove_diacritics 2');
"""

MIGRATION_003: Final = """
CREATE TABLE IF NOT EXISTS source_checkpoints (
  source TEXT NOT NULL,
  conversation_id TEXT NOT NULL,
  last_message_id TEXT,
  last_created_at TEXT,
  content_hash TEXT,
  origin TEXT,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (source, conversation_id)
);
CREATE TABLE IF NOT EXISTS source_watermarks (
  source TEXT PRIMARY KEY,
  mode TEXT NOT NULL,
  baseline_at TEXT,
  latest_seen_created_at TEXT,
  last_sync_at TEXT,
  last_stats_json TEXT CHECK (last_stats_json IS NULL OR json_valid(last_stats_json)),
  updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_memories_key_only ON memories(memory_key);
"""

MIGRATION_004: Final = """
CREATE TABLE IF NOT EXISTS memory_keys (
  id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL,
  canonical TEXT NOT NULL,
  key_type TEXT NOT NULL DEFAULT 'concept' CHECK (key_type IN ('concept','name','proper_noun')),
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_memory_keys_user ON memory_keys(user_id);
CREATE TABLE IF NOT EXISTS memory_key_aliases (
  key_id TEXT NOT NULL REFERENCES memory_keys(id) ON DELETE CASCADE,
  user_id TEXT NOT NULL,
  alias TEXT NOT NULL,
  norm TEXT NOT NULL,
  origin TEXT NOT NULL DEFAULT 'explicit' CHECK (origin IN ('canonical','explicit','merge','learned')),
  similarity REAL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (key_id, norm)
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_key_alias_surface ON memory_key_aliases(user_id, norm);
CREATE TABLE IF NOT EXISTS memory_key_vectors (
  key_id TEXT NOT NULL REFERENCES memory_keys(id) ON DELETE CASCADE,
  norm TEXT NOT NULL,
  embedding_provider TEXT NOT NULL,
  embedding_model TEXT NOT NULL,
  embedding_dim INTEGER NOT NULL,
  embedding BLOB NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (key_id, norm)
);
CREATE TABLE IF NOT EXISTS memory_key_links (
  key_id TEXT NOT NULL REFERENCES memory_keys(id) ON DELETE CASCADE,
  memory_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
  weight REAL NOT NULL DEFAULT 1.0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (key_id, memory_id)
);
CREATE INDEX IF NOT EXISTS idx_key_links_memory ON memory_key_links(memory_id);
CREATE TABLE IF NOT EXISTS memory_relations (
  from_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
  to_id TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
  relation TEXT NOT NULL DEFAULT 'related_to',
  created_at TEXT NOT NULL,
  PRIMARY KEY (from_id, to_id, relation)
);
CREATE INDEX IF NOT EXISTS idx_memory_relations_to ON memory_relations(to_id);
CREATE TABLE IF NOT EXISTS memory_key_state (
  memory_id TEXT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
  namespace TEXT NOT NULL DEFAULT 'default',
  ttl_seconds REAL,
  expires_at TEXT,
  depth REAL NOT NULL DEFAULT 0,
  access_count INTEGER NOT NULL DEFAULT 0,
  last_accessed_at TEXT,
  source_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(source_json)),
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_key_state_namespace ON memory_key_state(namespace);
CREATE INDEX IF NOT EXISTS idx_key_state_expiry ON memory_key_state(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS key_alias_candidates (
  key_id TEXT NOT NULL REFERENCES memory_keys(id) ON DELETE CASCADE,
  norm TEXT NOT NULL,
  query TEXT NOT NULL,
  hits INTEGER NOT NULL DEFAULT 0,
  seen_at TEXT NOT NULL,
  PRIMARY KEY (key_id, norm)
);
CREATE TABLE IF NOT EXISTS tombstones (
  id TEXT PRIMARY KEY,
  user_id TEXT NOT NULL,
  content_hash TEXT,
  memory_key TEXT,
  memory_id TEXT,
  memory_layer TEXT,
  reason TEXT,
  preview TEXT,
  created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_tombstones_hash ON tombstones(user_id, content_hash);
CREATE INDEX IF NOT EXISTS idx_tombstones_key ON tombstones(memory_key);
INSERT INTO tombstones(id, user_id, content_hash, memory_key, memory_id, memory_layer, reason, preview, created_at)
  SELECT 'tomb_' || lower(hex(randomblob(10))), user_id, content_hash, memory_key, id, memory_layer,
         'deleted before tombstones existed', substr(memory_value, 1, 140), COALESCE(deleted_at, updated_at)
  FROM memories WHERE status = 'deleted';
"""

MIGRATION_005: Final = """
CREATE TABLE IF NOT EXISTS dreams (
  id TEXT PRIMARY KEY,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running','succeeded','failed','restored')),
  trigger TEXT NOT NULL DEFAULT 'manual' CHECK (trigger IN ('manual','scheduled')),
  stats_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(stats_json)),
  restored_at TEXT,
  error TEXT
);
CREATE INDEX IF NOT EXISTS idx_dreams_started ON dreams(started_at DESC);
CREATE TABLE IF NOT EXISTS dream_changes (
  dream_id TEXT NOT NULL REFERENCES dreams(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  memory_id TEXT NOT NULL,
  action TEXT NOT NULL CHECK (action IN ('merge','archive_stale','archive_contradicted','supersede')),
  before_json TEXT NOT NULL CHECK (json_valid(before_json)),
  after_json TEXT NOT NULL CHECK (json_valid(after_json)),
  reason TEXT,
  PRIMARY KEY (dream_id, seq)
);
CREATE INDEX IF NOT EXISTS idx_dream_changes_memory ON dream_changes(memory_id);
"""

MIGRATION_006: Final = """
CREATE INDEX IF NOT EXISTS idx_memories_trace_signature
  ON memories(json_extract(properties_json, '$.trace.signature')) WHERE memory_layer = 'L1';
CREATE INDEX IF NOT EXISTS idx_trace_policy_links_policy ON trace_policy_links(l2_memory_id);
CREATE INDEX IF NOT EXISTS idx_raw_turns_episode_created ON raw_turns(episode_id, created_at);
CREATE INDEX IF NOT EXISTS idx_episodes_session_opened ON episodes(session_id, opened_at DESC);
"""

#: The Memory panel's time-ordered reads: the Recalls page and today's injections (newest recall events), and the
#: memories created per day in Analytics, each a range on an index instead of a pass over the whole table.
MIGRATION_007: Final = """
CREATE INDEX IF NOT EXISTS idx_recall_events_created ON recall_events(created_at);
CREATE INDEX IF NOT EXISTS idx_memories_created_layer ON memories(created_at, memory_layer);
"""

#: Two memories indexes no query needs, each maintained on every insert (indexes with random keys are most of an
#: import's SQLite time): every read by key gives the key, which ``idx_memories_key_only`` serves, so
#: ``(user_id, memory_key, memory_layer)`` only ever served a ``user_id = ?`` prefix that three other indexes start
#: with; nothing reads ``agent_id``. (``idx_memories_hash`` stays: memory.add looks duplicates up by user and hash.)
#: Migration 6 also gave ``raw_turns`` a second index on ``(episode_id, created_at)``, the columns of migration 1's
#: ``idx_raw_turns_episode``: every captured or imported turn paid for both.
MIGRATION_008: Final = """
DROP INDEX IF EXISTS idx_memories_key;
DROP INDEX IF EXISTS idx_memories_agent;
DROP INDEX IF EXISTS idx_raw_turns_episode_created;
"""

#: The full-text table again, with every row's FTS rowid equal to its memory's rowid: a memory's index row is then
#: found by rowid (an update or delete no longer scans the whole table for the UNINDEXED ``id``: 35-53 ms at 100k
#: memories, inside the write transaction), and the keyword channels filter their ranked rowids against
#: ``memories`` directly instead of reading each match's stored text for its ``id`` first. The ``after`` step
#: refills it (:func:`_rebuild_fts`).
MIGRATION_009: Final = """
DROP TABLE IF EXISTS memories_fts;
CREATE VIRTUAL TABLE memories_fts
  USING fts5(id UNINDEXED, identifier, memory_value, tags, tokenize='porter unicode61 remove_diacritics 2');
"""

#: The people of a team server (``memmy-memory users``): each one's token is kept only as its SHA-256, a revoked
#: person keeps the row (``revoked_at``) so the audit log still names them. Plain SQL, the same on PostgreSQL.
MIGRATION_010: Final = """
CREATE TABLE IF NOT EXISTS team_members (
  name TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  revoked_at TEXT
);
CREATE INDEX IF NOT EXISTS idx_memories_team ON memories(visibility, project_id);
"""

SCHEMA_VERSION: Final = 10
#: From this schema version on, every full-text row is under its memory's rowid (``store.integrity`` checks it).
FTS_ROWID_VERSION: Final = 9


def current_version(conn: sqlite3.Connection) -> int:
    """The schema version recorded in the file (0 for an empty database)."""
    has_table = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_migrations'").fetchone()
    if not has_table:
        has_memories = conn.execute("SELECT 1 FROM sqlite_master WHERE name='memories'").fetchone()
        if has_memories:
            raise StoreError("the database has memmy tables but no schema_migrations table; refusing to guess")
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


@dataclass(frozen=True)
class Migration:
    """One schema step: its version, a stable id and the DDL it runs (plus an optional data step)."""

    version: int
    id: str
    sql: str
    after: Callable[[sqlite3.Connection], None] | None = None


def _rebuild_fts(conn: sqlite3.Connection) -> None:
    """Fill the (empty) full-text table from memories with the CJK-aware segmentation, each row under its
    memory's rowid."""
    rows = conn.execute(
        "SELECT rowid, id, memory_key, title, memory_value, tags_json FROM memories WHERE status != 'deleted'"
    )
    conn.executemany(
        "INSERT INTO memories_fts(rowid, id, identifier, memory_value, tags) VALUES (?,?,?,?,?)",
        ((row[0], row[1], *fts_row(row[2], row[3], row[4], row[5])) for row in rows.fetchall()),
    )


#: The full-text table as the latest migration creates it (the repair in ``store.integrity`` recreates it so).
MEMORIES_FTS_DDL: Final = (
    "CREATE VIRTUAL TABLE memories_fts\n"
    "  USING fts5(id UNINDEXED, identifier, memory_value, tags, tokenize='porter unicode61 remove_diacritics 2')"
)
refill_fts: Final = _rebuild_fts


MIGRATIONS: Final = (
    Migration(1, "001_core_tables", MIGRATION_001),
    Migration(2, "002_scope_validity_cjk_fts", MIGRATION_002, after=_rebuild_fts),
    Migration(3, "003_source_import_state", MIGRATION_003),
    Migration(4, "004_key_graph_validity_tombstones", MIGRATION_004),
    Migration(5, "005_dreams", MIGRATION_005),
    Migration(6, "006_evolution_indexes", MIGRATION_006),
    Migration(7, "007_panel_time_indexes", MIGRATION_007),
    Migration(8, "008_drop_unused_memory_indexes", MIGRATION_008),
    Migration(9, "009_fts_rowid_is_memory_rowid", MIGRATION_009, after=_rebuild_fts),
    Migration(10, "010_team_members", MIGRATION_010),
)
