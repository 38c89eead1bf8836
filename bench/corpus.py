"""Deterministic synthetic coding-agent memories and search queries for the benchmarks.

Memories are built from templates (tool preferences, errors and their fixes, file locations, commands,
decisions, environment facts), about 20% in Chinese. Every memory is unique under memmy's dedup rule
(content hash of the case-folded, whitespace-collapsed text), because the service merges identical
content. Queries mix ones that should match the corpus with off-topic ones, in English and Chinese.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from memmy.domain import content_hash

CHINESE_SHARE = 0.2
AGENTS = ("claude_code", "codex", "cursor", "opencode", "cli")

PROJECTS = (
    "memmy", "billing-api", "web-dashboard", "ingest-worker", "auth-service", "mobile-app", "data-pipeline",
    "infra", "docs-site", "search-indexer", "payments", "notifier", "cli-tools", "ml-training", "admin-panel",
    "gateway", "scheduler", "report-builder", "chat-backend", "etl-jobs",
)  # fmt: skip
PREFERENCES = (  # (preferred, avoided, topic, topic in Chinese)
    ("uv", "pip", "installing Python packages", "安装 Python 依赖"),
    ("pnpm", "npm", "JavaScript dependencies", "管理前端依赖"),
    ("ruff", "flake8", "linting", "代码检查"),
    ("pytest", "unittest", "Python tests", "写 Python 测试"),
    ("ripgrep", "grep", "searching the codebase", "搜索代码"),
    ("httpx", "requests", "HTTP clients", "发 HTTP 请求"),
    ("polars", "pandas", "dataframes", "处理表格数据"),
    ("vitest", "jest", "frontend tests", "写前端测试"),
    ("ruff format", "black", "formatting", "格式化代码"),
    ("tabs", "spaces", "indentation in Makefiles", "Makefile 缩进"),
    ("dataclasses", "pydantic models", "internal DTOs", "定义内部数据结构"),
    ("structlog", "print statements", "logging", "打日志"),
    ("sqlite", "postgres", "local development databases", "本地开发数据库"),
    ("docker compose", "minikube", "running services locally", "本地跑服务"),
    ("squash merges", "merge commits", "pull requests", "合并 PR"),
    ("conventional commits", "free-form commit messages", "commit messages", "写提交信息"),
    ("tokio", "async-std", "async Rust", "写异步 Rust"),
    ("zod", "yup", "schema validation", "校验数据格式"),
    ("Makefile targets", "ad-hoc shell scripts", "project tasks", "管理项目任务"),
    ("type hints everywhere", "untyped helpers", "Python code", "写 Python 代码"),
)
COMMANDS = (
    "pytest -q tests/{module}", "make test", "docker compose up -d db", "npm run build", "cargo test --workspace",
    "alembic upgrade head", "terraform plan -var-file=staging.tfvars", "kubectl rollout restart deployment/{project}",
    "go test ./...", "ruff check --fix src", "mypy --strict src", "uv sync --frozen",
    "pnpm install --frozen-lockfile", "git rebase -i origin/main", "python manage.py migrate",
    "npx playwright test", "cargo clippy -- -D warnings", "helm upgrade {project} ./chart",
    "make deploy-staging", "python -m {module}.cli export",
)  # fmt: skip
ERRORS = (
    "ModuleNotFoundError: No module named '{module}'", "EADDRINUSE: address already in use :::{port}",
    "sqlite3.OperationalError: database is locked", "TypeError: 'NoneType' object is not subscriptable",
    "error[E0502]: cannot borrow `{module}` as mutable", "ECONNREFUSED 127.0.0.1:{port}",
    "Permission denied (publickey)", "SSL: CERTIFICATE_VERIFY_FAILED", "OOMKilled (exit code 137)",
    "ImportError: cannot import name '{module}' from partially initialized module",
    "fatal: refusing to merge unrelated histories", "Segmentation fault (core dumped)",
    "TimeoutError: timed out after {port} ms", "KeyError: '{module}_id'",
    "FATAL: password authentication failed for user \"{module}\"", "RecursionError: maximum recursion depth exceeded",
    "Cannot find module '@/{module}'", "panic: runtime error: index out of range [{line}]",
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0x{line:x}", "429 Too Many Requests from the {module} API",
)  # fmt: skip
FIXES = (
    "pinning {module} to {version}", "setting {env}=1 before running it", "killing the stale process on port {port}",
    "adding src to PYTHONPATH", "deleting the .pytest_cache directory", "running `uv sync` first",
    "upgrading to Python {version}", "rebuilding the docker image with --no-cache", "raising the timeout to {port} ms",
    "moving the import inside the function", "regenerating the lockfile", "adding the SSH key to the agent",
    "using the corporate CA bundle via {env}", "increasing the memory limit to 2Gi", "restarting the dev container",
    "switching the test to a temporary directory", "adding a retry with exponential backoff",
    "checking out the branch again with --force", "closing the connection in a finally block",
    "clamping the index before slicing",
)  # fmt: skip
MODULES = (
    "db", "auth", "routes", "models", "settings", "worker", "cache", "client", "schema", "utils", "handlers",
    "queue", "billing", "export", "session", "metrics", "storage", "parser", "scheduler", "webhooks",
)  # fmt: skip
DIRS = ("src/{project}", "app", "services/{project}", "packages/core", "internal", "lib", "config", "scripts")
EXTENSIONS = (".py", ".ts", ".go", ".rs", ".yaml", ".toml", ".json", ".sql")
ENV_VARS = ("PYTHONUTF8", "CI", "NODE_OPTIONS", "RUST_BACKTRACE", "SSL_CERT_FILE", "DEBUG", "TZ", "NO_PROXY")
VERSIONS = ("3.11", "3.12", "3.13", "1.4.2", "2.0.1", "0.9.7", "18.19", "20.11", "1.78", "5.3.0")
COMPONENTS = (
    "database", "logging", "cache", "auth", "message queue", "cron", "frontend build", "CI", "feature flag",
    "rate limiter", "email", "tracing",
)  # fmt: skip
REASONS = (
    "it halves the CI time", "the old one is unmaintained", "it keeps the lockfile reproducible",
    "the team already knows it", "it avoids a native build step", "it works offline",
    "the reviewer asked for it", "it fixed the flaky tests",
)  # fmt: skip
DECISIONS = (
    "drop Python 3.9 support", "vendor the protobuf files", "run migrations at deploy time",
    "keep secrets in the OS keychain", "split the monorepo CI per package", "log in JSON",
    "cap request bodies at 1 MiB", "store timestamps in UTC", "use feature flags for risky changes",
    "freeze dependencies before each release",
)  # fmt: skip
NOTES = (
    "do not edit it by hand", "it is regenerated on every build", "staging overrides it", "the VPN must be on",
    "ask before changing it", "tests mock it", "it is read at start-up only", "secrets come from the env",
)  # fmt: skip
OS_NAMES = ("ubuntu-22.04", "ubuntu-24.04", "macos-14", "windows-2022", "debian-12", "alpine-3.19")

TASKS_ZH = (
    "跑单元测试", "部署到测试环境", "发布新版本", "迁移数据库", "清理缓存", "构建前端", "格式化代码", "更新依赖",
    "启动本地服务", "生成接口文档",
)  # fmt: skip
COMPONENTS_ZH = (
    "数据库连接", "日志", "缓存", "认证", "消息队列", "定时任务", "前端构建", "持续集成", "限流", "邮件通知",
)  # fmt: skip
FIXES_ZH = (
    "重启容器", "删除 node_modules 后重新安装", "把超时时间调大到 60 秒", "升级到最新版本", "加上环境变量",
    "换成本地镜像源", "关闭代理", "清空迁移记录", "把端口改成 {port}", "降级到 {version}",
)  # fmt: skip
NOTES_ZH = (
    "不要直接改生产配置", "每次提交前先跑 lint", "周五下午不上线", "需要先连 VPN", "测试数据放在 fixtures 目录",
    "改完要通知运维", "这个文件是自动生成的", "密钥从环境变量读取",
)  # fmt: skip

OFF_TOPIC_EN = (
    "sourdough bread hydration", "the capital of Mongolia", "quarterly tax filing deadline",
    "tuning a guitar to drop D", "marathon training plan", "best time to visit Kyoto", "how to repot an orchid",
    "the rules of cricket", "renaissance painting techniques", "knitting a scarf for beginners",
    "tides and the moon", "espresso grind size", "wedding speech ideas", "migrating birds in autumn",
    "chess opening principles", "how volcanoes form",
)  # fmt: skip
OFF_TOPIC_ZH = (
    "红烧肉怎么做", "明天北京天气怎么样", "周末去哪里爬山", "怎么养多肉植物", "世界杯历史冠军",
    "学钢琴要多久", "西湖有哪些景点", "如何挑选西瓜",
)  # fmt: skip
OFF_TOPIC_PREFIX_EN = ("what about", "tips for", "tell me about", "anything on", "notes on")
OFF_TOPIC_PREFIX_ZH = ("请问", "想了解", "有没有关于", "帮我查")


def _slots(rng: random.Random) -> dict[str, Any]:
    """Random values for every template placeholder."""
    project = rng.choice(PROJECTS)
    directory = rng.choice(DIRS).format(project=project)
    module = rng.choice(MODULES)
    return {
        "project": project,
        "module": module,
        "port": rng.choice((3000, 5432, 6379, 8000, 8080, 9200, 18960, 27017, 30000, 60000)),
        "line": rng.randint(10, 900),
        "version": rng.choice(VERSIONS),
        "env": rng.choice(ENV_VARS),
        "path": f"{directory}/{module}{rng.choice(EXTENSIONS)}",
        "component": rng.choice(COMPONENTS),
    }


def _fill(template: str, slots: dict[str, Any]) -> str:
    """Format a template (its placeholders may themselves contain placeholders)."""
    return template.format(**slots)


def _en_preference(rng: random.Random, s: dict[str, Any]) -> str:
    better, worse, topic, _zh = rng.choice(PREFERENCES)
    return (
        f"The user prefers {better} over {worse} for {topic} in {s['project']}; "
        f"{rng.choice(REASONS)}, so never suggest {worse} there."
    )


def _en_error(rng: random.Random, s: dict[str, Any]) -> str:
    command = _fill(rng.choice(COMMANDS), s)
    error = _fill(rng.choice(ERRORS), s)
    return f"Running `{command}` in {s['project']} failed with `{error}`; fixed by {_fill(rng.choice(FIXES), s)}."


def _en_location(rng: random.Random, s: dict[str, Any]) -> str:
    where = f"`{s['path']}` (line {s['line']})"
    return f"The {s['component']} config of {s['project']} lives in {where}; {rng.choice(NOTES)}."


def _en_command(rng: random.Random, s: dict[str, Any]) -> str:
    command = _fill(rng.choice(COMMANDS), s)
    return f"To run the {s['module']} checks in {s['project']}, use `{command}` from the repo root with {s['env']} set."


def _en_decision(rng: random.Random, s: dict[str, Any]) -> str:
    return f"Decided to {rng.choice(DECISIONS)} in {s['project']} because {rng.choice(REASONS)} (see `{s['path']}`)."


def _en_environment(rng: random.Random, s: dict[str, Any]) -> str:
    return (
        f"{s['project']} CI runs on {rng.choice(OS_NAMES)} with version {s['version']}; "
        f"the {s['component']} service listens on port {s['port']} and {rng.choice(NOTES)}."
    )


def _zh_error(rng: random.Random, s: dict[str, Any]) -> str:
    command = _fill(rng.choice(COMMANDS), s)
    error = _fill(rng.choice(ERRORS), s)
    return f"在 {s['project']} 里运行 `{command}` 报错 {error}，解决办法：{_fill(rng.choice(FIXES_ZH), s)}。"


def _zh_preference(rng: random.Random, s: dict[str, Any]) -> str:
    better, worse, _topic, topic_zh = rng.choice(PREFERENCES)
    return f"用户在 {s['project']} 项目里{topic_zh}更喜欢用 {better}，不要用 {worse}；{rng.choice(NOTES_ZH)}。"


def _zh_location(rng: random.Random, s: dict[str, Any]) -> str:
    component = rng.choice(COMPONENTS_ZH)
    return f"{s['project']} 的{component}配置在 `{s['path']}` 第 {s['line']} 行，{rng.choice(NOTES_ZH)}。"


def _zh_command(rng: random.Random, s: dict[str, Any]) -> str:
    command = _fill(rng.choice(COMMANDS), s)
    task = rng.choice(TASKS_ZH)
    return f"{task}之前要先在 {s['project']} 执行 `{command}`，端口用 {s['port']}，{rng.choice(NOTES_ZH)}。"


EN_TEMPLATES: tuple[Callable[[random.Random, dict[str, Any]], str], ...] = (
    _en_preference,
    _en_error,
    _en_error,
    _en_location,
    _en_command,
    _en_decision,
    _en_environment,
)
ZH_TEMPLATES: tuple[Callable[[random.Random, dict[str, Any]], str], ...] = (
    _zh_error,
    _zh_preference,
    _zh_location,
    _zh_command,
)


def _tags(rng: random.Random, slots: dict[str, Any]) -> list[str]:
    """One to three tags: the project, sometimes the module and a topic word."""
    tags = [str(slots["project"])]
    if rng.random() < 0.6:
        tags.append(str(slots["module"]))
    if rng.random() < 0.3:
        tags.append(rng.choice(("ci", "deploy", "testing", "tooling", "preference", "bug")))
    return tags


def synthetic_memory(rng: random.Random) -> dict[str, Any]:
    """One ``memory/add`` body with synthetic content, tags, source agent and project."""
    slots = _slots(rng)
    templates = ZH_TEMPLATES if rng.random() < CHINESE_SHARE else EN_TEMPLATES
    content = rng.choice(templates)(rng, slots)
    return {
        "content": content,
        "tags": _tags(rng, slots),
        "source": rng.choice(AGENTS),
        "projectId": f"/home/dev/src/{slots['project']}",
    }


def unique_memories(seed: int) -> Iterator[dict[str, Any]]:
    """An endless, deterministic stream of memories whose contents never collide under memmy's dedup."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while True:
        body = synthetic_memory(rng)
        digest = content_hash(body["content"])
        if digest in seen:
            continue
        seen.add(digest)
        yield body


def read_data_file(path: Path) -> list[dict[str, Any]]:
    """Memories from a text file, one per line; blank lines and dedup-equal repeats are skipped."""
    seen: set[str] = set()
    bodies: list[dict[str, Any]] = []
    for index, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        text = line.strip()
        digest = content_hash(text)
        if not text or digest in seen:
            continue
        seen.add(digest)
        bodies.append({"content": text, "source": AGENTS[index % len(AGENTS)]})
    return bodies


def _matching_query_en(rng: random.Random) -> str:
    slots = _slots(rng)
    better, worse, topic, _zh = rng.choice(PREFERENCES)
    options = (
        f"how do I fix {_fill(rng.choice(ERRORS), slots)}",
        f"which tool should I use for {topic}, {better} or {worse}?",
        f"where is the {slots['component']} config in {slots['project']}",
        f"how to run the {slots['module']} tests in {slots['project']}",
        f"why did we decide to {rng.choice(DECISIONS)}",
        f"{_fill(rng.choice(COMMANDS), slots)} fails",
        f"what port does the {slots['component']} service use in {slots['project']}",
    )
    return rng.choice(options)


def _matching_query_zh(rng: random.Random) -> str:
    slots = _slots(rng)
    options = (
        f"{slots['project']} {rng.choice(TASKS_ZH)}要注意什么",
        f"{rng.choice(COMPONENTS_ZH)}配置在哪里",
        f"运行 {_fill(rng.choice(COMMANDS), slots)} 报错怎么办",
        f"{rng.choice(PREFERENCES)[3]}用什么工具",
    )
    return rng.choice(options)


def _off_topic_query(rng: random.Random, chinese: bool) -> str:
    if chinese:
        return f"{rng.choice(OFF_TOPIC_PREFIX_ZH)}{rng.choice(OFF_TOPIC_ZH)}"
    return f"{rng.choice(OFF_TOPIC_PREFIX_EN)} {rng.choice(OFF_TOPIC_EN)}"


def _data_query(rng: random.Random, lines: Sequence[dict[str, Any]]) -> str:
    """A 3-6 word fragment of a random line of a ``--data`` corpus."""
    words = str(rng.choice(lines)["content"]).split()
    size = min(len(words), rng.randint(3, 6))
    start = rng.randint(0, max(0, len(words) - size))
    return " ".join(words[start : start + size])


def make_queries(
    count: int, seed: int, data: Sequence[dict[str, Any]] | None = None, off_topic_share: float = 0.3
) -> list[tuple[str, str]]:
    """``count`` unique (kind, query) pairs; kind is ``match-en``/``-zh``/``-data`` or ``off-en``/``-zh``."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    attempts = 0
    while len(out) < count and attempts < count * 200:
        attempts += 1
        chinese = rng.random() < CHINESE_SHARE
        off = rng.random() < off_topic_share
        if off:
            query = _off_topic_query(rng, chinese)
        elif data:
            query = _data_query(rng, data)
        else:
            query = _matching_query_zh(rng) if chinese else _matching_query_en(rng)
        if query in seen:
            continue
        seen.add(query)
        lang = "data" if data and not off else ("zh" if chinese else "en")
        out.append((f"{'off' if off else 'match'}-{lang}", query))
    return out
