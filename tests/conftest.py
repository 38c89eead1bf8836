"""Shared fixtures: a temporary HOME for every test, a real daemon on a free loopback port, an in-process service,
unreachable daemons (down or hanging)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml

from memmy.config import load_config
from memmy.embed import Embedder, build_embedder
from memmy.service import MemoryService
from memmy.service.imports import ImportOps
from memmy.sources.adapters import ADAPTERS
from memmy.store.db import Database
from memmy.store.pg import PgDatabase
from tests.pg_server import PostgresServer

SHARED = Path(__file__).resolve().parents[2] / "shared"

# A suite started in the background (`cmd &` in a script) inherits SIGINT ignored, and so would every process it
# starts: the tests that stop a child with SIGINT (Ctrl-C) need the disposition a foreground run has.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_ENV_PREFIXES = ("MEMMY_", "MEMORY_SERVICE_")

#: The store engine of the whole run: ``MEMMY_TEST_BACKEND=postgres python -m pytest`` puts every test's default
#: store (in-process, CLI, and every daemon or subprocess a test starts) on PostgreSQL; SQLite otherwise.
SUITE_BACKEND = os.environ.get("MEMMY_TEST_BACKEND", "sqlite")
if SUITE_BACKEND not in ("sqlite", "postgres"):
    raise pytest.UsageError(f"MEMMY_TEST_BACKEND must be sqlite or postgres, not {SUITE_BACKEND!r}")
#: In the PostgreSQL run: the database of each memmy home (a test's own HOME, a daemon's), made on first use.
_HOME_DSNS: dict[Path, str] = {}
_PG_SERVER: list[PostgresServer] = []


def pytest_report_header() -> str:
    import sqlite3

    return f"sqlite {sqlite3.sqlite_version}; store backend of this run: {SUITE_BACKEND}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the PostgreSQL run, leave out the SQLite half of the tests that run on both backends, and the tests of
    what only a SQLite file has (``only_sqlite``): the SQLite run runs them."""
    if SUITE_BACKEND != "postgres":
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        params = getattr(item, "callspec", None)
        (drop if params is not None and params.params.get("backend") == "sqlite" else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def home_dsn(home: Path) -> str:
    """The PostgreSQL database of memmy home ``home`` in the PostgreSQL run (a fresh one on first use)."""
    if home not in _HOME_DSNS:
        _HOME_DSNS[home] = _PG_SERVER[0].fresh_dsn()
    return _HOME_DSNS[home]


def home_env(home: Path) -> dict[str, str]:
    """The environment that points memmy at home ``home`` and its store (in the PostgreSQL run, its database)."""
    env = {"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")}
    if SUITE_BACKEND == "postgres":
        env.update({"MEMMY_MEMORY_BACKEND": "postgres", "MEMMY_POSTGRES_DSN": home_dsn(home)})
    return env


def store_query(home: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (SQLite's dialect) read from the store of memmy home ``home``: its SQLite file, or in the
    PostgreSQL run its database (through the store's own dialect rewrite)."""
    if SUITE_BACKEND == "postgres":
        db = PgDatabase(home_dsn(home))
        try:
            return [tuple(row) for row in db.query(sql, tuple(params))]
        finally:
            db.close()
    with closing(sqlite3.connect(home / ".memmy" / "memory-service" / "memory.sqlite")) as conn:
        return [tuple(row) for row in conn.execute(sql, tuple(params))]


def store_dump(home: Path) -> list[str]:
    """Every row of the store of memmy home ``home`` as text: SQLite's SQL dump, or on PostgreSQL each row of each
    table cast to text (for tests that look for what must not be left anywhere)."""
    if SUITE_BACKEND == "postgres":
        with psycopg.connect(home_dsn(home)) as pg:
            tables = [r[0] for r in pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
            return [str(r[0]) for table in tables for r in pg.execute(f'SELECT r::text FROM "{table}" r')]
    with closing(sqlite3.connect(home / ".memmy" / "memory-service" / "memory.sqlite")) as conn:
        return list(conn.iterdump())


def store_execute(home: Path, sql: str, params: Sequence[Any] = ()) -> None:
    """Run one write ``sql`` (SQLite's dialect) on the store of memmy home ``home``, committed, foreign keys on."""
    if SUITE_BACKEND == "postgres":
        db = PgDatabase(home_dsn(home))
        try:
            with db.transaction() as conn:
                conn.execute(sql, tuple(params))
        finally:
            db.close()
        return
    with closing(sqlite3.connect(home / ".memmy" / "memory-service" / "memory.sqlite")) as conn, conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(sql, tuple(params))


@pytest.fixture(scope="session", autouse=True)
def suite_postgres(request: pytest.FixtureRequest) -> None:
    """In the PostgreSQL run, the session's server, started before any daemon of a module is."""
    if SUITE_BACKEND == "postgres":
        _PG_SERVER.append(request.getfixturevalue("postgres_server"))


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One directory for the built ONNX graph, shared by every test home and daemon of the session.

    Without it each fresh home rebuilds the graph (seconds of CPU per daemon); what the build does is tested
    on its own in test_embed_onnx.py.
    """
    cache = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEMMY_MODEL_CACHE", str(cache))
        yield cache


@pytest.fixture(autouse=True)
def isolated_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_cache: Path, suite_postgres: None
) -> Iterator[Path]:
    """Every test gets its own HOME and MEMMY_HOME; memmy env vars from the outside are cleared. In the PostgreSQL
    run its store is a fresh PostgreSQL database (``MEMMY_MEMORY_BACKEND``/``MEMMY_POSTGRES_DSN``, as a user sets
    them), dropped after the test with the databases of the daemons it started."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MEMMY_HOME", str(home / ".memmy"))
    monkeypatch.setenv("MEMMY_MODEL_CACHE", str(model_cache))
    if SUITE_BACKEND == "postgres":
        monkeypatch.setenv("MEMMY_MEMORY_BACKEND", "postgres")
        monkeypatch.setenv("MEMMY_POSTGRES_DSN", home_dsn(home))
    yield home
    for path in [path for path in _HOME_DSNS if path.is_relative_to(tmp_path)]:
        _PG_SERVER[0].drop(_HOME_DSNS.pop(path))


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real local MiniLM embedder, loaded once per test session."""
    return build_embedder("local")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL 18 + pgvector for the whole session, started on first use (its data outside pytest's
    numbered temporary folders, which a concurrent pytest run may prune)."""
    folder = Path(tempfile.mkdtemp(prefix="memmy-pg-"))
    server = PostgresServer(folder / "data")
    yield server
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """An empty, migrated PostgreSQL database of this test's own."""
    return postgres_server.fresh_dsn()


#: Runs a test on SQLite alone: for what only a SQLite file has (its permissions, FTS5, EXPLAIN QUERY PLAN, the export
#: that snapshots the file); the test's name says so.
only_sqlite = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture(params=["postgres"] if SUITE_BACKEND == "postgres" else ["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> str:
    """The store engine of this run of the test: SQLite (the default), or a fresh PostgreSQL database, chosen as a
    user does (``MEMMY_MEMORY_BACKEND`` and ``MEMMY_POSTGRES_DSN``). The PostgreSQL run runs only the second."""
    if request.param == "postgres":
        monkeypatch.setenv("MEMMY_MEMORY_BACKEND", "postgres")
        if SUITE_BACKEND != "postgres":  # the PostgreSQL run gave this test's home a database already
            monkeypatch.setenv("MEMMY_POSTGRES_DSN", request.getfixturevalue("postgres_dsn"))
    else:
        monkeypatch.delenv("MEMMY_MEMORY_BACKEND", raising=False)
        monkeypatch.delenv("MEMMY_POSTGRES_DSN", raising=False)
    return str(request.param)


@pytest.fixture
def database(backend: str, tmp_path: Path) -> Iterator[Database]:
    """A fresh, migrated store database on each backend (SQLite file, or PostgreSQL database)."""
    db = Database(tmp_path / "store.sqlite") if backend == "sqlite" else PgDatabase(os.environ["MEMMY_POSTGRES_DSN"])
    yield db
    db.close()


@pytest.fixture
def service(isolated_home: Path, embedder: Embedder, backend: str) -> Iterator[MemoryService]:
    """An in-process MemoryService over a fresh store (no HTTP), on each backend."""
    svc = MemoryService.open(load_config(), embedder=embedder)
    svc.indexer.load_index()
    yield svc
    svc.close()


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def refused_endpoint() -> str:
    """The URL of a daemon that is down: nothing listens on its port."""
    return f"http://127.0.0.1:{free_port()}"


class HangingServer:
    """A daemon that hangs: accepts connections, reads the request and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.clients: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.recv(65536)
            self.clients.append(conn)

    def close(self) -> None:
        self.stop.set()
        for conn in self.clients:
            conn.close()
        self.sock.close()


@pytest.fixture
def hanging_server() -> Iterator[HangingServer]:
    """A server that accepts connections and never answers."""
    server = HangingServer()
    yield server
    server.close()


@pytest.fixture(params=["refused", "hanging"])
def dead_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    """A daemon that is down (nothing listens) or that accepts and never answers."""
    if request.param == "refused":
        yield refused_endpoint()
        return
    server = HangingServer()
    yield server.url
    server.close()


@dataclass
class Daemon:
    """A real ``memmy-memory serve`` process on a loopback port."""

    home: Path
    port: int
    token: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    #: More ``serve`` options (a team server: ``--host``, ``--tls-cert``/``--tls-key``).
    extra_args: list[str] = field(default_factory=list)
    #: The CA file to verify an HTTPS daemon with (set: the daemon serves TLS).
    ca: str | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    def verify(self) -> ssl.SSLContext | bool:
        """What an HTTPS client verifies this daemon with (its CA), else the default."""
        return ssl.create_default_context(cafile=self.ca) if self.ca else True

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIXES)}
        env.update(home_env(self.home))
        if "MEMMY_MODEL_CACHE" in os.environ:
            env["MEMMY_MODEL_CACHE"] = os.environ["MEMMY_MODEL_CACHE"]
        if self.token:
            env["MEMMY_MEMORY_TOKEN"] = self.token
        env.update(self.extra_env)
        return env

    def start(self, timeout_s: float = 60.0) -> None:
        self.log_path = self.home / f"daemon-{self.port}-{time.time_ns()}.log"
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memmy", "serve", "--port", str(self.port), *self.extra_args],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited early:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1, verify=self.verify()).status_code == 200:
                    self.token = self.token or self.config_token()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"daemon did not become healthy:\n{self.log_path.read_text()}")

    def config_token(self) -> str | None:
        """The token ``serve`` created in this home's config.yaml (None with ``server.auth: none``)."""
        path = Path(self.extra_env.get("MEMMY_CONFIG") or self.home / ".memmy" / "config.yaml")
        if not path.exists():
            return None
        tree = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("memmyMemory") or {}
        return ((tree.get("storage") or {}).get("token")) or None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def client(self, token: str | None = "__default__", **headers: str) -> httpx.Client:
        tok = self.token if token == "__default__" else token
        all_headers = dict(headers)
        if tok:
            all_headers["authorization"] = f"Bearer {tok}"
        return httpx.Client(base_url=self.url, headers=all_headers, timeout=30, verify=self.verify())

    def drain(self, timeout_s: float = 60.0) -> None:
        """Embed everything queued now and wait until the background worker has nothing in flight."""
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while time.monotonic() < deadline:
                client.post("/api/v1/worker/run", json={"limit": 10000}).raise_for_status()
                if client.get("/api/v1/health").json()["embeddingQueue"]["pending"] == 0:
                    return
                time.sleep(0.05)
        raise TimeoutError("embedding queue did not drain")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One token-protected daemon shared by a test module."""
    home = tmp_path_factory.mktemp("daemon-home")
    proc = Daemon(home=home, port=free_port(), token="test-token-123")
    proc.start()
    yield proc
    if proc.process and proc.process.poll() is None:
        proc.stop()


@pytest.fixture
def fresh_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon of its own (for restart, kill and config tests); not started yet."""
    home = tmp_path / "daemon-home"
    home.mkdir()
    proc = Daemon(home=home, port=free_port())
    yield proc
    if proc.process and proc.process.poll() is None:
        proc.stop(signal.SIGKILL)


@contextmanager
def small_tmpfs(tmp_path: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` MiB for disk-full tests; skips the test, with the reason, where none can be mounted."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the disk-full case is not run here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def importer_service(isolated_home: Path, embedder: Embedder, backend: str) -> Iterator[MemoryService]:
    """An in-process service whose importer reads only Claude Code history under the isolated HOME."""
    service = MemoryService.open(load_config(), embedder=embedder)
    service.indexer.load_index()
    service.imports = ImportOps(
        service.settings,
        service.store,
        service.trace_writer,
        adapters={"claude_code": ADAPTERS["claude_code"]},
        env={"HOME": str(isolated_home)},
    )
    yield service
    service.close()


#: Builds an in-process service over a store of its own, with ``memmyMemory`` config overrides.
ServiceFactory = Callable[..., MemoryService]


@pytest.fixture
def make_service(
    isolated_home: Path, embedder: Embedder, backend: str, request: pytest.FixtureRequest
) -> Iterator[ServiceFactory]:
    """In-process services, each over its own store, with the given ``memmyMemory`` config; closed at the end."""
    created: list[MemoryService] = []

    def build(config: dict[str, Any] | None = None) -> MemoryService:
        if backend == "postgres" and created:  # every service gets a store of its own
            fresh = request.getfixturevalue("postgres_server").fresh_dsn
            os.environ["MEMMY_POSTGRES_DSN"] = home_dsn(isolated_home / str(len(created))) if _PG_SERVER else fresh()
        path = isolated_home / ".memmy" / "config.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"memmyMemory": config or {}}))
        db = isolated_home / f"memory-{len(created)}.sqlite"  # every service gets a store of its own
        service = MemoryService.open(load_config(db_override=db), embedder=embedder)
        service.indexer.load_index()
        created.append(service)
        return service

    yield build
    for service in created:
        service.close()
