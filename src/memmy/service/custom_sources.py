"""Adding another agent from the panel: check a history recipe against the files, then save it where
``memmy-memory sources add`` saves recipes (``<memmy home>/sources/<name>.json``), so imports pick it up."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from memmy.errors import InvalidArgument
from memmy.sources.adapters import ADAPTERS
from memmy.sources.model import ScanStats
from memmy.sources.recipe import FORMATS, Recipe, RecipeAdapter, normalise_name, recipes_dir


def parse_pairs(text: str, what: str) -> dict[str, str]:
    """``KEY=value`` lines (or comma-separated) into a dict; a line without ``=`` is refused naming ``what``."""
    pairs: dict[str, str] = {}
    for item in re.split(r"[\n,]", text):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InvalidArgument(f"{what}: expected KEY=value, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def add_recipe(memmy_home: Path, body: dict[str, str]) -> dict[str, Any]:
    """Save a recipe for an agent memmy has no reader for, after reading its history with it once.

    ``body``: ``name``, ``history`` (absolute path), ``format`` (jsonl|json|sqlite), ``fields`` and ``roleMap``
    (``KEY=value`` lines), ``recordsPath``, ``query``. Returns the source id, the recipe file and what was readable.
    """
    name = (body.get("name") or "").strip()
    if not name:
        raise InvalidArgument("name: give the agent's name")
    source_id = re.sub(r"[^a-z0-9_]", "_", normalise_name(name))
    if source_id in ADAPTERS:
        raise InvalidArgument(f"{name} is built in: use Sync now")
    history = Path((body.get("history") or "").strip()).expanduser()
    if not history.is_absolute() or not history.exists():
        raise InvalidArgument(f"history: expected an existing absolute path, got {str(history)!r}")
    fmt = body.get("format") or "jsonl"
    if fmt not in FORMATS:
        raise InvalidArgument(f"format: expected one of {', '.join(FORMATS)}")
    spec = {
        "name": source_id,
        "format": fmt,
        "path": str(history),
        "fields": {"role": "role", "content": "content", **parse_pairs(body.get("fields") or "", "fields")},
        "roleMap": parse_pairs(body.get("roleMap") or "", "role map"),
        "recordsPath": body.get("recordsPath") or None,
        "query": body.get("query") or None,
        "timestampFormat": "auto",
    }
    try:
        recipe = Recipe.from_json(spec)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    stats = ScanStats()
    readable = list(RecipeAdapter(recipe).conversations(dict(os.environ), stats))
    if not readable:
        raise InvalidArgument(
            f"no messages could be read from {history} with this recipe (skipped: {dict(stats.skipped)}, "
            f"errors: {stats.errors[:3]}); check the format and the field paths"
        )
    target = recipes_dir(memmy_home) / f"{source_id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(recipe.to_json(), indent=2) + "\n", encoding="utf-8")
    return {
        "source": source_id,
        "recipe": str(target),
        "conversations": len(readable),
        "messages": sum(len(c.messages) for c in readable),
    }
