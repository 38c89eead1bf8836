"""Key-graph arguments (keymem's names), key surface normalisation, scripts and calibrated thresholds.

Every validator raises :class:`InvalidArgument` naming the argument, before anything is written.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memmy.embed import EmbeddingFingerprint
from memmy.errors import InvalidArgument
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
def body_of(body: Any) -> dict[str, Any]:
    """The arguments must be a JSON object."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidArgument(f"arguments must be a JSON object, got {type(body).__name__}")
    return body


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
    """An optional integer in [lo, hi] (numeric strings accepted)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
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
