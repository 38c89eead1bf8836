"""The agent's part of ``~/.memmy/config.yaml``: ``agents``, ``providers``, ``tools`` and ``serve``.

The ``memmyMemory`` section belongs to the memory service (``memmy.config``); the agent reads its own top-level
keys from the same file, expands ``${ENV}`` references and fills in the provider defaults below.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memmy.config import config_path, memmy_home, read_config_file
from memmy.errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

DEFAULT_SERVE_PORT = 18990
DEFAULT_SESSION = "cli:direct"


@dataclass(frozen=True)
class ProviderSpec:
    """A known provider: its wire protocol, default endpoint, default model and key variable."""

    name: str
    label: str
    kind: str  # "openai" (Chat Completions), "anthropic" (Messages) or "gemini" (google-genai)
    api_base: str
    model: str
    key_env: str = ""
    needs_key: bool = True


PROVIDERS: dict[str, ProviderSpec] = {
    spec.name: spec
    for spec in (
        ProviderSpec("openai", "OpenAI", "openai", "https://api.openai.com/v1", "gpt-4o", "OPENAI_API_KEY"),
        ProviderSpec(
            "anthropic", "Anthropic", "anthropic", "https://api.anthropic.com", "claude-sonnet-4", "ANTHROPIC_API_KEY"
        ),
        ProviderSpec(
            "gemini",
            "Gemini",
            "gemini",
            "https://generativelanguage.googleapis.com",
            "gemini-2.5-pro",
            "GEMINI_API_KEY",
        ),
        ProviderSpec(
            "deepseek", "DeepSeek", "openai", "https://api.deepseek.com/v1", "deepseek-chat", "DEEPSEEK_API_KEY"
        ),
        ProviderSpec("zhipu", "Zhipu", "openai", "https://open.bigmodel.cn/api/paas/v4", "glm-4", "ZHIPU_API_KEY"),
        ProviderSpec(
            "dashscope",
            "Tongyi Qianwen",
            "openai",
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
            "qwen-max",
            "DASHSCOPE_API_KEY",
        ),
        ProviderSpec("kimi", "Kimi", "openai", "https://api.moonshot.ai/v1", "moonshot-v1-128k", "MOONSHOT_API_KEY"),
        ProviderSpec(
            "minimax", "MiniMax", "openai", "https://api.minimax.chat/v1", "MiniMax-Text-01", "MINIMAX_API_KEY"
        ),
        ProviderSpec(
            "qianfan", "Baidu Qianfan", "openai", "https://qianfan.baidubce.com/v2", "ernie-4.0-8k", "QIANFAN_API_KEY"
        ),
        ProviderSpec(
            "doubao", "Doubao", "openai", "https://ark.cn-beijing.volces.com/api/v3", "doubao-pro-256k", "ARK_API_KEY"
        ),
        ProviderSpec(
            "openrouter", "OpenRouter", "openai", "https://openrouter.ai/api/v1", "openai/gpt-4o", "OPENROUTER_API_KEY"
        ),
        ProviderSpec("ollama", "Ollama", "openai", "http://127.0.0.1:11434/v1", "llama3.1", needs_key=False),
        ProviderSpec("lmstudio", "LM Studio", "openai", "http://127.0.0.1:1234/v1", "local-model", needs_key=False),
        ProviderSpec("vllm", "vLLM", "openai", "http://127.0.0.1:8000/v1", "local-model", needs_key=False),
        ProviderSpec("custom", "Any OpenAI-compatible base URL", "openai", "", "", needs_key=False),
    )
}


@dataclass(frozen=True)
class ModelChoice:
    """A resolved model: which provider answers it and how to reach it."""

    name: str  # preset name, or "default"
    provider: str
    kind: str
    model: str
    api_base: str
    api_key: str
    timeout_s: float
    max_retries: int
    context_window: int
    max_tokens: int


@dataclass(frozen=True)
class McpServerConfig:
    """One entry of ``tools.mcpServers``."""

    name: str
    type: str  # stdio | sse | streamableHttp
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    tool_timeout_s: float = 30.0
    enabled_tools: tuple[str, ...] = ("*",)


SEARCH_PROVIDERS = ("ddgs", "duckduckgo", "searxng", "brave", "tavily", "none")


@dataclass(frozen=True)
class SearchConfig:
    """``tools.web.search``: provider, result count, endpoint, key, time cap."""

    provider: str = "ddgs"
    max_results: int = 5
    api_base: str = ""
    api_key: str = ""
    timeout_s: float = 15.0


@dataclass(frozen=True)
class ToolsConfig:
    """Built-in tool toggles (``tools.*``) and the MCP servers."""

    exec_enabled: bool = True
    exec_timeout_s: float = 60.0
    exec_approval: str = "ask"  # ask | allow | deny
    web_enabled: bool = True
    fetch_timeout_s: float = 30.0
    fetch_max_chars: int = 60000
    fetch_max_redirects: int = 5
    web_search: SearchConfig = SearchConfig()
    files_enabled: bool = True
    restrict_to_workspace: bool = False
    memory_tools: bool = True
    tool_timeout_s: float = 60.0
    mcp_servers: tuple[McpServerConfig, ...] = ()


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent reads from the config file, resolved."""

    path: Path
    home: Path
    workspace: Path
    default: ModelChoice | None
    presets: dict[str, ModelChoice]
    tools: ToolsConfig
    memory_enabled: bool
    max_tool_iterations: int
    compact_ratio: float
    system_prompt: str
    serve_host: str
    serve_port: int
    serve_token: str | None
    problems: tuple[str, ...]
    raw: dict[str, Any]
    serve_allowed_origins: tuple[str, ...] = ()  # browser origins ``memmy serve`` accepts besides its own

    def model(self, name: str | None = None) -> ModelChoice | None:
        """The preset ``name`` (or the default model)."""
        if not name or name == "default":
            return self.default
        return self.presets.get(name)


def expand_env(value: Any, env: Mapping[str, str]) -> Any:
    """Replace ``${NAME}`` in every string (unset variables become empty)."""
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: env.get(m.group(1), ""), value)
    if isinstance(value, dict):
        return {k: expand_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env) for v in value]
    return value


def _section(tree: Mapping[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = tree.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {key}: expected a mapping, got {value!r}")
    return value


def _number(value: Any, default: float, where: str, path: Path) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{path}: {where}: expected a number, got {value!r}")
    return float(value)


def _resolve_model(
    name: str,
    entry: Mapping[str, Any],
    defaults: Mapping[str, Any],
    providers: Mapping[str, Any],
    env: Mapping[str, str],
    path: Path,
) -> ModelChoice:
    provider = str(entry.get("provider") or defaults.get("provider") or "openai")
    spec = PROVIDERS.get(provider)
    settings = providers.get(provider) or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{path}: providers.{provider}: expected a mapping")
    api_base = str(settings.get("apiBase") or "")
    kind = str(settings.get("type") or (spec.kind if spec else "openai"))
    if kind == "gemini" and not settings.get("type") and api_base.rstrip("/").endswith("/openai"):
        kind = "openai"  # Gemini's OpenAI-compatible path, as configs written before the Gemini SDK name it
    if kind not in ("openai", "anthropic", "gemini"):
        raise ConfigError(f"{path}: providers.{provider}.type: expected openai, anthropic or gemini, got {kind!r}")
    api_key = str(settings.get("apiKey") or "")
    if provider == "openai":
        api_base = api_base or env.get("OPENAI_BASE_URL", "")
        api_key = api_key or env.get("OPENAI_API_KEY", "")
    elif provider == "anthropic":
        api_base = api_base or env.get("ANTHROPIC_BASE_URL", "")
        api_key = api_key or env.get("ANTHROPIC_API_KEY", "")
    elif spec is not None and spec.key_env:
        api_key = api_key or env.get(spec.key_env, "")
    api_base = api_base or (spec.api_base if spec else "")
    model = str(entry.get("model") or (spec.model if spec else ""))
    where = "agents.defaults" if name == "default" else f"agents.presets.{name}"
    return ModelChoice(
        name=name,
        provider=provider,
        kind=kind,
        model=model,
        api_base=api_base.rstrip("/"),
        api_key=api_key,
        timeout_s=_number(entry.get("timeoutS", defaults.get("timeoutS")), 60.0, f"{where}.timeoutS", path),
        max_retries=int(_number(entry.get("maxRetries", defaults.get("maxRetries")), 2, f"{where}.maxRetries", path)),
        context_window=int(
            _number(entry.get("contextWindow", defaults.get("contextWindow")), 128000, f"{where}.contextWindow", path)
        ),
        max_tokens=int(_number(entry.get("maxTokens", defaults.get("maxTokens")), 4096, f"{where}.maxTokens", path)),
    )


def _mcp_servers(tools: Mapping[str, Any], path: Path) -> tuple[McpServerConfig, ...]:
    servers = tools.get("mcpServers") or {}
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: tools.mcpServers: expected a mapping")
    found = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: tools.mcpServers.{name}: expected a mapping")
        kind = str(entry.get("type") or ("stdio" if entry.get("command") else "streamableHttp"))
        if kind not in ("stdio", "sse", "streamableHttp"):
            raise ConfigError(f"{path}: tools.mcpServers.{name}.type: expected stdio, sse or streamableHttp")
        if kind == "stdio" and not entry.get("command"):
            raise ConfigError(f"{path}: tools.mcpServers.{name}.command: required for a stdio server")
        if kind != "stdio" and not entry.get("url"):
            raise ConfigError(f"{path}: tools.mcpServers.{name}.url: required for a {kind} server")
        enabled = entry.get("enabledTools", ["*"])
        found.append(
            McpServerConfig(
                name=str(name),
                type=kind,
                command=str(entry.get("command") or ""),
                args=tuple(str(a) for a in entry.get("args") or ()),
                env={str(k): str(v) for k, v in (entry.get("env") or {}).items()},
                url=str(entry.get("url") or ""),
                headers={str(k): str(v) for k, v in (entry.get("headers") or {}).items()},
                tool_timeout_s=_number(entry.get("toolTimeout"), 30.0, f"tools.mcpServers.{name}.toolTimeout", path),
                enabled_tools=tuple(str(t) for t in (enabled if isinstance(enabled, list) else [enabled])),
            )
        )
    return tuple(found)


def _search(web: Mapping[str, Any], path: Path) -> SearchConfig:
    entry = web.get("search") or {}
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: tools.web.search: expected a mapping")
    provider = str(entry.get("provider", "ddgs") or "none").lower()
    if provider not in SEARCH_PROVIDERS:
        raise ConfigError(f"{path}: tools.web.search.provider: expected one of {', '.join(SEARCH_PROVIDERS)}")
    return SearchConfig(
        provider=provider,
        max_results=int(_number(entry.get("maxResults"), 5, "tools.web.search.maxResults", path)),
        api_base=str(entry.get("apiBase") or ""),
        api_key=str(entry.get("apiKey") or ""),
        timeout_s=_number(entry.get("timeoutS"), 15.0, "tools.web.search.timeoutS", path),
    )


def _tools(tree: Mapping[str, Any], path: Path) -> ToolsConfig:
    tools = _section(tree, "tools", path)
    exec_ = tools.get("exec") or {}
    web = tools.get("web") or {}
    fetch = web.get("fetch") or {} if isinstance(web, dict) else {}
    files = tools.get("files") or {}
    approval = str(exec_.get("approval", "ask"))
    if approval not in ("ask", "allow", "deny"):
        raise ConfigError(f"{path}: tools.exec.approval: expected ask, allow or deny, got {approval!r}")
    return ToolsConfig(
        exec_enabled=bool(exec_.get("enabled", True)),
        exec_timeout_s=_number(exec_.get("timeout"), 60.0, "tools.exec.timeout", path),
        exec_approval=approval,
        web_enabled=bool(web.get("enabled", True)),
        fetch_timeout_s=_number(fetch.get("timeoutS"), 30.0, "tools.web.fetch.timeoutS", path),
        fetch_max_chars=int(_number(fetch.get("maxChars"), 60000, "tools.web.fetch.maxChars", path)),
        fetch_max_redirects=int(_number(fetch.get("maxRedirects"), 5, "tools.web.fetch.maxRedirects", path)),
        web_search=_search(web if isinstance(web, dict) else {}, path),
        files_enabled=bool(files.get("enabled", True)),
        restrict_to_workspace=bool(tools.get("restrictToWorkspace", False)),
        memory_tools=bool((tools.get("memory") or {}).get("enabled", True)),
        tool_timeout_s=_number(tools.get("toolTimeout"), 60.0, "tools.toolTimeout", path),
        mcp_servers=_mcp_servers(tools, path),
    )


def _origins(serve: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    origins = serve.get("allowedOrigins") or []
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise ConfigError(f"{path}: serve.allowedOrigins: expected a list of origins like http://localhost:3000")
    return tuple(o.strip().rstrip("/") for o in origins)


def read_raw(path: Path) -> dict[str, Any]:
    """The config file as written (``${ENV}`` references unexpanded); {} when absent."""
    return read_config_file(path)


def load_agent_config(explicit: str | None = None, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Read the agent's sections of the config file (missing file: all defaults, no model)."""
    env = os.environ if env is None else env
    path = config_path(explicit, env)
    raw = read_config_file(path)
    tree = expand_env({k: v for k, v in raw.items() if k != "memmyMemory"}, env)
    agents = _section(tree, "agents", path)
    defaults = agents.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise ConfigError(f"{path}: agents.defaults: expected a mapping")
    providers = _section(tree, "providers", path)
    problems: list[str] = []
    default: ModelChoice | None = None
    env_has_openai = bool(env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"))
    if defaults.get("model") or defaults.get("provider") or providers or env_has_openai:
        default = _resolve_model("default", defaults, defaults, providers, env, path)
        if not default.api_base:
            problems.append(f"provider {default.provider!r} has no apiBase (set providers.{default.provider}.apiBase)")
        if not default.model:
            problems.append("no model set (agents.defaults.model)")
    else:
        problems.append("no model configured: run `memmy onboard`")
    presets: dict[str, ModelChoice] = {}
    raw_presets = agents.get("presets") or {}
    if not isinstance(raw_presets, dict):
        raise ConfigError(f"{path}: agents.presets: expected a mapping")
    for name, entry in raw_presets.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: agents.presets.{name}: expected a mapping")
        merged = {**{k: v for k, v in defaults.items() if k != "model"}, **entry}
        presets[str(name)] = _resolve_model(str(name), merged, merged, providers, env, path)
    home = memmy_home(env)
    serve = _section(tree, "serve", path)
    workspace = Path(str(agents.get("workspace") or defaults.get("workspace") or home / "workspace")).expanduser()
    return AgentConfig(
        path=path,
        home=home,
        workspace=workspace,
        default=default,
        presets=presets,
        tools=_tools(tree, path),
        memory_enabled=bool(defaults.get("memory", True)),
        max_tool_iterations=int(
            _number(defaults.get("maxToolIterations"), 20, "agents.defaults.maxToolIterations", path)
        ),
        compact_ratio=_number(defaults.get("compactAt"), 0.75, "agents.defaults.compactAt", path),
        system_prompt=str(defaults.get("systemPrompt") or ""),
        serve_host=str(serve.get("host") or "127.0.0.1"),
        serve_port=int(_number(serve.get("port"), DEFAULT_SERVE_PORT, "serve.port", path)),
        serve_token=str(serve.get("token")) if serve.get("token") else env.get("MEMMY_SERVE_TOKEN") or None,
        problems=tuple(problems),
        raw=raw,
        serve_allowed_origins=_origins(serve, path),
    )


def _merge_into(base: MutableMapping[str, Any], overlay: Mapping[str, Any]) -> None:
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), MutableMapping):
            _merge_into(base[key], value)
        else:
            base[key] = dict(value) if isinstance(value, Mapping) else value


#: One config write at a time in this process (the workbench writes from threads); :func:`_writing` adds a file
#: lock for other processes (the CLI beside a running ``memmy serve``).
_WRITE_LOCK = threading.Lock()


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Hold the config file's write lock: a read, merge and write is not interleaved with another one, which would
    lose its update (two settings saved at once: the second read the file before the first was written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _WRITE_LOCK:
        lock = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                import fcntl
            except ImportError:  # Windows: no flock; writes take turns within the process only (as hook/outbox.py)
                pass
            else:
                fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # (closing releases the lock)


def write_agent_sections(path: Path, updates: Mapping[str, Any]) -> None:
    """Deep-merge ``updates`` into the file's top-level agent sections, keeping every other key and the user's
    comments, key order and quoting (a ruamel.yaml round trip; a ``.json`` file stays JSON). 0600, atomic; one
    writer at a time (:func:`_writing`)."""
    with _writing(path):
        _write_sections(path, updates)


def _write_sections(path: Path, updates: Mapping[str, Any]) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if path.suffix == ".json":
        raw = read_config_file(path)
        _merge_into(raw, updates)
        output = json.dumps(raw, indent=2, ensure_ascii=False) + "\n"
    else:
        from ruamel.yaml import YAML  # only for writes (keeps the agent's start-up light)
        from ruamel.yaml.comments import CommentedMap
        from ruamel.yaml.error import YAMLError

        round_trip = YAML()
        round_trip.preserve_quotes = True
        round_trip.width = 4096
        try:
            doc = round_trip.load(text) if text.strip() else None
        except YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if doc is None:
            doc = CommentedMap()
        if not isinstance(doc, CommentedMap):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
        _merge_into(doc, updates)
        buffer = io.StringIO()
        round_trip.dump(doc, buffer)
        output = buffer.getvalue()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(output, encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
