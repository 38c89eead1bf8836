"""The daemon's composition root: config -> store (+lock) -> service -> ASGI app -> uvicorn."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from memmy.config import MemmyConfig
from memmy.errors import ConfigError
from memmy.server.app import create_app
from memmy.service import MemoryService
from memmy.store.db import ServerLock

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


def serve(config: MemmyConfig, host: str | None = None, port: int | None = None, log_level: str = "info") -> None:
    """Run the daemon in the foreground until SIGINT/SIGTERM; acknowledged writes are already committed."""
    host = host or config.server.host
    port = port if port is not None else config.server.port
    if not is_loopback(host) and not config.storage.token:
        raise ConfigError(
            f"refusing to listen on non-loopback address {host} without a token: set storage.token in "
            f"{config.path} or MEMMY_MEMORY_TOKEN"
        )
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for warning in config.warnings:
        log.warning("%s", warning)
    ensure_port_free(host, port)
    lock = ServerLock(Path(config.storage.sqlite_path))
    lock.path.parent.mkdir(parents=True, exist_ok=True)
    lock.acquire(host, port)
    service: MemoryService | None = None
    try:
        service = MemoryService.open(config)
        migration = service.db.migration
        if migration.applied:
            log.info("migrated %s: %s", config.storage.sqlite_path, ", ".join(migration.applied))
        if migration.backup_path:
            log.info("backup of the previous schema written to %s", migration.backup_path)
        service.start_background()
        app = create_app(service, shutdown=lambda: os.kill(os.getpid(), signal.SIGTERM))
        log.info("memmy memory service on http://%s:%d (db %s)", host, port, config.storage.sqlite_path)
        server = _Server(
            uvicorn.Config(
                app, host=host, port=port, log_level=log_level.lower(), access_log=False, timeout_graceful_shutdown=10
            )
        )
        server.run()
        if not server.started:
            raise ConfigError(f"could not listen on {host}:{port} (is the port already in use?)")
    finally:
        if service is not None:
            service.close()
        lock.release()
