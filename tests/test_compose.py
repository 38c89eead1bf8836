"""``compose.yaml`` (docs/team.md, "With Docker Compose"): it parses, its services, images and environment names
are ones memmy reads, and the configuration its environment makes is a team server on PostgreSQL. Docker itself
is not needed: what Compose would do with each value is checked against memmy's own config loader and CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from memmy.cli.main import serve
from memmy.config import ENV_OVERRIDES, load_config

ROOT = Path(__file__).resolve().parents[1]
#: Variables memmy reads besides the config overrides (where its home is).
OTHER_ENV = {"MEMMY_HOME"}


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def interpolated(value: str, env: dict[str, str]) -> str:
    """What Compose makes of ``${NAME}`` / ``${NAME:?message}`` with ``env`` set (``$$`` is a literal ``$``)."""
    return re.sub(r"\$\{(\w+)(?::\?[^}]*)?\}", lambda m: env[m.group(1)], value).replace("$$", "$")


def test_compose_runs_postgres_with_pgvector_and_memmy_on_it(tmp_path: Path) -> None:
    data = compose()
    services = data["services"]
    assert set(services) == {"db", "memmy"}
    db, memmy = services["db"], services["memmy"]
    assert db["image"].startswith("pgvector/pgvector:pg")  # PostgreSQL with the vector extension
    python = re.fullmatch(r"python:(\d+)\.(\d+)-slim", memmy["image"])
    assert python and (int(python[1]), int(python[2])) >= (3, 11)  # pyproject: requires-python >= 3.11
    assert memmy["depends_on"]["db"]["condition"] == "service_healthy" and "healthcheck" in db
    assert set(data["volumes"]) >= {"pgdata", "memmy"}

    environment: dict[str, str] = memmy["environment"]
    assert set(environment) <= set(ENV_OVERRIDES) | OTHER_ENV, set(environment) - set(ENV_OVERRIDES) - OTHER_ENV
    shell_env = {"POSTGRES_PASSWORD": "pw", "MEMMY_MEMORY_TOKEN": "owner-token"}
    env = {name: interpolated(str(value), shell_env) for name, value in environment.items()}
    env["MEMMY_HOME"] = str(tmp_path / "memmy")  # the container's /data/memmy, here
    config = load_config(env=env)
    assert config.storage.backend == "postgres" and config.storage.token == "owner-token"
    dsn = urlsplit(config.storage.postgres_dsn)
    database = db["environment"]
    assert dsn.hostname == "db" and dsn.username == database["POSTGRES_USER"]  # the db service, its user
    assert dsn.path == "/" + database["POSTGRES_DB"] and dsn.password == "pw"

    command = " ".join(memmy["command"])
    assert '"memmy[postgres]"' in command  # the extra that brings psycopg and pgvector
    serve_args = command.split("memmy-memory serve", 1)[1].split()
    options = {opt for param in serve.params for opt in param.opts}
    assert {a for a in serve_args if a.startswith("--")} <= options
    port = serve_args[serve_args.index("--port") + 1]
    assert memmy["ports"] == [f"{port}:{port}"] and serve_args[serve_args.index("--host") + 1] == "0.0.0.0"
    mounted = {v.split(":")[1] for v in memmy["volumes"]}
    tls = [serve_args[serve_args.index(flag) + 1] for flag in ("--tls-cert", "--tls-key")]
    assert all(any(path.startswith(m + "/") for m in mounted) for path in tls)  # a public address needs TLS
