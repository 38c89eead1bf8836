"""Load, validate and write ``~/.memmy/config.yaml``.

Resolution: ``--config`` > ``$MEMMY_CONFIG`` > ``$MEMMY_HOME/config.yaml`` > ``~/.memmy/config.yaml``.
The file's ``memmyMemory`` tree is deep-merged over :func:`memmy.config_defaults.default_tree`, the active
profile is merged over that, ``${ENV}`` references are expanded, and the environment overrides of the
reference (``MEMMY_MEMORY_*``, ``MEMMY_SUMMARY_*``, ``MEMMY_EMBEDDING_*`` ...) are applied last. Every key is
checked against the type of its default, so a bad file fails with the file, the key and what was expected.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

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
        "MEMMY_POSTGRES_DSN": ("storage", "postgresDsn"),
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
    review: str = "off"
    json_mode: bool = True
    repeat_penalty: float = 0.0

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
    #: ``backend: postgres``: the database (``postgresql://…``); empty for SQLite.
    postgres_dsn: str = ""

    @property
    def location(self) -> str:
        """What the store is, for messages: the SQLite path, or the DSN without its password."""
        if self.backend == "postgres":
            return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", self.postgres_dsn)
        return str(self.sqlite_path)


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
class AlgorithmFlags:
    """The three switches at the top of ``algorithm``."""

    enable_memory_add: bool
    enable_memory_search: bool
    enable_query_rewrite: bool


@dataclass(frozen=True)
class CaptureSettings:
    """``algorithm.capture``: trace limits and the reflection batching."""

    max_text_chars: int
    max_tool_output_chars: int
    synth_reflection: bool
    embed_after_capture: bool
    alpha_scoring: bool
    batch_threshold: int
    reflection_context_mode: str
    long_episode_reflect_mode: str
    downstream_step_count: int
    task_context_max_chars: int
    reflection_batch_window_size: int
    reflection_batch_window_overlap: int
    degraded_batch_window_size: int
    degraded_batch_window_overlap: int
    primary_max_retries: int
    degraded_max_retries: int
    state_max_chars: int
    thinking_max_chars: int
    action_max_chars: int
    tool_input_max_chars: int
    tool_output_max_chars: int
    tool_error_max_chars: int
    outcome_max_chars: int
    reflection_max_chars: int


@dataclass(frozen=True)
class RewardSettings:
    """``algorithm.reward``: task scoring and back-propagation."""

    llm_scoring: bool
    gamma: float
    lambda_: float
    delta: float
    tau_softmax: float
    decay_half_life_days: float
    implicit_threshold: float
    feedback_window_sec: float
    summary_max_chars: int
    min_exchanges_for_completion: int
    min_content_chars_for_completion: int
    tool_heavy_ratio: float
    min_assistant_chars_for_tool_heavy: int


@dataclass(frozen=True)
class FeedbackSettings:
    """``algorithm.feedback``: failure bursts and decision repair."""

    failure_threshold: int
    failure_window: int
    value_delta: float
    min_low_value_threshold: float
    use_llm: bool
    attach_to_policy: bool
    cooldown_ms: float
    trace_char_cap: int
    evidence_limit: int


@dataclass(frozen=True)
class L2InductionSettings:
    """``algorithm.l2Induction``: association and induction of L2 policies."""

    use_llm: bool
    min_episodes_for_induction: int
    min_similarity: float
    candidate_ttl_days: float
    min_trace_value: float
    min_gain: float
    archive_gain: float
    trace_char_cap: int
    tau_softmax: float
    gain_ema_alpha: float


@dataclass(frozen=True)
class L3AbstractionSettings:
    """``algorithm.l3Abstraction``: world models from policies."""

    use_llm: bool
    min_policies: int
    min_policy_gain: float
    min_policy_support: int
    cluster_min_similarity: float
    policy_char_cap: int
    trace_char_cap: int
    cooldown_days: int
    confidence_delta: float
    min_confidence_for_retrieval: float


@dataclass(frozen=True)
class SkillSettings:
    """``algorithm.skill``: skill crystallisation and its lifecycle."""

    use_llm: bool
    min_eta_for_retrieval: float
    min_support: int
    min_gain: float
    candidate_trials: int
    cooldown_ms: int
    trace_char_cap: int
    evidence_limit: int
    eta_delta: float
    archive_eta: float
    repair_candidate_min_eta: float
    output_language_mode: str
    outcome_r_task_success_threshold: float
    outcome_r_task_failure_threshold: float
    failure_episode_max_ratio: float


@dataclass(frozen=True)
class SessionSettings:
    """``algorithm.session``: how follow-up turns join an episode."""

    follow_up_mode: str
    merge_max_gap_ms: int


@dataclass(frozen=True)
class RetrievalSettings:
    """``algorithm.retrieval``: recall tiers, fusion, filters and injection."""

    tier1_top_k: int
    tier2_top_k: int
    tier3_top_k: int
    candidate_pool_factor: int
    weight_cosine: float
    weight_priority: float
    mmr_lambda: float
    context_window: int
    context_window_tokens: int
    context_window_results: int
    rrf_constant: int
    relative_threshold_floor: float
    min_skill_eta: float
    min_trace_sim: float
    episode_goal_min_sim: float
    tag_filter: str
    keyword_top_k: int
    skill_eta_blend: float
    smart_seed: bool
    smart_seed_ratio: float
    multi_channel_bypass: bool
    skill_injection_mode: str
    skill_summary_chars: int
    llm_filter_enabled: bool
    llm_filter_max_keep: int
    llm_filter_fallback_max_keep: int
    llm_filter_min_candidates: int
    llm_filter_candidate_body_chars: int
    read_only_injection_profile: str
    default_scope: str
    llm_query_extract: bool
    llm_in_hook_path: bool
    llm_timeout_ms: int
    injection_semantic_gate: bool
    injection_token_budget: int
    query_expansion: str


@dataclass(frozen=True)
class DreamSettings:
    """``dream``: the consolidation pass."""

    enabled: bool
    interval_hours: float
    lookback_days: float
    duplicate_similarity: float
    stale_days: float
    max_changes: int


@dataclass(frozen=True)
class AuditSettings:
    """``audit``: audit row retention (0 = keep forever)."""

    retention_days: int


_SectionT = TypeVar("_SectionT")
_SCALARS: dict[str, Callable[[Any], Any]] = {"int": int, "float": float, "bool": bool, "str": str}


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def section_of(cls: type[_SectionT], values: Mapping[str, Any]) -> _SectionT:
    """One typed section from its (validated, default-filled) subtree: field ``tier1_top_k`` reads ``tier1TopK``."""
    kwargs = {f.name: _SCALARS[str(f.type)](values[_camel(f.name)]) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**kwargs)


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

    @cached_property
    def flags(self) -> AlgorithmFlags:
        """``algorithm.enableMemoryAdd`` / ``enableMemorySearch`` / ``enableQueryRewrite``."""
        return section_of(AlgorithmFlags, self.tree["algorithm"])

    @cached_property
    def capture(self) -> CaptureSettings:
        """``algorithm.capture``."""
        return section_of(CaptureSettings, self.tree["algorithm"]["capture"])

    @cached_property
    def reward(self) -> RewardSettings:
        """``algorithm.reward``."""
        return section_of(RewardSettings, self.tree["algorithm"]["reward"])

    @cached_property
    def feedback(self) -> FeedbackSettings:
        """``algorithm.feedback``."""
        return section_of(FeedbackSettings, self.tree["algorithm"]["feedback"])

    @cached_property
    def l2_induction(self) -> L2InductionSettings:
        """``algorithm.l2Induction``."""
        return section_of(L2InductionSettings, self.tree["algorithm"]["l2Induction"])

    @cached_property
    def l3_abstraction(self) -> L3AbstractionSettings:
        """``algorithm.l3Abstraction``."""
        return section_of(L3AbstractionSettings, self.tree["algorithm"]["l3Abstraction"])

    @cached_property
    def skill(self) -> SkillSettings:
        """``algorithm.skill``."""
        return section_of(SkillSettings, self.tree["algorithm"]["skill"])

    @cached_property
    def session(self) -> SessionSettings:
        """``algorithm.session``."""
        return section_of(SessionSettings, self.tree["algorithm"]["session"])

    @cached_property
    def retrieval(self) -> RetrievalSettings:
        """``algorithm.retrieval``."""
        return section_of(RetrievalSettings, self.tree["algorithm"]["retrieval"])

    @cached_property
    def dream(self) -> DreamSettings:
        """``dream``."""
        return section_of(DreamSettings, self.tree["dream"])

    @cached_property
    def audit(self) -> AuditSettings:
        """``audit``."""
        return section_of(AuditSettings, self.tree["audit"])

    @property
    def active_profile(self) -> str:
        """``activeProfile`` (``byok`` or ``account``)."""
        return str(self.tree.get("activeProfile", "byok"))

    @property
    def llm_budget(self) -> LLMBudgetSettings:
        """The ``llmBudget`` section (read from the tree, so a config reload applies it)."""
        budget = self.tree.get("llmBudget") or {}
        return LLMBudgetSettings(int(budget.get("dailyCalls", 0)), int(budget.get("dailyTokens", 0)))


class Settings:
    """The effective configuration, shared by reference.

    The composition root builds one and hands it to every ops group; ``reload_config`` swaps :attr:`current`,
    so every holder sees the new settings at once. Calling it returns the current config.
    """

    def __init__(self, config: MemmyConfig) -> None:
        """Hold ``config`` as the current configuration."""
        self.current = config

    def __call__(self) -> MemmyConfig:
        """The current configuration."""
        return self.current


class Configured:
    """Mixin for an ops group that reads the live configuration through ``self.settings``."""

    settings: Settings

    @property
    def config(self) -> MemmyConfig:
        """The current configuration (a reload is seen at once)."""
        return self.settings.current


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


def _parse_config_text(text: str, path: Path) -> Any:
    """The file's JSON or YAML (yaml is imported here, not by every import of memmy.config)."""
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a YAML (or ``.json``) config file into its top-level mapping; {} when absent."""
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
    data = _parse_config_text(text, path)
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
        review=str(tree.get("review") or "off"),
        json_mode=bool(tree.get("jsonMode", True)),
        repeat_penalty=max(float(tree.get("repeatPenalty", 0.0)), 0.0),
    )


_SLOT_IDENTITY = ("provider", "model", "endpoint", "apiKey")
_SLOT_INHERITED = ("provider", "vendor", "endpoint", "model", "apiKey", "jsonMode", "repeatPenalty")


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
    if storage["backend"] == "postgres" and not storage["postgresDsn"]:
        raise ConfigError(
            f"{path}: {ROOT_KEY}.storage.backend is postgres but no storage.postgresDsn (or MEMMY_POSTGRES_DSN) is set"
        )
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
            postgres_dsn=storage["postgresDsn"] or "",
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
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".config.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if path.suffix == ".json":
                json.dump(raw, handle, indent=2, ensure_ascii=False)
            else:
                import yaml

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
