"""The daemon's composition root: config -> store (+lock) -> service -> ASGI app -> uvicorn."""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import json
import logging
import os
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from memmy.config import MemmyConfig, ensure_token, load_config
from memmy.errors import ConfigError
from memmy.server.app import create_app
from memmy.service import MemoryService
from memmy.store.db import ServerLock
from memmy.store.integrity import preflight

log = logging.getLogger("memmy.server")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Server(uvicorn.Server):
    """uvicorn's server, but SIGTERM/SIGINT end ``run()`` normally instead of re-raising the signal.

    That lets the daemon close the store and remove its lock file, and exit 0 after a graceful stop.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def ensure_port_free(host: str, port: int) -> None:
    """Fail early, with a clear message, when the address is taken (before touching the store)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another memmy or program using it? "
                "pick another with --port)"
            ) from None


def _with_token(config: MemmyConfig) -> MemmyConfig:
    """Create the token on first start (auth is on by default); warn loudly when auth is off."""
    if config.server.auth_disabled:
        log.warning(
            "server.auth is 'none': every local process (and any program you run) can read and write your "
            "memories without a token; set server.auth: token in %s to close it",
            config.path,
        )
        return config
    token = ensure_token(config)
    if token is None:
        return config
    log.info("created a service token in %s (storage.token, mode 0600)", config.path)
    _share_token(config.home / "hook.json", token)
    return load_config(config.path, db_override=config.db_override)


def _share_token(hook_json: Path, token: str) -> None:
    """Give an existing ``hook.json`` (written by an older ``init`` without a token) the new token."""
    try:
        data = json.loads(hook_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or data.get("token"):
        return
    data["token"] = token
    tmp = hook_json.with_name(hook_json.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(hook_json)
    log.info("wrote the token to %s; re-run `memmy-memory init` so agent plugins get it too", hook_json)


def settle_heap() -> None:
    """Move everything built at startup out of the garbage collector's sight (``gc.freeze``).

    The service's modules, configuration, model session and store objects live as long as the process. Without
    this, every full collection walks all of them again (about 30 ms with a 10k store, paid by whichever request
    or import batch happens to trigger it); frozen, a full collection walks only what was allocated since.
    """
    gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class TlsFiles:
    """The certificate and private key a team server serves HTTPS with (uvicorn's own TLS)."""

    cert: str
    key: str

    @classmethod
    def of(cls, cert: str | None, key: str | None) -> TlsFiles | None:
        """Both files or neither (None); one without the other is a clear error."""
        if bool(cert) != bool(key):
            raise ConfigError("--tls-cert and --tls-key go together: give both (or neither, on loopback)")
        return cls(str(cert), str(key)) if cert and key else None


def check_exposure(host: str, config: MemmyConfig, tls: TlsFiles | None, behind_proxy: bool) -> None:
    """A non-loopback address only with a token and with TLS (its own, or a reverse proxy's)."""
    if is_loopback(host):
        return
    if config.server.auth_disabled or not config.storage.token:
        raise ConfigError(
            f"refusing to listen on non-loopback address {host} without a token: set storage.token in "
            f"{config.path} or MEMMY_MEMORY_TOKEN (and not server.auth: none)"
        )
    if tls is None and not behind_proxy:
        raise ConfigError(
            f"refusing to listen on non-loopback address {host} without TLS: tokens would cross the network in "
            "clear text. Give --tls-cert and --tls-key, or --behind-proxy when a TLS reverse proxy is in front "
            "(see docs/team.md)"
        )


def serve(
    config: MemmyConfig,
    host: str | None = None,
    port: int | None = None,
    log_level: str = "info",
    tls: TlsFiles | None = None,
    behind_proxy: bool = False,
) -> None:
    """Run the daemon in the foreground until SIGINT/SIGTERM; acknowledged writes are already committed.

    On a non-loopback ``host`` it is a team server: TLS (``tls``, or a proxy's with ``behind_proxy``) is required.
    """
    host = host or config.server.host
    port = port if port is not None else config.server.port
    check_exposure(host, config, tls, behind_proxy)
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for warning in config.warnings:
        log.warning("%s", warning)
    sqlite = config.storage.backend != "postgres"
    if sqlite:
        preflight(Path(config.storage.sqlite_path))  # a broken store file is refused before anything is written
    config = _with_token(config)
    ensure_port_free(host, port)
    lock = ServerLock(Path(config.storage.sqlite_path))
    if sqlite:  # one daemon per SQLite file (per host); daemons on one PostgreSQL database share it
        lock.path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(host, port)
    service: MemoryService | None = None
    try:
        service = MemoryService.open(config)
        migration = service.db.migration
        if migration.applied:
            log.info("migrated %s: %s", config.storage.location, ", ".join(migration.applied))
        if migration.backup_path:
            log.info("backup of the previous schema written to %s", migration.backup_path)
        service.start_background()
        app = create_app(
            service,
            shutdown=lambda: os.kill(os.getpid(), signal.SIGTERM),
            public=not is_loopback(host),
            behind_proxy=behind_proxy,
        )
        settle_heap()
        scheme = "https" if tls is not None else "http"
        log.info("memmy memory service on %s://%s:%d (db %s)", scheme, host, port, config.storage.location)
        server = _Server(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level=log_level.lower(),
                access_log=False,
                timeout_graceful_shutdown=10,
                ssl_certfile=tls.cert if tls else None,
                ssl_keyfile=tls.key if tls else None,
            )
        )
        server.run()
        if not server.started:
            raise ConfigError(f"could not listen on {host}:{port} (is the port already in use?)")
    finally:
        if service is not None:
            service.close()
        lock.release()
