"""Key-graph arguments (keymem's names), key surface normalisation, scripts and calibrated thresholds.

Every validator raises :class:`InvalidArgument` naming the argument, before anything is written.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from memmy.commands.base import Command, param
from memmy.commands.fields import NOT_BLANK
from memmy.embed import EmbeddingFingerprint
from memmy.embed.scale import similarity_scale
from memmy.errors import InvalidArgument, NotFound
from memmy.recall.freshness import DECAY_PROFILES
from memmy.store.keys import KEY_TYPES

MAX_KEYS = 32
MAX_KEY_CHARS = 100
MAX_CONTENT_CHARS = 200_000
MAX_TTL_SECONDS = 100 * 365 * 86_400
DEFAULT_NAMESPACE = "default"
ALIAS_SEPARATOR = "|"
_EDGE_PUNCT = re.compile(r"^[\s\"'`.,;:!?()\[\]{}<>]+|[\s\"'`.,;:!?()\[\]{}<>]+$")


# -- surfaces -----------------------------------------------------------------------------------------
def norm_key(text: str) -> str:
    """Normalised surface form: NFKC, case-folded, whitespace collapsed, edge punctuation stripped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _EDGE_PUNCT.sub("", " ".join(folded.split()))


def number_variants(norm: str) -> list[str]:
    """Singular/plural spellings of an English word (``apples`` <-> ``apple``); empty for other text."""
    if not latin_only(norm) or " " in norm or len(norm) < 3 or not norm.isalpha():
        return []
    found: list[str] = []
    if norm.endswith("ies") and len(norm) > 4:
        found.append(norm[:-3] + "y")
    elif norm.endswith(("ses", "xes", "ches", "shes", "zes")) and len(norm) > 4:
        found.append(norm[:-2])
    elif norm.endswith("s") and not norm.endswith("ss") and len(norm) > 3:
        found.append(norm[:-1])
    else:
        found.append(norm + "s")
        if norm.endswith("y") and len(norm) > 3 and norm[-2] not in "aeiou":
            found.append(norm[:-1] + "ies")
        if norm.endswith(("s", "x", "ch", "sh", "z")):
            found.append(norm + "es")
    return [v for v in found if v != norm]


def latin_only(text: str) -> bool:
    """True when every letter of ``text`` is Latin script (what an English-only embedder understands)."""
    for char in text:
        if char.isalpha() and not unicodedata.name(char, "").startswith("LATIN"):
            return False
    return True


def script_of(text: str) -> str:
    """latin | hangul | cjk | kana | other | none (the first non-Latin script wins)."""
    seen_latin = False
    for char in text:
        if not char.isalpha():
            continue
        name = unicodedata.name(char, "")
        if name.startswith("LATIN"):
            seen_latin = True
        elif name.startswith("HANGUL"):
            return "hangul"
        elif name.startswith("CJK"):
            return "cjk"
        elif name.startswith(("HIRAGANA", "KATAKANA")):
            return "kana"
        else:
            return "other"
    return "latin" if seen_latin else "none"


# -- thresholds ---------------------------------------------------------------------------------------
_MULTILINGUAL_HINTS = ("multilingual", "bge-m3", "bge_m3", "m3", "e5", "labse", "text-embedding-3", "jina", "qwen")


@dataclass(frozen=True)
class KeyThresholds:
    """Cosine gates for one embedding model (see docs/keys.md for the calibration)."""

    key_recall: float  # query <-> key surface: a key cluster is returned by recall
    key_merge: float  # new key <-> existing key: merged into the existing cluster as an alias
    near_key: float  # new key <-> existing key: reported in hints.near_keys
    multilingual: bool  # may non-Latin surfaces be compared by vector at all?
    profile: str

    def vector_usable(self, text: str) -> bool:
        """Whether this model's vector of ``text`` means anything (non-Latin text under an English model: no)."""
        return self.multilingual or latin_only(text)


def thresholds_for(fingerprint: EmbeddingFingerprint | None, env: Mapping[str, str] | None = None) -> KeyThresholds:
    """The calibrated profile of a model, with ``MEMMY_KEY_RECALL`` / ``_MERGE`` / ``_NEAR`` and
    ``MEMMY_KEYS_MULTILINGUAL`` overrides."""
    env = os.environ if env is None else env
    model = (fingerprint.model if fingerprint else "").lower()
    if fingerprint is None or (fingerprint.provider == "local" and "minilm" in model):
        # all-MiniLM-L6-v2 (English only): measured on 30 same-concept and 30 related-but-different pairs,
        # 0.85 merges half of the synonyms/variants with no false merge (worst negative: frontend/backend 0.815).
        base = KeyThresholds(0.60, 0.85, 0.75, False, "minilm")
    elif (query := similarity_scale(fingerprint.provider, fingerprint.model)).anchors is not None:
        # A local model with measured anchors (multilingual-e5-small): MiniLM's gates carried onto its scale,
        # query against a key surface through the query/passage anchors, key against key through the texts
        # anchors. Taken as they were (0.60 / 0.85 / 0.75), every e5 key scored above them: e5 puts
        # frontend/backend at 0.959 and strawberry/fruit at 0.921.
        texts = similarity_scale(fingerprint.provider, fingerprint.model, "texts")
        gates = (query.from_reference(0.60), texts.from_reference(0.85), texts.from_reference(0.75))
        recall, merge, near = (round(gate, 4) for gate in gates)
        base = KeyThresholds(recall, merge, near, True, fingerprint.model)
    else:
        multilingual = any(hint in model for hint in _MULTILINGUAL_HINTS)
        base = KeyThresholds(0.60, 0.85, 0.75, multilingual, "default")
    return KeyThresholds(
        key_recall=_env_float(env, "MEMMY_KEY_RECALL", base.key_recall),
        key_merge=_env_float(env, "MEMMY_KEY_MERGE", base.key_merge),
        near_key=_env_float(env, "MEMMY_KEY_NEAR", base.near_key),
        multilingual=_env_bool(env, "MEMMY_KEYS_MULTILINGUAL", base.multilingual),
        profile=base.profile,
    )


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if 0.0 <= value <= 1.0 else default


def _env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    return default


# -- argument validators ------------------------------------------------------------------------------
def req_text(body: Mapping[str, Any], name: str, where: str = "", max_len: int = MAX_CONTENT_CHARS) -> str:
    """A required non-empty string."""
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None else repr(value)[:60]
        raise InvalidArgument(f"{where}{name}: expected a non-empty string, got {got}")
    if len(value) > max_len:
        raise InvalidArgument(f"{where}{name}: longer than {max_len} characters")
    return value


def opt_text(body: Mapping[str, Any], name: str, where: str = "") -> str | None:
    """An optional string (None when absent or null); an empty string counts as absent."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}{name}: expected a string, got {type(value).__name__}")
    return value.strip() or None


def opt_number(body: Mapping[str, Any], name: str, default: int, lo: int, hi: int, where: str = "") -> int:
    """An optional integer in [lo, hi] (a JSON number: ``"8"`` is refused like any other string)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidArgument(f"{where}{name}: expected an integer between {lo} and {hi}, got {value!r}")
    return value


def opt_flag(body: Mapping[str, Any], name: str, where: str = "") -> bool:
    """An optional boolean."""
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidArgument(f"{where}{name}: expected true or false, got {value!r}")
    return value


def namespace_of(body: Mapping[str, Any], where: str = "") -> str | None:
    """An optional namespace (a short string)."""
    value = opt_text(body, "namespace", where)
    if value is not None and len(value) > 200:
        raise InvalidArgument(f"{where}namespace: longer than 200 characters")
    return value


def ttl_of(body: Mapping[str, Any], where: str = "") -> float | None:
    """``ttl_seconds``: a positive number of seconds, or None."""
    value = body.get("ttl_seconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL_SECONDS:
        raise InvalidArgument(f"{where}ttl_seconds: expected a number of seconds > 0, got {value!r}")
    return float(value)


def decay_profile_of(body: Mapping[str, Any], where: str = "") -> str | None:
    """``decay_profile``: transient | standard | stable | permanent, or None."""
    value = body.get("decay_profile")
    if value is None:
        return None
    if value not in DECAY_PROFILES:
        raise InvalidArgument(f"{where}decay_profile: expected one of {', '.join(DECAY_PROFILES)}, got {value!r}")
    return str(value)


def keys_of(body: Mapping[str, Any], where: str = "", required: bool = True) -> list[list[str]] | None:
    """``keys``: 1-32 strings; ``a|b`` declares ``b`` an alias of ``a``. Returns groups of surfaces."""
    value = body.get("keys")
    if value is None and not required:
        return None
    if not isinstance(value, list) or not value:
        raise InvalidArgument(f"{where}keys: expected a non-empty array of strings, got {value!r}"[:200])
    if len(value) > MAX_KEYS:
        raise InvalidArgument(f"{where}keys: at most {MAX_KEYS} keys, got {len(value)}")
    groups: list[list[str]] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidArgument(f"{where}keys[{i}]: expected a string, got {type(item).__name__}")
        surfaces = [" ".join(part.split()) for part in item.split(ALIAS_SEPARATOR)]
        surfaces = [s for s in surfaces if norm_key(s)]
        if not surfaces:
            raise InvalidArgument(f"{where}keys[{i}]: empty key")
        if any(len(s) > MAX_KEY_CHARS for s in surfaces):
            raise InvalidArgument(f"{where}keys[{i}]: longer than {MAX_KEY_CHARS} characters")
        groups.append(surfaces)
    return groups


def key_types_of(body: Mapping[str, Any], where: str = "") -> dict[str, str]:
    """``key_types``: {key: concept | name | proper_noun} (matched on the normalised key)."""
    value = body.get("key_types")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}key_types: expected an object mapping keys to a type")
    found: dict[str, str] = {}
    for key, kind in value.items():
        if kind not in KEY_TYPES:
            raise InvalidArgument(f"{where}key_types[{key!r}]: expected one of {', '.join(KEY_TYPES)}, got {kind!r}")
        found[norm_key(str(key))] = str(kind)
    return found


def related_of(body: Mapping[str, Any], where: str = "") -> list[str]:
    """``related_to``: memory ids."""
    value = body.get("related_to")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidArgument(f"{where}related_to: expected an array of memory ids")
    return list(dict.fromkeys(v.strip() for v in value))


def source_of(body: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``source``: an optional provenance object."""
    value = body.get("source")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where}source: expected an object")
    return dict(value)


# -- typed arguments of each key-graph tool -------------------------------------------------------------
_TEXT_SCHEMA: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK}
_NS_SCHEMA: dict[str, Any] = {"type": "string", "description": "keymem namespace (default 'default')"}
_KEY_CHAR = "[0-9A-Za-z\\u00c0-\\u024f\\u0400-\\u04ff\\u3040-\\u30ff\\u4e00-\\u9fff\\uac00-\\ud7af]"
_KEYS_SCHEMA: dict[str, Any] = {
    "type": "array",
    # a key needs one character besides blanks, edge punctuation and the alias bar
    "items": {"type": "string", "maxLength": MAX_KEY_CHARS, "pattern": _KEY_CHAR},
    "minItems": 1,
    "maxItems": MAX_KEYS,
    "description": "atomic concept keys; 'apple|사과' declares 사과 an alias of apple",
}
_KEY_TYPES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"enum": list(KEY_TYPES)},
}
_TTL_SCHEMA: dict[str, Any] = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL_SECONDS}
_DECAY_SCHEMA: dict[str, Any] = {"enum": list(DECAY_PROFILES), "default": "standard"}
_IDS_SCHEMA: dict[str, Any] = {"type": "array", "items": {**_TEXT_SCHEMA, "description": "a memory id"}}


def _id_reader(what: str) -> Callable[[dict[str, Any], str], str]:
    """A required id: a non-blank string (400 ``<name>: expected a <what> id`` otherwise)."""

    def read(body: dict[str, Any], key: str) -> str:
        value = body.get(key)
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgument(f"{key}: expected a {what} id")
        return value.strip()

    return read


def _opt_id_reader(what: str) -> Callable[[dict[str, Any], str], str | None]:
    required = _id_reader(what)
    return lambda body, key: None if body.get(key) is None else required(body, key)


def _text(max_len: int) -> Callable[[dict[str, Any], str], str]:
    return lambda body, key: req_text(body, key, max_len=max_len)


def _number(default: int, lo: int, hi: int) -> Callable[[dict[str, Any], str], int]:
    return lambda body, key: opt_number(body, key, default, lo, hi)


def _int_schema(default: int, lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi, "default": default}


_MEMORY_ID: dict[str, Any] = dict(
    key="memory_id", read=_id_reader("memory"), schema={**_TEXT_SCHEMA, "description": "a memory id"}
)
_KEY_ID: dict[str, Any] = dict(
    key="key_id", read=_id_reader("key"), schema={**_TEXT_SCHEMA, "description": "a key id (key_...)"}
)
_NAMESPACE: dict[str, Any] = dict(default=None, read=lambda b, _k: namespace_of(b), schema=_NS_SCHEMA)
_KEY_TYPES: dict[str, Any] = dict(
    default=None, key="key_types", read=lambda b, _k: key_types_of(b), schema=_KEY_TYPES_SCHEMA
)
_TTL: dict[str, Any] = dict(default=None, key="ttl_seconds", read=lambda b, _k: ttl_of(b), schema=_TTL_SCHEMA)
_DECAY: dict[str, Any] = dict(
    default=None, key="decay_profile", read=lambda b, _k: decay_profile_of(b), schema=_DECAY_SCHEMA
)
_RELATED: dict[str, Any] = dict(
    default=(), key="related_to", read=lambda b, _k: tuple(related_of(b)), schema=_IDS_SCHEMA
)
_SOURCE: dict[str, Any] = dict(default=None, read=lambda b, _k: source_of(b), schema={"type": "object"}, redact=False)
_CONTENT: dict[str, Any] = dict(
    read=lambda b, k: req_text(b, k), schema={**_TEXT_SCHEMA, "maxLength": MAX_CONTENT_CHARS}
)
_OFFSET: dict[str, Any] = dict(default=0, read=_number(0, 0, 1_000_000), schema=_int_schema(0, 0, 1_000_000))


@dataclass(frozen=True)
class KeyArgs(Command):
    """The arguments of one key-graph tool (keymem's snake_case names); ``op`` names the tool."""

    op: ClassVar[str] = ""

    @classmethod
    def key(cls) -> str:
        """The tool name (the last part of ``POST /api/v1/keys/<op>``)."""
        return cls.op

    @property
    def memory_target(self) -> str:
        """The memory the call is about (audit rows name it), or ``""``."""
        return str(getattr(self, "memory_id", "") or "")


@dataclass(frozen=True)
class RecallArgs(KeyArgs):
    """``recall``: ranked key clusters plus one passive Top-1 memory."""

    op: ClassVar[str] = "recall"
    summary: ClassVar[str] = "Ranked key clusters plus one passive Top-1 memory (or no_match with nearest_keys)"
    query: str = param(read=lambda b, k: req_text(b, k, max_len=2000).strip(), schema=_TEXT_SCHEMA)
    top_k: int = param(8, key="top_k", read=_number(8, 1, 50), schema=_int_schema(8, 1, 50))
    namespace: str | None = param(**_NAMESPACE)
    context: str | None = param(None, read=lambda b, k: opt_text(b, k))
    explain: bool = param(False, read=lambda b, k: opt_flag(b, k))
    max_chars: int = param(
        2000, key="max_chars", read=_number(2000, 50, 200_000), schema=_int_schema(2000, 50, 200_000)
    )


@dataclass(frozen=True)
class BrowseKeysArgs(KeyArgs):
    """``browse_keys``: a namespace's key vocabulary."""

    op: ClassVar[str] = "browse_keys"
    summary: ClassVar[str] = "A namespace's key vocabulary, hubs first"
    namespace: str | None = param(**_NAMESPACE)
    hubs_only: bool = param(False, key="hubs_only", read=lambda b, k: opt_flag(b, k))
    limit: int = param(20, read=_number(20, 1, 500), schema=_int_schema(20, 1, 500))
    offset: int = param(**_OFFSET)


@dataclass(frozen=True)
class ReadKeyArgs(KeyArgs):
    """``read_key``: ranked memory handles under one key."""

    op: ClassVar[str] = "read_key"
    summary: ClassVar[str] = "Ranked memory handles under one key (no content)"
    key_id: str = param(**_KEY_ID)
    query: str | None = param(None, read=lambda b, k: opt_text(b, k), schema=_TEXT_SCHEMA)
    namespace: str | None = param(**_NAMESPACE)
    limit: int = param(10, read=_number(10, 1, 200), schema=_int_schema(10, 1, 200))
    offset: int = param(**_OFFSET)


@dataclass(frozen=True)
class ReadMemoryArgs(KeyArgs):
    """``read_memory``: full content, connected keys and validity."""

    op: ClassVar[str] = "read_memory"
    summary: ClassVar[str] = "Full content, connected keys and validity; reinforces only the via_key_id edge"
    memory_id: str = param(**_MEMORY_ID)
    via_key_id: str | None = param(
        None, key="via_key_id", read=_opt_id_reader("key"), schema={**_TEXT_SCHEMA, "description": "a key id"}
    )
    namespace: str | None = param(**_NAMESPACE)


def _groups(where: str = "", required: bool = True) -> Callable[[dict[str, Any], str], Any]:
    def read(body: dict[str, Any], _key: str) -> tuple[tuple[str, ...], ...] | None:
        groups = keys_of(body, where, required)
        return None if groups is None else tuple(tuple(g) for g in groups)

    return read


@dataclass(frozen=True)
class RememberArgs(KeyArgs):
    """``remember``: save a memory under atomic keys (one item of ``remember_batch``)."""

    op: ClassVar[str] = "remember"
    summary: ClassVar[str] = "Save a memory under atomic keys (dedupes; refuses tombstoned content)"
    content: str = param(read=lambda b, k: req_text(b, k), schema={**_TEXT_SCHEMA, "maxLength": MAX_CONTENT_CHARS})
    groups: tuple[tuple[str, ...], ...] = param(key="keys", read=_groups(), schema=_KEYS_SCHEMA)
    key_types: dict[str, str] = param(
        None, key="key_types", read=lambda b, _k: key_types_of(b), schema=_KEY_TYPES_SCHEMA
    )
    namespace: str | None = param(**_NAMESPACE)
    ttl_seconds: float | None = param(**_TTL)
    decay_profile: str | None = param(**_DECAY)
    related_to: tuple[str, ...] = param(
        (), key="related_to", read=lambda b, _k: tuple(related_of(b)), schema=_IDS_SCHEMA
    )
    source: dict[str, Any] = param(**_SOURCE)

    @classmethod
    def item(cls, raw: object, where: str) -> RememberArgs:
        """One item of a batch: every message names it (``items[3].keys: ...``)."""
        if not isinstance(raw, dict):
            raise InvalidArgument(f"{where}arguments must be a JSON object, got {type(raw).__name__}")
        return cls(
            content=req_text(raw, "content", where),
            groups=_groups(where)(raw, "keys"),
            key_types=key_types_of(raw, where),
            namespace=namespace_of(raw, where),
            ttl_seconds=ttl_of(raw, where),
            decay_profile=decay_profile_of(raw, where),
            related_to=tuple(related_of(raw, where)),
            source=source_of(raw, where),
        )


def _items(body: dict[str, Any], key: str) -> tuple[RememberArgs, ...]:
    raw = body.get(key)
    if not isinstance(raw, list) or not raw:
        raise InvalidArgument(f"{key}: expected a non-empty array of {{content, keys, ...}} objects")
    if len(raw) > 500:
        raise InvalidArgument(f"{key}: at most 500 items per batch")
    return tuple(RememberArgs.item(item, f"{key}[{i}].") for i, item in enumerate(raw))


@dataclass(frozen=True)
class RememberBatchArgs(KeyArgs):
    """``remember_batch``: several memories, all validated before anything is written."""

    op: ClassVar[str] = "remember_batch"
    summary: ClassVar[str] = "Save several memories (all validated before anything is written)"
    items: tuple[RememberArgs, ...] = param(read=_items, schema={"type": "array", "minItems": 1, "maxItems": 500})


@dataclass(frozen=True)
class CorrectArgs(KeyArgs):
    """``correct``: a new version of a memory; the old one's validity ends."""

    op: ClassVar[str] = "correct"
    summary: ClassVar[str] = "New version of a memory; the old one's validity ends and the chain is kept"
    memory_id: str = param(**_MEMORY_ID)
    content: str = param(read=lambda b, k: req_text(b, k), schema={**_TEXT_SCHEMA, "maxLength": MAX_CONTENT_CHARS})
    groups: tuple[tuple[str, ...], ...] | None = param(
        None, key="keys", read=_groups(required=False), schema=_KEYS_SCHEMA
    )
    key_types: dict[str, str] = param(
        None, key="key_types", read=lambda b, _k: key_types_of(b), schema=_KEY_TYPES_SCHEMA
    )
    ttl_seconds: float | None = param(**_TTL)
    decay_profile: str | None = param(**_DECAY)
    related_to: tuple[str, ...] = param(
        (), key="related_to", read=lambda b, _k: tuple(related_of(b)), schema=_IDS_SCHEMA
    )
    source: dict[str, Any] = param(**_SOURCE)


@dataclass(frozen=True)
class ConfirmArgs(KeyArgs):
    """``confirm_memory``: evidence-backed confirmation."""

    op: ClassVar[str] = "confirm_memory"
    summary: ClassVar[str] = "Evidence-backed confirmation: refreshes freshness, depth +0.05"
    memory_id: str = param(**_MEMORY_ID)
    evidence: str = param(read=lambda b, k: req_text(b, k, max_len=2000).strip(), schema=_TEXT_SCHEMA)
    namespace: str | None = param(**_NAMESPACE)
    source: dict[str, Any] = param(**_SOURCE)


@dataclass(frozen=True)
class DismissArgs(KeyArgs):
    """``dismiss``: weaken one key->memory edge."""

    op: ClassVar[str] = "dismiss"
    summary: ClassVar[str] = "Weaken one key->memory edge (floored, never severed)"
    memory_id: str = param(**_MEMORY_ID)
    key_id: str = param(**_KEY_ID)
    namespace: str | None = param(**_NAMESPACE)


@dataclass(frozen=True)
class RelatedArgs(KeyArgs):
    """``related``: memories sharing keys or explicitly related."""

    op: ClassVar[str] = "related"
    summary: ClassVar[str] = "Memories sharing keys or explicitly related"
    memory_id: str = param(**_MEMORY_ID)
    limit: int = param(20, read=_number(20, 1, 200), schema=_int_schema(20, 1, 200))


@dataclass(frozen=True)
class ForgetArgs(KeyArgs):
    """``forget``: delete a memory and tombstone its value."""

    op: ClassVar[str] = "forget"
    summary: ClassVar[str] = "Delete a memory and tombstone its value"
    memory_id: str = param(**_MEMORY_ID)
    reason: str | None = param(None, read=lambda b, k: opt_text(b, k))


@dataclass(frozen=True)
class ListMemoriesArgs(KeyArgs):
    """``list_memories``: active key-graph memories."""

    op: ClassVar[str] = "list_memories"
    summary: ClassVar[str] = "Active key-graph memories"
    namespace: str | None = param(**_NAMESPACE)
    limit: int = param(1000, read=_number(1000, 1, 10_000), schema=_int_schema(1000, 1, 10_000))
    offset: int = param(**_OFFSET)


@dataclass(frozen=True)
class CleanupExpiredArgs(KeyArgs):
    """``cleanup_expired``: delete memories past their TTL."""

    op: ClassVar[str] = "cleanup_expired"
    summary: ClassVar[str] = "Delete memories past their TTL"


@dataclass(frozen=True)
class MemoryStatsArgs(KeyArgs):
    """``memory_stats``: counts of keys, memories and links."""

    op: ClassVar[str] = "memory_stats"
    summary: ClassVar[str] = "Counts of keys, memories and links"


#: Every key-graph tool by name, in the order the tools are listed.
KEY_ARGS: dict[str, type[KeyArgs]] = {
    cls.op: cls
    for cls in (
        RecallArgs,
        BrowseKeysArgs,
        ReadKeyArgs,
        ReadMemoryArgs,
        RememberArgs,
        RememberBatchArgs,
        CorrectArgs,
        ConfirmArgs,
        DismissArgs,
        RelatedArgs,
        ForgetArgs,
        ListMemoriesArgs,
        CleanupExpiredArgs,
        MemoryStatsArgs,
    )
}


def key_args(op: str, body: object) -> KeyArgs:
    """The typed arguments of tool ``op`` (404 for an unknown tool, 400 for bad arguments)."""
    cls = KEY_ARGS.get(op)
    if cls is None:
        raise NotFound(f"unknown key-graph operation {op!r}: expected one of {', '.join(KEY_ARGS)}")
    if body is not None and not isinstance(body, dict):
        raise InvalidArgument(f"arguments must be a JSON object, got {type(body).__name__}")
    return cls.from_json(body)
