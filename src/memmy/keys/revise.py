"""A versioned correction of any memory that has no key-graph keys (made by ``add``, import or evolution).

The new version keeps the old one's layer, title, tags, scope and provenance with the new text; the old version's
validity ends now and it points forward (``superseded_by``), so the history chain stays whole and only the new
version is recalled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from memmy.domain import ID_PREFIX_BY_LAYER, Memory, content_hash, new_id, summarise
from memmy.errors import Conflict, InvalidArgument
from memmy.indexing import Indexer, embedding_text
from memmy.kinds import memory as stored
from memmy.store.db import utc_now
from memmy.store.unit import Store

MAX_CHARS = 20_000


def revise(store: Store, indexer: Indexer, old: Memory, content: Any, source: str) -> dict[str, Any]:
    """Write ``content`` as the next version of ``old``; return ``{"new_id", "superseded"}``."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidArgument("content: expected the corrected text")
    text = content.strip()[:MAX_CHARS]
    if old.superseded_by:
        raise Conflict(f"memory {old.id} was already corrected by {old.superseded_by}; correct the current version")
    if old.status == "deleted":
        raise Conflict(f"memory {old.id} is deleted; add the fact again instead")
    now = utc_now()
    kept = {k: v for k, v in old.properties.items() if k != stored.EMBEDDING_TEXT}
    properties = stored.with_values(kept, **{stored.SUMMARY: summarise(text), stored.SUPERSEDES: old.id})
    new = dataclasses.replace(
        old,
        id=new_id(ID_PREFIX_BY_LAYER[old.layer]),
        content=text,
        content_hash=content_hash(text),
        properties=properties,
        version=1,
        created_at=now,
        updated_at=now,
        valid_from=now,
        valid_to=None,
        superseded_by=None,
        deleted_at=None,
        tags=list(old.tags),
        info=dict(old.info),
    )
    before = old.snapshot()
    old.valid_to = now
    old.superseded_by = new.id
    old.updated_at = now
    old.version += 1
    if old.layer != "L1":
        old.status = "archived"  # evolution scans live policies/models/skills by status
    with store.transaction():
        store.memories.update(old, before, "supersede", source)
        store.memories.insert(new, source=source)
    indexer.unindex(old.id)
    if new.status == "activated":
        indexer.enqueue(new.id, new.layer, embedding_text(new.layer, new.title, new.content, new.properties))
    return {"new_id": new.id, "superseded": old.id}
