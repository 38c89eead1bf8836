"""Load, validate and write ``~/.memmy/config.yaml``.

Resolution: ``--config`` > ``$MEMMY_CONFIG`` > ``$MEMMY_HOME/config.yaml`` > ``~/.memmy/config.yaml``.
The file's ``memmyMemory`` tree is deep-merged over :func:`memmy.config_defaults.default_tree`, the active
profile is merged over that, ``${ENV}`` references are expanded, and the environment overrides of the
reference (``MEMMY_MEMORY_*``, ``MEMMY_SUMMARY_*``, ``MEMMY_EMBEDDING_*`` ...) are applied last. Every key is
checked against the type of its default, so a bad file fails with the file, the key and what was expected.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from memmy.config_defaults import ENUMS, FREE_FORM, default_tree
from memmy.errors import ConfigError

ROOT_KEY = "memmyMemory"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_LLM_ENV_FIELDS = {
    "PROVIDER": "provider",
    "VENDOR": "vendor",
    "ENDPOINT": "endpoint",
    "MODEL": "model",
    "API_KEY": "apiKey",
    "TEMPERATURE": "temperature",
    "MAX_TOKENS": "maxTokens",
    "TIMEOUT_MS": "timeoutMs",
    "MAX_RETRIES": "maxRetries",
}
_EMBED_ENV_FIELDS = {
    "PROVIDER": "provider",
    "ENDPOINT": "endpoint",
    "MODEL": "model",
    "API_KEY": "apiKey",
    "BATCH_SIZE": "batchSize",
    "TIMEOUT_MS": "timeoutMs",
    "MAX_RETRIES": "maxRetries",
}


def _env_override_table() -> dict[str, tuple[str, ...]]:
    table: dict[str, tuple[str, ...]] = {
        "MEMMY_MEMORY_DOMAIN": ("domain",),
        "MEMMY_MEMORY_USER_ID": ("userId",),
        "MEMMY_MEMORY_MODE": ("storage", "mode"),
        "MEMMY_MEMORY_BACKEND": ("storage", "backend"),
        "MEMMY_MEMORY_DB": ("storage", "sqlitePath"),
        "MEMMY_MEMORY_URL": ("storage", "endpoint"),
        "MEMORY_SERVICE_TOKEN": ("storage", "token"),
        "MEMMY_MEMORY_TOKEN": ("storage", "token"),
        "MEMMY_MEMORY_AUTH": ("server", "auth"),
        "MEMMY_EVOLUTION_ENABLE_THINKING": ("evolution", "enableThinking"),
        "MEMMY_ENABLE_MEMORY_ADD": ("algorithm", "enableMemoryAdd"),
        "MEMMY_ENABLE_MEMORY_SEARCH": ("algorithm", "enableMemorySearch"),
        "MEMMY_ENABLE_QUERY_REWRITE": ("algorithm", "enableQueryRewrite"),
        "MEMMY_RETRIEVAL_INJECTION_PROFILE": ("algorithm", "retrieval", "readOnlyInjectionProfile"),
        "MEMMY_LLM_DAILY_CALLS": ("llmBudget", "dailyCalls"),
        "MEMMY_LLM_DAILY_TOKENS": ("llmBudget", "dailyTokens"),
    }
    for role in ("SUMMARY", "EVOLUTION"):
        for suffix, key in _LLM_ENV_FIELDS.items():
            table[f"MEMMY_{role}_{suffix}"] = (role.lower(), key)
    for suffix, key in _EMBED_ENV_FIELDS.items():
        table[f"MEMMY_EMBEDDING_{suffix}"] = ("embedding", key)
    return table


#: Environment variable -> config path. Later entries win (MEMMY_MEMORY_TOKEN beats MEMORY_SERVICE_TOKEN).
ENV_OVERRIDES: dict[str, tuple[str, ...]] = _env_override_table()


@dataclass(frozen=True)
class LLMSettings:
    """One OpenAI-compatible model endpoint (summary or evolution)."""

    provider: str
    vendor: str
    endpoint: str
    model: str
    api_key: str
    temperature: float
    max_tokens: int
    timeout_ms: int
    max_retries: int
    enable_thinking: bool

    @property
    def configured(self) -> bool:
        """True when this model can actually be called."""
        if self.provider in ("", "local_only"):
            return False
        if self.provider == "host":
            return bool(self.endpoint)
        return bool(self.model) and bool(self.api_key or self.endpoint)


@dataclass(frozen=True)
class LLMBudgetSettings:
    """The daily cap on LLM calls and tokens shared by both model slots (0 = unlimited)."""

    daily_calls: int
    daily_tokens: int


@dataclass(frozen=True)
class EmbeddingSettings:
    """Which embedding backend to use and how to reach it."""

    provider: str
    model: str
    endpoint: str
    api_key: str
    batch_size: int
    timeout_ms: int
    max_retries: int


@dataclass(frozen=True)
class StorageSettings:
    """Where the store lives and how the daemon is reached."""

    mode: str
    backend: str
    sqlite_path: Path
    endpoint: str
    token: str


@dataclass(frozen=True)
class ServerSettings:
    """Bind address and request limits of the daemon."""

    host: str
    port: int
    max_body_bytes: int
    auth: str = "token"
    allowed_origins: tuple[str, ...] = ()

    @property
    def auth_disabled(self) -> bool:
        """True when the config says ``server.auth: none`` (no token check at all)."""
        return self.auth == "none"


@dataclass(frozen=True)
class MemmyConfig:
    """The effective configuration: typed views plus the merged tree for algorithm settings."""

    path: Path
    home: Path
    exists: bool
    tree: dict[str, Any]
    storage: StorageSettings
    server: ServerSettings
    summary: LLMSettings
    evolution: LLMSettings
    embedding: EmbeddingSettings
    warnings: tuple[str, ...] = field(default=())
    db_override: Path | None = None

    @property
    def user_id(self) -> str:
        """Default user namespace for writes."""
        return str(self.tree["userId"])

    @property
    def domain(self) -> str:
        """Either "" or "research"."""
        return str(self.tree["domain"])

    @property
    def algorithm(self) -> dict[str, Any]:
        """The merged ``algorithm`` tree (capture, reward, retrieval ...)."""
        value: dict[str, Any] = self.tree["algorithm"]
        return value

    def algo(self, section: str, key: str) -> Any:
        """One algorithm setting, e.g. ``algo("retrieval", "tier1TopK")``."""
        return self.tree["algorithm"][section][key]

    @property
    def llm_budget(self) -> LLMBudgetSettings:
        """The ``llmBudget`` section (read from the tree, so a config reload applies it)."""
        budget = self.tree.get("llmBudget") or {}
        return LLMBudgetSettings(int(budget.get("dailyCalls", 0)), int(budget.get("dailyTokens", 0)))


def memmy_home(env: Mapping[str, str] | None = None) -> Path:
    """Return ``$MEMMY_HOME`` or ``~/.memmy``."""
    env = os.environ if env is None else env
    home = env.get("MEMMY_HOME")
    if home:
        return Path(home).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".memmy"


def config_path(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Resolve which config file to read: explicit > $MEMMY_CONFIG > $MEMMY_HOME/config.yaml."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit).expanduser()
    if env.get("MEMMY_CONFIG"):
        return Path(env["MEMMY_CONFIG"]).expanduser()
    return memmy_home(env) / "config.yaml"


def default_sqlite_path(env: Mapping[str, str] | None = None) -> Path:
    """The database path when nothing configures one."""
    env = os.environ if env is None else env
    service_home = env.get("MEMMY_MEMORY_HOME") or env.get("MEMORY_SERVICE_HOME")
    base = Path(service_home).expanduser() if service_home else memmy_home(env) / "memory-service"
    return base / "memory.sqlite"


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML (or ``.json``) config file into its top-level mapping; {} when absent."""
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _expand_env(value: Any, env: Mapping[str, str], where: str, warnings: list[str]) -> Any:
    if isinstance(value, str):

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                warnings.append(f"{where} references ${{{name}}}, which is not set; using an empty value")
                return ""
            return env[name]

        return _ENV_REF.sub(repl, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, env, f"{where}.{k}", warnings) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, env, f"{where}[{i}]", warnings) for i, v in enumerate(value)]
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean (true/false)"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _coerce(default: Any, value: Any) -> tuple[bool, Any]:
    """Check ``value`` against the type of ``default``; return (ok, normalised value)."""
    if isinstance(default, bool):
        return isinstance(value, bool), value
    if isinstance(default, int):
        return (isinstance(value, int) and not isinstance(value, bool)), value
    if isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if isinstance(default, str):
        if value is None:
            return True, ""
        return isinstance(value, str), value
    if isinstance(default, dict):
        return isinstance(value, dict), value
    return True, value


def _validate(
    tree: dict[str, Any],
    defaults: dict[str, Any],
    path: Path,
    prefix: str = "",
    label: str = ROOT_KEY,
    unknown: list[str] | None = None,
) -> None:
    """Check every key against its default's type and enum; collect unknown keys (typos) in ``unknown``."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if dotted in FREE_FORM:
            continue
        if key not in defaults:
            if unknown is not None:
                unknown.append(f"{path}: {label}.{dotted} is not a known setting and is ignored")
            continue
        ok, normalised = _coerce(defaults[key], value)
        if not ok:
            raise ConfigError(f"{path}: {label}.{dotted}: expected {_type_name(defaults[key])}, got {value!r}")
        tree[key] = normalised
        if isinstance(defaults[key], dict):
            _validate(value, defaults[key], path, f"{dotted}.", label, unknown)
        elif dotted in ENUMS and normalised not in ENUMS[dotted]:
            choices = ", ".join(repr(c) for c in ENUMS[dotted])
            raise ConfigError(f"{path}: {label}.{dotted}: expected one of {choices}, got {value!r}")
        elif isinstance(normalised, int | float) and not isinstance(normalised, bool) and normalised < 0:
            if not dotted.endswith(("archiveGain", "FailureThreshold")):
                raise ConfigError(f"{path}: {label}.{dotted}: expected a value >= 0, got {value!r}")


def _parse_env_value(name: str, raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"environment variable {name}: expected true/false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"environment variable {name}: expected an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"environment variable {name}: expected a number, got {raw!r}") from None
    return raw


def _apply_env(tree: dict[str, Any], defaults: dict[str, Any], env: Mapping[str, str]) -> None:
    for name, keys in ENV_OVERRIDES.items():
        if name not in env or env[name] == "":
            continue
        node, default_node = tree, defaults
        for key in keys[:-1]:
            node, default_node = node[key], default_node[key]
        node[keys[-1]] = _parse_env_value(name, env[name], default_node[keys[-1]])


def _llm(tree: Mapping[str, Any]) -> LLMSettings:
    return LLMSettings(
        provider=tree["provider"],
        vendor=tree["vendor"],
        endpoint=tree["endpoint"],
        model=tree["model"],
        api_key=tree["apiKey"],
        temperature=float(tree["temperature"]),
        max_tokens=int(tree["maxTokens"]),
        timeout_ms=int(tree["timeoutMs"]),
        max_retries=int(tree["maxRetries"]),
        enable_thinking=bool(tree["enableThinking"]),
    )


_SLOT_IDENTITY = ("provider", "model", "endpoint", "apiKey")
_SLOT_INHERITED = ("provider", "vendor", "endpoint", "model", "apiKey")


def _inherit_model_slots(summary: dict[str, Any], evolution: dict[str, Any]) -> None:
    """An unset slot (no provider, model, endpoint or key) borrows the other slot's model; limits stay its own."""
    summary_unset = not any(summary[k] for k in _SLOT_IDENTITY)
    evolution_unset = not any(evolution[k] for k in _SLOT_IDENTITY)
    if evolution_unset and not summary_unset:
        for key in _SLOT_INHERITED:
            evolution[key] = summary[key]
    elif summary_unset and not evolution_unset:
        for key in _SLOT_INHERITED:
            summary[key] = evolution[key]


def load_config(
    explicit_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    db_override: str | os.PathLike[str] | None = None,
) -> MemmyConfig:
    """Load the effective configuration; raise :class:`ConfigError` naming file, key and expectation."""
    env = dict(os.environ if env is None else env)
    path = config_path(explicit_path, env)
    raw = read_config_file(path)
    section = raw.get(ROOT_KEY, {}) if raw else {}
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: {ROOT_KEY}: expected a mapping, got {section!r}")
    warnings: list[str] = []
    section = _expand_env(section, env, ROOT_KEY, warnings)
    defaults = default_tree()
    user_tree = copy.deepcopy(section)
    profiles = user_tree.pop("profiles", None)
    _validate(user_tree, defaults, path, unknown=warnings)
    tree = _deep_merge(default_tree(), user_tree)
    if profiles is not None:
        if not isinstance(profiles, dict):
            raise ConfigError(f"{path}: {ROOT_KEY}.profiles: expected a mapping, got {profiles!r}")
        active = tree["activeProfile"]
        profile = profiles.get(active) or {}
        if not isinstance(profile, dict):
            raise ConfigError(f"{path}: {ROOT_KEY}.profiles.{active}: expected a mapping, got {profile!r}")
        _validate(profile, defaults, path, "", f"{ROOT_KEY}.profiles.{active}", warnings)
        _deep_merge(tree, profile)
        tree["profiles"] = profiles
    _apply_env(tree, defaults, env)
    _validate(tree, defaults, Path(f"{path} (after environment overrides)"))
    evolution = tree["evolution"]
    _inherit_model_slots(tree["summary"], evolution)
    storage = tree["storage"]
    if db_override:
        sqlite_path = Path(db_override).expanduser()
    elif storage["sqlitePath"]:
        sqlite_path = Path(storage["sqlitePath"]).expanduser()
    else:
        sqlite_path = default_sqlite_path(env)
    storage["sqlitePath"] = str(sqlite_path)
    server = tree["server"]
    if not 0 < server["port"] < 65536:
        raise ConfigError(f"{path}: {ROOT_KEY}.server.port: expected 1-65535, got {server['port']!r}")
    origins = server["allowedOrigins"]
    if not isinstance(origins, list) or not all(isinstance(o, str) and o for o in origins):
        raise ConfigError(f"{path}: {ROOT_KEY}.server.allowedOrigins: expected a list of origins, got {origins!r}")
    embedding = tree["embedding"]
    return MemmyConfig(
        path=path,
        home=memmy_home(env),
        exists=path.exists(),
        tree=tree,
        storage=StorageSettings(
            mode=storage["mode"],
            backend=storage["backend"],
            sqlite_path=sqlite_path,
            endpoint=storage["endpoint"],
            token=storage["token"] or "",
        ),
        server=ServerSettings(
            host=server["host"],
            port=int(server["port"]),
            max_body_bytes=server["maxBodyBytes"],
            auth=server["auth"],
            allowed_origins=tuple(o.rstrip("/") for o in origins),
        ),
        summary=_llm(tree["summary"]),
        evolution=_llm(evolution),
        embedding=EmbeddingSettings(
            provider=embedding["provider"],
            model=embedding["model"],
            endpoint=embedding["endpoint"],
            api_key=embedding["apiKey"],
            batch_size=int(embedding["batchSize"]),
            timeout_ms=int(embedding["timeoutMs"]),
            max_retries=int(embedding["maxRetries"]),
        ),
        warnings=tuple(warnings),
        db_override=Path(db_override).expanduser() if db_override else None,
    )


def update_config_file(path: Path, updates: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``updates`` into the ``memmyMemory`` section of ``path``, keeping unrelated keys.

    The write is atomic (temp file + rename) and the file is created with mode 0600 since it may hold
    a token. Returns the new top-level mapping.
    """
    raw = read_config_file(path)
    section = raw.get(ROOT_KEY)
    if not isinstance(section, dict):
        section = {}
    _deep_merge(section, updates)
    raw[ROOT_KEY] = section
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if path.suffix == ".json":
                json.dump(raw, handle, indent=2, ensure_ascii=False)
            else:
                yaml.safe_dump(raw, handle, sort_keys=False, allow_unicode=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return raw


def store_id(sqlite_path: str | os.PathLike[str]) -> str:
    """A short, stable id of a store (hash of its resolved path): ``init`` compares it with a daemon's health."""
    path = Path(sqlite_path).expanduser()
    try:
        path = path.resolve()
    except OSError:
        pass
    return hashlib.sha256(str(path).encode("utf-8", "replace")).hexdigest()[:16]


def new_token() -> str:
    """A fresh random service token (32 random bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def ensure_token(config: MemmyConfig) -> str | None:
    """Create and save a token when auth is on and none is configured; return the new token, else None.

    The token is written to ``storage.token`` of the config file (mode 0600). Nothing happens with
    ``server.auth: none`` or when a token already comes from the file or the environment.
    """
    if config.server.auth_disabled or config.storage.token:
        return None
    token = new_token()
    update_config_file(config.path, {"storage": {"token": token}})
    return token


def reload_requires_restart(old: MemmyConfig, new: MemmyConfig) -> bool:
    """True when the change touches settings only a restart can apply (storage or bind address)."""
    return bool(old.tree["storage"] != new.tree["storage"] or old.tree["server"] != new.tree["server"])
