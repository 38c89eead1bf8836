"""config.yaml loading: defaults, overrides, ${ENV}, profiles, and errors that name file, key and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memmy.config import load_config, reload_requires_restart, update_config_file
from memmy.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file(isolated_home: Path) -> None:
    config = load_config()
    assert config.path == isolated_home / ".memmy" / "config.yaml"
    assert not config.exists
    assert config.storage.sqlite_path == isolated_home / ".memmy" / "memory-service" / "memory.sqlite"
    assert config.server.port == 18960 and config.server.host == "127.0.0.1"
    assert config.embedding.provider == "local"
    retrieval = config.algorithm["retrieval"]
    assert (retrieval["tier1TopK"], retrieval["tier2TopK"], retrieval["tier3TopK"]) == (3, 5, 2)
    assert retrieval["mmrLambda"] == 0.7 and retrieval["tagFilter"] == "auto"
    assert config.algo("capture", "maxTextChars") == 4000
    assert config.algo("session", "mergeMaxGapMs") == 7_200_000
    assert config.algo("reward", "gamma") == 0.9
    assert not config.summary.configured


def test_file_values_env_refs_and_env_overrides(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(
        isolated_home / ".memmy" / "config.yaml",
        "memmyMemory:\n"
        "  storage:\n    token: ${MY_TOKEN}\n    sqlitePath: ~/data/m.sqlite\n"
        "  algorithm:\n    retrieval:\n      tier2TopK: 7\n      mmrLambda: 1\n"
        "  summary:\n    provider: openai_compatible\n    model: qwen\n    endpoint: http://127.0.0.1:1/v1\n",
    )
    monkeypatch.setenv("MY_TOKEN", "s3cret")
    monkeypatch.setenv("MEMMY_ENABLE_MEMORY_SEARCH", "false")
    monkeypatch.setenv("MEMMY_EMBEDDING_BATCH_SIZE", "8")
    config = load_config()
    assert config.path == path
    assert config.storage.token == "s3cret"
    assert config.storage.sqlite_path == isolated_home / "data" / "m.sqlite"
    assert config.algo("retrieval", "tier2TopK") == 7
    assert config.algo("retrieval", "mmrLambda") == 1.0  # an int is accepted for a float setting
    assert config.algorithm["enableMemorySearch"] is False
    assert config.embedding.batch_size == 8
    assert config.summary.configured
    # evolution inherits the summary model when it has none of its own
    assert config.evolution.model == "qwen" and config.evolution.max_tokens == 4096


def test_memmy_config_and_explicit_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = write(tmp_path / "env.yaml", "memmyMemory:\n  domain: research\n")
    flag_file = write(tmp_path / "flag.json", '{"memmyMemory": {"userId": "alice"}}')
    monkeypatch.setenv("MEMMY_CONFIG", str(env_file))
    assert load_config().domain == "research"
    explicit = load_config(flag_file)
    assert explicit.user_id == "alice" and explicit.domain == ""


def test_missing_env_reference_warns(isolated_home: Path) -> None:
    write(isolated_home / ".memmy" / "config.yaml", "memmyMemory:\n  embedding:\n    apiKey: ${NOPE_KEY}\n")
    config = load_config()
    assert config.embedding.api_key == ""
    assert any("NOPE_KEY" in w for w in config.warnings)


def test_profiles_merge_over_base(isolated_home: Path) -> None:
    write(
        isolated_home / ".memmy" / "config.yaml",
        "memmyMemory:\n  activeProfile: byok\n  profiles:\n    byok:\n      embedding:\n        batchSize: 4\n",
    )
    assert load_config().embedding.batch_size == 4


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "memmyMemory:\n  algorithm:\n    retrieval:\n      tier1TopK: lots\n",
            "memmyMemory.algorithm.retrieval.tier1TopK: expected an integer, got 'lots'",
        ),
        (
            "memmyMemory:\n  algorithm:\n    retrieval:\n      tagFilter: maybe\n",
            "memmyMemory.algorithm.retrieval.tagFilter: expected one of 'auto', 'on', 'off', got 'maybe'",
        ),
        (
            "memmyMemory:\n  algorithm:\n    enableMemoryAdd: 'yes'\n",
            "memmyMemory.algorithm.enableMemoryAdd: expected a boolean (true/false), got 'yes'",
        ),
        ("memmyMemory:\n  storage: 5\n", "memmyMemory.storage: expected a mapping, got 5"),
        ("memmyMemory:\n  server:\n    port: 70000\n", "memmyMemory.server.port: expected 1-65535"),
        (
            "memmyMemory:\n  algorithm:\n    capture:\n      maxTextChars: -3\n",
            "memmyMemory.algorithm.capture.maxTextChars: expected a value >= 0",
        ),
        ("memmyMemory: [1, 2\n", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping at the top level"),
    ],
)
def test_bad_config_names_file_key_and_expectation(isolated_home: Path, yaml_text: str, expected: str) -> None:
    path = write(isolated_home / ".memmy" / "config.yaml", yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config()
    assert str(path) in info.value.message
    assert expected in info.value.message


def test_bad_env_override_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMY_EMBEDDING_BATCH_SIZE", "many")
    with pytest.raises(ConfigError, match="MEMMY_EMBEDDING_BATCH_SIZE: expected an integer"):
        load_config()


def test_update_keeps_unrelated_keys_and_detects_restart(isolated_home: Path) -> None:
    path = write(isolated_home / ".memmy" / "config.yaml", "other: {keep: me}\nmemmyMemory:\n  domain: ''\n")
    before = load_config()
    update_config_file(path, {"storage": {"sqlitePath": str(isolated_home / "x.sqlite")}})
    raw = yaml.safe_load(path.read_text())
    assert raw["other"] == {"keep": "me"}
    after = load_config()
    assert reload_requires_restart(before, after)
    update_config_file(path, {"algorithm": {"retrieval": {"tier1TopK": 4}}})
    assert not reload_requires_restart(after, load_config())
    assert path.stat().st_mode & 0o777 == 0o600
