"""Fuzz the HTTP API with schemathesis, every check on, against a real daemon (target: 0 server errors, 0 findings).

    python bench/fuzz_api.py                      # 300 s (what `make fuzz` runs)
    python bench/fuzz_api.py --max-time 60        # a quick look
    python bench/fuzz_api.py --workers 1 --max-response-time 60

A daemon (``memmy-memory serve``) starts on a free port over a throw-away HOME with a token of its own and three
memories (so search and the key graph have something to find); then ``st run`` reads the daemon's
``/api/v1/openapi.json`` and runs all its phases (examples, coverage, fuzzing, stateful) with ``--checks all``
for ``--max-time`` seconds, sending the token as a header (so the ``ignored_auth`` check also probes each route
without it). Four routes are left out: ``admin/shutdown`` would end the run, ``admin/export``/``admin/import``
name files on the daemon's machine and ``admin/wipe`` empties the store the run is using
(tests/test_data_governance.py covers them).

``--max-response-time`` (default 30 s) is the limit of schemathesis' response-time check: on a shared two-core
machine a request may wait seconds behind others, which says nothing about the API. It prints the figures
(requests generated, server errors, findings by code) and the report directory (NDJSON, ``st replay`` ids), and
exits 1 when anything was found.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

SKIPPED = ("/api/v1/admin/shutdown", "/api/v1/admin/export", "/api/v1/admin/import", "/api/v1/admin/wipe")
SEED = (
    "The deploy script needs AWS_REGION set before terraform apply",
    "pytest fixtures live in tests/conftest.py; run one file with pytest -q tests/test_x.py",
    "Release branches are cut from main every second Tuesday",
)


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_daemon(home: Path, port: int, token: str, log: Path) -> subprocess.Popen[bytes]:
    """``memmy-memory serve`` over ``home``, healthy (or an exception with its log)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMMY_", "MEMORY_SERVICE_"))}
    env.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "MEMMY_MEMORY_TOKEN": token})
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "memmy", "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the daemon did not become healthy:\n{log.read_text()[-3000:]}")


def figures(output: str) -> dict[str, int]:
    """Requests generated, unique findings and findings per code (``ST101`` = server error) from st's summary."""
    found: dict[str, int] = {}
    cases = re.search(r"(\d+) generated(?:, (\d+) found (\d+) unique failures?)?", output)
    if cases:
        found["generated"] = int(cases.group(1))
        found["findings"] = int(cases.group(3) or 0)
    for code, count in re.findall(r"(ST\d+) [^:\n]+: (\d+)", output):
        found[code] = found.get(code, 0) + int(count)
    return found


def main() -> int:
    """Run the fuzzer; print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-time", type=int, default=300, help="seconds for the whole run (default 300)")
    parser.add_argument("--workers", default="2", help="concurrent workers (default 2)")
    parser.add_argument("--max-response-time", type=float, default=30.0, help="response-time check limit, seconds")
    parser.add_argument("--report-dir", type=Path, default=None, help="where the NDJSON report goes")
    args = parser.parse_args()
    st = Path(sys.executable).with_name("st")
    if not st.exists():
        print("schemathesis is not installed here: pip install -e '.[test]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="memmy-fuzz-") as tmp:
        home, port, token = Path(tmp), free_port(), f"fuzz-{secrets.token_hex(8)}"
        report_dir = (
            args.report_dir or Path(tempfile.gettempdir()) / f"memmy-fuzz-report-{time.strftime('%Y%m%dT%H%M%S')}"
        )
        daemon = start_daemon(home, port, token, home / "daemon.log")
        try:
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=60) as client:
                for text in SEED:
                    client.post("/api/v1/memory/add", json={"content": text}).raise_for_status()
            command = [
                str(st),
                "run",
                f"{base}/api/v1/openapi.json",
                "-H",
                f"Authorization: Bearer {token}",
                "--checks",
                "all",
                "--max-time",
                str(args.max_time),
                "--max-response-time",
                str(args.max_response_time),
                "--workers",
                str(args.workers),
                "--report",
                "ndjson",
                "--report-dir",
                str(report_dir),
                *(arg for path in SKIPPED for arg in ("--exclude-path", path)),
            ]
            started = time.monotonic()
            run = subprocess.run(command, capture_output=True, text=True, cwd=home)  # (its .schemathesis cache)
            elapsed = time.monotonic() - started
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        output = run.stdout + run.stderr
        found = figures(output)
        if found.get("findings"):
            print(output[output.find("FAILURES") :][:20000])
        codes = {k: v for k, v in found.items() if k.startswith("ST")}
        print(
            f"schemathesis --checks all, {elapsed:.0f} s: {found.get('generated', 0)} test cases, "
            f"{codes.get('ST101', 0)} server errors (5xx), {found.get('findings', 0)} findings {codes or ''}; "
            f"st exit {run.returncode}; report in {report_dir}"
        )
        return 0 if run.returncode == 0 and not found.get("findings") else 1


if __name__ == "__main__":
    sys.exit(main())
