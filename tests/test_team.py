"""A team server: TLS on a public address, per-person tokens, author on every memory, private vs team scope,
revocation, and the laptop's write-behind queue (hooks against a stopped, then started, real daemon)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import Daemon, free_port, store_query

OWNER_TOKEN = "owner-token-0123456789abcdef"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1/localhost and its key (the certificate is its own CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memmy team test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def memmy(
    home: Path, *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m memmy ...`` (or ``-m memmy.hook`` when the first argument is ``hook``) under ``home``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMMY_")}
    base.update({"HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), **(env or {})})
    if "MEMMY_MODEL_CACHE" in os.environ:
        base["MEMMY_MODEL_CACHE"] = os.environ["MEMMY_MODEL_CACHE"]
    module = ["-m", "memmy.hook", *args[1:]] if args and args[0] == "hook" else ["-m", "memmy", *args]
    return subprocess.run([sys.executable, *module], env=base, input=stdin, capture_output=True, text=True, timeout=120)


def test_a_public_address_needs_tls_or_a_proxy(tmp_path: Path) -> None:
    done = memmy(
        tmp_path, "serve", "--host", "0.0.0.0", "--port", str(free_port()), env={"MEMMY_MEMORY_TOKEN": OWNER_TOKEN}
    )
    assert done.returncode != 0
    assert "without TLS" in done.stderr and "--behind-proxy" in done.stderr


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A team server on 0.0.0.0 with its own TLS certificate (reached as https://127.0.0.1)."""
    home = tmp_path_factory.mktemp("team-home")
    cert, key = self_signed(home)
    server = Daemon(
        home=home,
        port=free_port(),
        token=OWNER_TOKEN,
        extra_args=["--host", "0.0.0.0", "--tls-cert", str(cert), "--tls-key", str(key)],
        ca=str(cert),
    )
    server.start()
    yield server
    if server.process and server.process.poll() is None:
        server.stop()


def add_person(team: Daemon, name: str) -> str:
    """``memmy-memory users add NAME`` against the server, over TLS verified with its CA; returns the token."""
    done = memmy(
        team.home,
        "--url",
        team.url,
        "--token",
        OWNER_TOKEN,
        "--json",
        "users",
        "add",
        name,
        env={"MEMMY_MEMORY_CA": str(team.ca)},
    )
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["token"])


def add(client: httpx.Client, content: str) -> str:
    response = client.post("/api/v1/memory/add", json={"content": content, "layer": "L1"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def found(client: httpx.Client, query: str) -> set[str]:
    response = client.post("/api/v1/memory/search", json={"query": query, "limit": 20, "scope": "pooled"})
    assert response.status_code == 200, response.text
    return {hit["id"] for hit in response.json()["hits"]}


def test_people_are_isolated_share_a_team_project_and_a_revoked_token_is_refused(team: Daemon) -> None:
    alice_token, bob_token = add_person(team, "alice"), add_person(team, "bob")
    assert alice_token != bob_token
    stored = [p.read_bytes() for p in (team.home / ".memmy").rglob("*") if p.is_file()]
    assert not any(alice_token.encode() in data for data in stored)  # only its hash is kept
    alice = team.client(alice_token)
    bob = team.client(bob_token)
    alice_team = team.client(alice_token, **{"x-memmy-team-project": "shop"})
    bob_team = team.client(bob_token, **{"x-memmy-team-project": "shop"})
    mine = add(alice, "alice private note: the zebrafish deploy key rotates on fridays")
    theirs = add(bob, "bob private note: the zebrafish staging box is slow on mondays")
    shared = add(alice_team, "team note: the zebrafish shop database is postgres with pgvector")
    team.drain()

    assert found(alice, "zebrafish") == {mine, shared}  # her own, the one she shared included
    assert theirs not in found(alice_team, "zebrafish")
    assert found(bob, "zebrafish") == {theirs}  # outside the team project: only his own
    assert found(bob_team, "zebrafish") == {theirs, shared}  # inside it: his own and the team's
    assert mine not in found(bob_team, "zebrafish")
    assert bob.get(f"/api/v1/memory/{mine}").status_code == 404  # another person's private memory: not there
    assert bob_team.get(f"/api/v1/memory/{shared}").status_code == 200
    assert bob_team.delete(f"/api/v1/memory/{shared}").status_code == 404  # read, never change another's

    owner = team.client()
    detail = owner.get(f"/api/v1/memory/{shared}").json()
    assert detail["author"] == "alice" and detail["visibility"] == "team"
    assert owner.get(f"/api/v1/memory/{theirs}").json()["author"] == "bob"
    assert alice.delete(f"/api/v1/memory/{mine}").status_code == 200
    audit = owner.get("/api/v1/logs", params={"kind": "audit", "limit": 50}).json()["items"]
    deleted = [a for a in audit if a["action"] == "memory.delete" and a["targetId"] == mine]
    assert deleted and deleted[0]["actor"]["userId"] == "alice"
    assert {(a["action"], a["targetId"]) for a in audit} >= {("team.user.add", "alice"), ("team.user.add", "bob")}

    assert bob.get("/api/v1/admin/users").status_code == 403  # people never reach the owner's routes
    assert bob.get(f"/api/v1/memory/{mine}/history").status_code == 403
    assert bob.post("/api/v1/panel/sign-in").status_code == 403
    listed = owner.get("/api/v1/admin/users").json()["items"]
    assert [m["name"] for m in listed] == ["alice", "bob"]
    assert owner.post("/api/v1/admin/users/bob/revoke").status_code == 200
    assert bob.post("/api/v1/memory/search", json={"query": "zebrafish"}).status_code == 401
    assert alice.post("/api/v1/memory/search", json={"query": "zebrafish"}).status_code == 200
    for client in (alice, bob, alice_team, bob_team, owner):
        client.close()


def test_plain_http_and_an_unknown_certificate_are_refused(team: Daemon) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(team.url.replace("https://", "http://") + "/api/v1/health", timeout=5)
    with pytest.raises(httpx.ConnectError):  # verification is on: a certificate no CA vouches for is refused
        httpx.get(team.url + "/api/v1/health", timeout=5)


def hook(home: Path, url: str, token: str, event: str, payload: dict[str, object]) -> None:
    """One Claude Code hook call (it always exits 0: fail-open)."""
    env = {"MEMMY_MEMORY_URL": url, "MEMMY_MEMORY_TOKEN": token, "MEMMY_HOOK_TIMEOUT_MS": "10000"}
    done = memmy(home, "hook", "claude_code", event, env=env, stdin=json.dumps(payload))
    assert done.returncode == 0, done.stderr


def turn(home: Path, url: str, token: str, n: int, workspace: Path) -> None:
    session = {"session_id": "laptop-session", "cwd": str(workspace)}
    hook(home, url, token, "UserPromptSubmit", {**session, "prompt": f"offline question number {n:02d} about quokkas"})
    hook(home, url, token, "Stop", {**session, "last_assistant_message": f"offline answer number {n:02d}"})


def traces(home: Path) -> list[str]:
    rows = store_query(home, "SELECT memory_value FROM memories WHERE memory_layer = 'L1' ORDER BY rowid")
    return [str(r[0]) for r in rows]


def test_turns_captured_while_the_server_is_down_are_delivered_once_in_order(tmp_path: Path) -> None:
    laptop = tmp_path / "laptop"
    workspace = laptop / "project"
    workspace.mkdir(parents=True)
    server = Daemon(home=tmp_path / "server", port=free_port(), token=OWNER_TOKEN)
    server.home.mkdir()
    server.start()
    turn(laptop, server.url, OWNER_TOKEN, 0, workspace)  # online: the session is open, the next turns reuse it
    server.stop()
    for n in range(1, 51):  # the server is not running: every turn goes to the outbox
        turn(laptop, server.url, OWNER_TOKEN, n, workspace)
    outbox = laptop / ".memmy" / "outbox"
    assert len([p for p in outbox.iterdir() if p.suffix == ".json"]) == 50
    sent_twice = sorted(p for p in outbox.iterdir() if p.suffix == ".json")[7].read_bytes()

    server.start()
    try:
        turn(laptop, server.url, OWNER_TOKEN, 51, workspace)  # the next hook call delivers what waits, then its own
        sync = memmy(laptop, "--json", "sync", env={"MEMMY_MEMORY_URL": server.url, "MEMMY_MEMORY_TOKEN": OWNER_TOKEN})
        assert sync.returncode == 0, sync.stderr
        assert not [p for p in outbox.iterdir() if p.suffix == ".json"]
        # A kill between the server's answer and the entry's removal sends it again: its key makes that a no-op.
        (outbox / "00000000000000000001-00000001-000000.json").write_bytes(sent_twice)
        again = memmy(laptop, "--json", "sync", env={"MEMMY_MEMORY_URL": server.url, "MEMMY_MEMORY_TOKEN": OWNER_TOKEN})
        assert json.loads(again.stdout)["delivered"] == 1
        stored = traces(server.home)
    finally:
        server.stop()
    numbers = [int(text.split("offline question number ")[1][:2]) for text in stored]
    assert numbers == list(range(52))  # each turn once, in the order it was captured


def test_a_laptop_joins_with_init_and_shares_one_project_through_its_hooks(team: Daemon, tmp_path: Path) -> None:
    carol_token, dave_token = add_person(team, "carol"), add_person(team, "dave")
    laptop = tmp_path / "carol-laptop"
    shared_repo, private_repo = laptop / "src" / "shop", laptop / "src" / "notes"
    for repo in (shared_repo, private_repo):
        (repo / ".git").mkdir(parents=True)
    (laptop / ".claude").mkdir()  # Claude Code is installed on the laptop
    joined = memmy(
        laptop,
        "init",
        "--url",
        team.url,
        "--token",
        carol_token,
        "--ca",
        str(team.ca),
        "--agent",
        "claude-code",
        "--no-model",
    )
    assert joined.returncode == 0, joined.stderr
    assert "(it answers)" in joined.stdout
    hook_json = json.loads((laptop / ".memmy" / "hook.json").read_text())
    assert hook_json["endpoint"] == team.url and hook_json["token"] == carol_token
    shared = memmy(laptop, "team", "share", "shop", "--path", str(shared_repo))
    assert shared.returncode == 0, shared.stderr

    for repo, word in ((shared_repo, "wombat"), (private_repo, "wombat")):
        session = {"session_id": f"carol-{repo.name}", "cwd": str(repo)}
        prompt = {**session, "prompt": f"how do we restart the {word} worker in {repo.name}?"}
        for event, payload in (("UserPromptSubmit", prompt), ("Stop", {**session, "last_assistant_message": "ok"})):
            done = memmy(
                laptop, "hook", "claude_code", event, env={"MEMMY_HOOK_TIMEOUT_MS": "10000"}, stdin=json.dumps(payload)
            )
            assert done.returncode == 0
    assert not (laptop / ".memmy" / "outbox").exists() or not list((laptop / ".memmy" / "outbox").glob("*.json"))
    team.drain()

    dave = team.client(dave_token, **{"x-memmy-team-project": "shop"})
    seen = dave.post("/api/v1/memory/search", json={"query": "restart the wombat worker", "scope": "pooled"})
    texts = [hit["snippet"] for hit in seen.json()["hits"]]
    assert any("shop" in text for text in texts) and not any("notes" in text for text in texts)
    owner = team.client()
    for hit in seen.json()["hits"]:
        assert owner.get(f"/api/v1/memory/{hit['id']}").json()["author"] == "carol"
    dave.close()
    owner.close()


def test_a_person_cannot_use_another_persons_session(team: Daemon) -> None:
    eve, frank = team.client(add_person(team, "eve")), team.client(add_person(team, "frank"))
    assert eve.post("/api/v1/sessions/open", json={"sessionId": "eve-session", "source": "cli"}).status_code == 200
    start = {"sessionId": "eve-session", "turnId": "t1", "query": "what did eve do yesterday?"}
    assert frank.post("/api/v1/turns/start", json=start).status_code == 404
    complete = {"sessionId": "eve-session", "query": "q", "answer": "a"}
    assert frank.post("/api/v1/turns/t1/complete", json=complete).status_code == 404
    assert frank.post("/api/v1/sessions/open", json={"sessionId": "eve-session"}).status_code == 409
    assert eve.post("/api/v1/turns/start", json=start).status_code == 200
    eve.close()
    frank.close()


def test_behind_a_proxy_only_forwarded_https_requests_are_served(tmp_path: Path) -> None:
    server = Daemon(home=tmp_path, port=free_port(), token=OWNER_TOKEN, extra_args=["--behind-proxy"])
    server.start()
    try:
        with server.client() as client:
            proxied = {"x-forwarded-for": "203.0.113.9", "host": "memmy.example.com"}
            plain = client.get("/api/v1/health", headers=proxied)
            assert plain.status_code == 403 and "TLS proxy" in plain.json()["error"]["message"]
            forwarded = client.get("/api/v1/health", headers={**proxied, "x-forwarded-proto": "https"})
            assert forwarded.status_code == 200  # under the public name: no loopback Host check behind the proxy
            assert client.get("/api/v1/health").status_code == 200  # on the server itself, not through the proxy
    finally:
        server.stop()


def test_mcp_starts_and_fails_open_while_the_team_server_is_unreachable(tmp_path: Path) -> None:
    from mcp import Client

    from tests.test_mcp import refused, stdio, stdio_env, with_client

    # 127.0.0.2 is not this machine's daemon address: a team server elsewhere, and nothing listens there.
    env = stdio_env(tmp_path, f"https://127.0.0.2:{free_port()}", "alice-token")

    async def session(client: Client) -> str:
        return refused(await client.call_tool("memmy_memory_search", {"query": "quokka"}))

    assert with_client(stdio(env, cwd=tmp_path), session)
    assert not (tmp_path / ".memmy" / "logs" / "daemon-autostart.log").exists()  # no local daemon was started


class _BadGateway(BaseHTTPRequestHandler):
    """A reverse proxy whose memory server is down: 502 to every request."""

    def _refuse(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(502)
        self.send_header("content-length", "0")
        self.end_headers()

    do_GET = do_POST = _refuse

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_a_proxys_bad_gateway_queues_the_turn_too(fresh_daemon: Daemon, tmp_path: Path) -> None:
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    laptop, workspace = tmp_path / "laptop", tmp_path / "laptop" / "project"
    workspace.mkdir(parents=True)
    try:
        turn(laptop, f"http://127.0.0.1:{proxy.server_port}", OWNER_TOKEN, 0, workspace)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert len(list((laptop / ".memmy" / "outbox").glob("*.json"))) == 1
    fresh_daemon.token = OWNER_TOKEN
    fresh_daemon.start()
    env = {"MEMMY_MEMORY_URL": fresh_daemon.url, "MEMMY_MEMORY_TOKEN": OWNER_TOKEN}
    assert json.loads(memmy(laptop, "--json", "sync", env=env).stdout)["delivered"] == 1
    stored = traces(fresh_daemon.home)
    assert len(stored) == 1 and "offline question number 00" in stored[0]


def test_init_refuses_a_plain_http_team_server(tmp_path: Path) -> None:
    url = "http://memmy.example.com:18960"
    done = memmy(tmp_path, "init", "--url", url, "--token", "t", "--no-agents", "--no-model")
    assert done.returncode != 0 and "HTTPS only" in done.stderr
    assert not (tmp_path / ".memmy" / "config.yaml").exists()  # nothing written


def remember(client: httpx.Client, content: str, *keys: str) -> str:
    response = client.post("/api/v1/keys/remember", json={"content": content, "keys": list(keys)})
    assert response.status_code == 200, response.text
    return str(response.json()["saved"])


def test_a_persons_key_graph_is_theirs_and_their_team_projects(team: Daemon) -> None:
    gina_token, hank_token = add_person(team, "gina"), add_person(team, "hank")
    gina, hank = team.client(gina_token), team.client(hank_token)
    gina_team = team.client(gina_token, **{"x-memmy-team-project": "garage"})
    hank_team = team.client(hank_token, **{"x-memmy-team-project": "garage"})
    private = remember(gina, "gina's own note: the garage alarm code is kept in her password manager", "garage alarm")
    shared = remember(gina_team, "team note: the garage door opener resets with the red button", "garage door")
    hank_own = remember(hank, "hank's own note: the garage bike rack wobbles", "garage rack")
    team.drain()

    def listed(client: httpx.Client) -> set[str]:
        answer = client.post("/api/v1/keys/list_memories", json={"limit": 100})
        assert answer.status_code == 200, answer.text
        return {str(m["memory_id"]) for m in answer.json()["memories"]}

    assert listed(gina) == {private, shared} and listed(hank) == {hank_own}  # what each person wrote
    assert listed(hank_team) == listed(gina_team) == {shared}  # the team project's graph is shared
    recalled = hank_team.post("/api/v1/keys/recall", json={"query": "garage door"}).json()
    assert [m["memory_id"] for m in recalled["memories"]] == [shared] and "red button" in json.dumps(recalled)
    missed = hank.post("/api/v1/keys/recall", json={"query": "garage alarm"}).json()
    assert private not in json.dumps(missed)  # another person's private memory never shows through a key
    for op, body in (
        ("read_memory", {"memory_id": private}),
        ("related", {"memory_id": private}),
        ("confirm_memory", {"memory_id": shared, "evidence": "seen"}),  # a teammate reads team memories only
        ("correct", {"memory_id": shared, "content": "hank says: it resets with the blue button"}),
        ("forget", {"memory_id": shared}),
    ):
        assert hank_team.post(f"/api/v1/keys/{op}", json=body).status_code == 404, op
    assert hank_team.post("/api/v1/keys/read_memory", json={"memory_id": shared}).status_code == 200
    owner = team.client()
    detail = owner.get(f"/api/v1/memory/{shared}").json()
    assert detail["author"] == "gina" and detail["visibility"] == "team"
    assert owner.get(f"/api/v1/memory/{private}").json()["visibility"] == "private"
    for client in (gina, hank, gina_team, hank_team, owner):
        client.close()


def test_a_persons_mcp_tools_act_as_that_person(team: Daemon) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.test_mcp import data

    ines_token, jack_token = add_person(team, "ines"), add_person(team, "jack")
    private = add(team.client(jack_token), "jack private note: the capybara cluster password hint is blue")

    async def session() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
        headers = {"authorization": f"Bearer {ines_token}", "x-memmy-team-project": "zoo"}
        async with httpx2.AsyncClient(headers=headers, timeout=120, verify=team.verify()) as http:
            async with Client(streamable_http_client(f"{team.url}/mcp", http_client=http)) as client:
                added = data(await client.call_tool("memmy_memory_add", {"content": "zoo note: capybaras eat at 9"}))
                saved = data(await client.call_tool("remember", {"content": "zoo: capybara pen gate", "keys": ["pen"]}))
                found = data(await client.call_tool("memmy_memory_search", {"query": "capybara", "scope": "pooled"}))
                return added, saved, found

    added, saved, found = anyio.run(session)
    owner = team.client()
    for memory_id in (str(added["id"]), str(saved["saved"])):
        detail = owner.get(f"/api/v1/memory/{memory_id}").json()
        assert detail["author"] == "ines" and detail["visibility"] == "team" and detail["projectId"] == "zoo"
    assert private not in json.dumps(found)  # jack's private memory is not ines's to read
    owner.close()


def test_the_owners_panel_shows_who_did_what_and_a_person_is_told_it_is_the_owners(team: Daemon) -> None:
    kate = team.client(add_person(team, "kate"))
    written = add(kate, "kate note: the okapi feeder jams when it rains")
    assert kate.delete(f"/api/v1/memory/{written}").status_code == 200
    refused = kate.post("/api/v1/panel/sign-in")
    assert refused.status_code == 403 and "the panel is the team server owner's" in refused.json()["error"]["message"]
    owner = team.client()
    link = owner.post("/api/v1/panel/sign-in").json()["url"]
    path = "/panel/" + link.split("/panel/", 1)[1]
    assert owner.get(path).status_code == 303  # the one-time link sets the panel's cookie
    page = owner.get(f"/panel/memories/{written}")
    assert page.status_code == 200, page.text
    assert "kate" in page.text  # the author, and the person behind each change in the memory's history
    assert re.search(r"memory\.delete \([^)]*kate", page.text), page.text
    logs = owner.get("/panel/logs")
    assert re.search(r"memory\.delete</td><td>[^<]*kate", logs.text), logs.text
    kate.close()
    owner.close()


def test_a_fix_learned_in_a_team_project_reaches_the_team_and_a_private_one_never_does(fresh_daemon: Daemon) -> None:
    from tests.test_evolution_scenario import ENGLISH, drain, policies, run_episode, write_config

    fresh_daemon.token = OWNER_TOKEN
    fresh_daemon.extra_env["MEMMY_CONFIG"] = str(write_config(fresh_daemon.home))
    fresh_daemon.start()
    owner = fresh_daemon.client()
    tokens = {n: owner.post("/api/v1/admin/users", json={"name": n}).json()["token"] for n in ("amy", "ben")}
    amy_team = fresh_daemon.client(tokens["amy"], **{"x-memmy-team-project": "billing"})
    amy = fresh_daemon.client(tokens["amy"])
    for client in (amy_team, amy):  # the same failure -> fix, three times, in the team project and in her own
        for package in ENGLISH.packages:
            run_episode(client, ENGLISH, package)
            drain(owner)

    found = policies(owner)
    team = [p for p in found if p["visibility"] == "team"]
    private = [p for p in found if p["visibility"] != "team"]
    assert team and private, [(p["visibility"], p["projectId"], p["author"]) for p in found]
    for policy in team:  # the team's: written by the derivation, fed by amy's team-project traces only
        assert policy["author"] == "memmy:derived" and policy["projectId"] == "billing"
        assert policy["properties"]["provenance"]["people"] == ["amy"]
    described = [(p["author"], p["projectId"], p["properties"]["policy"]["type"], p["status"]) for p in private]
    assert all(p["author"] == "amy" and p["projectId"] != "billing" for p in private), described

    def recalled(client: httpx.Client, **opened: str) -> set[str]:
        session = client.post("/api/v1/sessions/open", json=opened).json()["sessionId"]
        started = client.post("/api/v1/turns/start", json={"sessionId": session, "query": ENGLISH.task})
        assert started.status_code == 200, started.text
        return set(started.json()["sourceMemoryIds"])

    ben_team = fresh_daemon.client(tokens["ben"], **{"x-memmy-team-project": "billing"})
    ben = fresh_daemon.client(tokens["ben"])
    in_team = recalled(ben_team)
    assert {p["id"] for p in team} & in_team  # ben's agent in the team project gets amy's fix
    private_ids = {p["id"] for p in private}
    assert not private_ids & in_team
    assert not private_ids & recalled(ben, workspacePath="/work/billing")  # even in a folder of the same name
    assert private_ids & recalled(amy, workspacePath="/work/billing")  # it is amy's own
    for client in (owner, amy_team, amy, ben_team, ben):
        client.close()
